"""Spreads the rows of sampled items over many batches (independent replay samples).

An item of the transition layout holds every env of one vector step, so a batch made
of whole items holds few vector steps (4 with 16 envs and 64 rows), far from the ~55
that sampling 64 of 3,200 stored transitions one by one gives. Fetching one item per
transition instead costs ~10x in Reverb's pipeline (its per-item overhead, not bytes,
is the bound). So items are sampled whole, as before, and their rows pass through a
shuffle buffer of `buffer_rows` rows before being rebatched: a batch then draws its
rows from dozens of items, and every sampled row is still trained on exactly once, so
each stored transition stays equally likely and `samples_per_insert` keeps its meaning.

The cost is staleness: a row waits in the buffer for about `buffer_rows / batch_size`
train steps, and the buffer must fill (buffer_rows / rows_per_item item samples) before
the first batch, which the table's rate limiter must allow (`fill_items`).
"""
import tensorflow as tf

# Default buffer: this many batches' rows. 32 batches of 64 rows give ~49 distinct
# vector steps per batch from a table of 3,200 transitions of 16 envs (uniform
# sampling of single transitions: ~55), at a lag of ~32 train steps
# (benchmarks/replay_independence.py).
DEFAULT_BUFFER_BATCHES = 32
# The buffer is refreshed in this many swaps (see `batches_per_swap`).
SWAPS_PER_BUFFER = 4


def buffer_rows_for(batch_size: int, buffer_batches: int = DEFAULT_BUFFER_BATCHES) -> int:
  """The shuffle buffer's rows for batches of `batch_size` rows (0: no mixing)."""
  return max(buffer_batches, 0) * batch_size


def fill_items(buffer_rows: int, rows_per_item: int) -> int:
  """Item samples the buffer takes before its first batch (rate-limiter slack)."""
  return -(-buffer_rows // rows_per_item) if buffer_rows else 0


def batches_per_swap(batch_size: int, buffer_rows: int) -> int:
  """Batches `mix_rows` swaps per step: a quarter of the buffer's, so the per-element
  costs of tf.data are paid once per several batches."""
  return max(1, buffer_rows // batch_size // SWAPS_PER_BUFFER)


def mix_rows(dataset: tf.data.Dataset, batch_size: int, buffer_rows: int
             ) -> tf.data.Dataset:
  """Rebatches a dataset of row chunks through a buffer of `buffer_rows` rows.

  A vectorized shuffle buffer: the first incoming chunks fill it; then each incoming
  chunk of `batches_per_swap(batch_size, buffer_rows)` batches' rows swaps places with
  as many distinct random slots, whose rows come out as that many batches. Every row comes out exactly once, after a
  random wait of about `buffer_rows / batch_size` batches (as `tf.data`'s shuffle, with
  a few ops per chunk instead of several per row).

  Args:
    dataset: `(experience, info)` chunks of `batches_per_swap(...) * batch_size` rows
      (statically shaped).
    batch_size: rows per output batch.
    buffer_rows: rows held in the buffer, rounded up to whole chunks (<= batch_size:
      the dataset is returned unchanged).

  Returns:
    A dataset of `(experience, info)` batches of `batch_size` rows.
  """
  if buffer_rows <= batch_size:
    return dataset
  per_swap = batches_per_swap(batch_size, buffer_rows)
  chunk = per_swap * batch_size
  fill_chunks = -(-buffer_rows // chunk)
  size = fill_chunks * chunk
  buffer = tf.nest.map_structure(
      lambda s: tf.zeros([size] + s.shape[1:].as_list(), s.dtype), dataset.element_spec)

  # No Python control flow on tensors (tf.cond is explicit): AutoGraph, tf.data's default,
  # would change nothing, and converting these functions costs start-up time.
  @tf.autograph.experimental.do_not_convert
  def step(state, rows):
    filled, stored = state

    def fill():
      slots = tf.range(filled * chunk, (filled + 1) * chunk)[:, None]
      return slots, rows  # the output is dropped

    def swap():
      slots = tf.random.shuffle(tf.range(size))[:chunk][:, None]
      return slots, tf.nest.map_structure(lambda b: tf.gather_nd(b, slots), stored)

    slots, out = tf.cond(filled < fill_chunks, fill, swap)
    stored = tf.nest.map_structure(
        lambda b, x: tf.tensor_scatter_nd_update(b, slots, x), stored, rows)
    return (tf.minimum(filled + 1, fill_chunks), stored), (filled >= fill_chunks, out)

  split = lambda x: tf.reshape(x, [per_swap, batch_size] + x.shape[1:].as_list())
  not_converted = tf.autograph.experimental.do_not_convert
  return (dataset.scan((tf.constant(0), buffer), step)
          .filter(not_converted(lambda ready, _: ready))
          .map(not_converted(lambda _, out: tf.nest.map_structure(split, out)))
          .unbatch())

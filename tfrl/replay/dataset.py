"""`make_dataset`: batches of `(experience, info)` rows sampled from a Reverb table.

A "row" is what a learner trains on: one transition or one unroll. Writers pack G rows
into one Reverb item (see `tfrl.replay.writers`); the dataset samples items and unpacks
them, so `batch_size` is always counted in rows. How an item holds its rows is the data
layout's to say (`tfrl.layouts`: `rows_per_item`, `time_major`), never guessed from
shapes. `info` has one entry per row: the item's `key`, sampling `probability`,
`table_size`, `priority`, `times_sampled`, and the `policy_version` that produced the
row.
"""
from typing import Any, Dict, Optional, Sequence, Tuple

import reverb
import tensorflow as tf
import tree
from tf_agents.trajectories import time_step as ts

from tfrl.replay import mixing
from tfrl.replay import server as server_lib
from tfrl.replay import writers

class SpecMismatchError(ValueError):
  """The table on the server stores items of another structure than expected."""


def check_table_signature(server_address: str, table_name: str, item_signature: Any,
                          timeout_s: float = server_lib.DEFAULT_CONNECT_TIMEOUT_S) -> None:
  """Raises `SpecMismatchError` unless the server's table stores `item_signature` items.

  Raises:
    SpecMismatchError: missing table, or a different structure, shape or dtype.
    ReplayServerUnreachableError: the server did not answer within `timeout_s`.
  """
  info = server_lib.wait_for_server(server_address, timeout_s)
  if table_name not in info:
    raise SpecMismatchError(
        f'The Reverb server at {server_address} has no table {table_name!r} '
        f'(it has: {", ".join(sorted(info))}).')
  stored = info[table_name].signature
  expected = [('/'.join(str(p) for p in path), spec)
              for path, spec in tree.flatten_with_path(item_signature)]
  stored_flat = tf.nest.flatten(stored) if stored is not None else []
  problem = None
  if len(stored_flat) != len(expected):
    problem = (f'it stores {len(stored_flat)} tensors per item, this program expects '
               f'{len(expected)}')
  else:
    for (path, want), have in zip(expected, stored_flat):
      if want.dtype != have.dtype or not want.shape.is_compatible_with(have.shape):
        problem = (f'{path}: the table has {have.dtype.name}{have.shape.as_list()}, '
                   f'this program expects {want.dtype.name}{want.shape.as_list()}')
        break
  if problem:
    raise SpecMismatchError(
        f'Table {table_name!r} on {server_address} does not match this program: {problem}. '
        'The server and this program were configured with different environments, agents '
        'or writer settings (num_envs / envs_per_item / n-step / sequence length).')


def valid_mask(experience: Any) -> tf.Tensor:
  """1.0 for transition rows that are real experience, 0.0 for boundary rows."""
  return tf.cast(experience.step_type[:, 0] != ts.StepType.LAST, tf.float32)


# The dataset functions here have no Python control flow on tensors, so AutoGraph would
# change nothing in them; converting them (tf.data's default) took about half of the
# time to build a Learner's input pipeline at start-up.
_NOT_CONVERTED = tf.autograph.experimental.do_not_convert


def _unpack_rows(rows_per_item: int, time_major: bool):
  """Returns a map fn turning a batch of items into a batch of rows.

  Items are [G, ...] (G rows each) or, time-major, [T, G, ...] (G unrolls of T steps).
  """

  def merge(x):
    if time_major:  # [B, T, G, ...] -> [B, G, T, ...]
      perm = [0, 2, 1] + list(range(3, x.shape.rank))
      x = tf.transpose(x, perm)
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([[-1], shape[2:]], axis=0))

  @_NOT_CONVERTED
  def unpack(sample: reverb.ReplaySample):
    data = sample.data
    experience = tf.nest.map_structure(merge, data[writers.EXPERIENCE])
    info = {name: tf.repeat(getattr(sample.info, name), rows_per_item)
            for name in reverb.replay_sample.SampleInfo._fields}
    info[writers.POLICY_VERSION] = merge(data[writers.POLICY_VERSION])
    if writers.POLICY_STATE in data:  # [B, G, ...] -> [B * G, ...]: one per unroll
      info[writers.POLICY_STATE] = tf.nest.map_structure(
          lambda x: tf.reshape(x, [-1] + x.shape[2:].as_list()), data[writers.POLICY_STATE])
    return experience, info

  return unpack


def make_dataset(server_address: str,
                 table_name: str,
                 item_signature: Dict[str, Any],
                 batch_size: int,
                 *,
                 rows_per_item: int,
                 time_major: bool,
                 experience_spec: Any = None,
                 num_parallel_readers: int = 1,
                 max_in_flight_samples_per_worker: Optional[int] = None,
                 rate_limiter_timeout_ms: int = -1,
                 prefetch: int = tf.data.AUTOTUNE,
                 check_signature: bool = True,
                 shuffle_rows: int = 0) -> tf.data.Dataset:
  """Returns a dataset of `(experience, info)` batches of `batch_size` rows.

  Args:
    server_address: 'host:port' of the Reverb server.
    table_name: the table to sample.
    item_signature: the writer's `item_signature(...)` (what the table stores).
    batch_size: rows per batch; must be a multiple of `rows_per_item`.
    rows_per_item: rows (transitions or unrolls) in one item (the layout's G).
    time_major: items are [T, G, ...] unrolls (sequence layouts), not [G, ...] rows.
    experience_spec: when given (e.g. `agent.collect_data_spec`), experience is
      repacked into its structure (so it is a tf-agents `Trajectory` again).
    num_parallel_readers: Reverb sample streams interleaved into the dataset.
    max_in_flight_samples_per_worker: samples requested ahead per stream
      (default: 2 batches' worth of items).
    rate_limiter_timeout_ms: how long a sample may wait on the table's rate limiter
      before the dataset ends (-1: wait forever, as a learner fed by actors does).
    prefetch: batches prepared ahead of the learner.
    check_signature: compare the server's table signature with `item_signature`
      first, so a mismatch fails here with a clear message.
    shuffle_rows: with more rows than `batch_size`, the sampled items' rows pass
      through a shuffle buffer of this many rows before batching, so a batch draws
      from many items (`tfrl.replay.mixing`); 0 (the default): batches of whole items.

  Returns:
    A `tf.data.Dataset`, ready for `strategy.distribute_datasets_from_function`.

  Raises:
    SpecMismatchError: the table does not store `item_signature` items.
    ValueError: `batch_size` is not a multiple of `rows_per_item`, or the signature's
      rows per item is not `rows_per_item`.
  """
  stored_rows = item_signature[writers.POLICY_VERSION].shape[-1]
  if stored_rows != rows_per_item:
    raise ValueError(f'Table {table_name!r} items hold {stored_rows} rows by their '
                     f'signature, not rows_per_item={rows_per_item}.')
  if batch_size % rows_per_item:
    raise ValueError(
        f'batch_size={batch_size} must be a multiple of the {rows_per_item} rows each item '
        f'of table {table_name!r} holds; choose another batch size or envs_per_item.')
  if check_signature:
    check_table_signature(server_address, table_name, item_signature)
  items_per_batch = batch_size // rows_per_item
  if shuffle_rows > batch_size:  # items are fetched in chunks of several batches
    items_per_batch *= mixing.batches_per_swap(batch_size, shuffle_rows)
  in_flight = max_in_flight_samples_per_worker or max(2 * items_per_batch, 2)
  dtypes = tf.nest.map_structure(lambda s: s.dtype, item_signature)
  shapes = tf.nest.map_structure(lambda s: s.shape, item_signature)

  def reader(_):
    return reverb.TrajectoryDataset(
        server_address=server_address, table=table_name, dtypes=dtypes, shapes=shapes,
        max_in_flight_samples_per_worker=in_flight,
        rate_limiter_timeout_ms=rate_limiter_timeout_ms)

  if num_parallel_readers > 1:
    dataset = tf.data.Dataset.range(num_parallel_readers).interleave(
        reader, cycle_length=num_parallel_readers, block_length=items_per_batch,
        num_parallel_calls=num_parallel_readers, deterministic=False)
  else:
    dataset = reader(0)
  dataset = dataset.batch(items_per_batch, drop_remainder=True)
  dataset = dataset.map(_unpack_rows(rows_per_item, time_major),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
  dataset = mixing.mix_rows(dataset, batch_size, shuffle_rows)
  if experience_spec is not None:
    dataset = dataset.map(_NOT_CONVERTED(lambda exp, info: (
        tf.nest.pack_sequence_as(experience_spec, tf.nest.flatten(exp)), info)))
  return dataset.prefetch(prefetch)


TABLE_INDEX = 'table_index'


def make_mixed_dataset(server_address: str,
                       rows_per_table: Sequence[Tuple[str, int]],
                       item_signature: Dict[str, Any],
                       *,
                       rows_per_item: int,
                       time_major: bool,
                       experience_spec: Any = None,
                       rate_limiter_timeout_ms: int = -1,
                       shuffle_rows: Sequence[int] = ()) -> tf.data.Dataset:
  """Batches whose rows come from several tables, in a fixed share per table.

  Each batch concatenates, in the order given, `rows` rows sampled from each table
  (e.g. CLEAR's fresh unrolls from a queue, then replayed ones from a replay table);
  `info[TABLE_INDEX]` (int32, one per row) says which entry of `rows_per_table` a row
  came from. Every table must store `item_signature` items.

  Args:
    server_address: 'host:port' of the Reverb server.
    rows_per_table: (table name, rows per batch) pairs; each `rows` a multiple of the
      rows per item.
    item_signature, rows_per_item, time_major, experience_spec,
      rate_limiter_timeout_ms: see `make_dataset`.
    shuffle_rows: per table, its rows' shuffle buffer (`make_dataset`); default none.

  Returns:
    A `tf.data.Dataset` of `(experience, info)` batches of sum(rows) rows.

  Raises:
    ValueError: no tables, or a table's rows that are not positive.
  """
  if not rows_per_table:
    raise ValueError('make_mixed_dataset needs at least one (table, rows) pair.')
  parts = []
  for index, (table, rows) in enumerate(rows_per_table):
    if rows <= 0:
      raise ValueError(f'Table {table!r} is asked for {rows} rows per batch; a mixed '
                       'batch needs at least one row (one item) from each table.')
    dataset = make_dataset(server_address, table, item_signature, rows,
                           rows_per_item=rows_per_item, time_major=time_major,
                           experience_spec=experience_spec,
                           rate_limiter_timeout_ms=rate_limiter_timeout_ms,
                           shuffle_rows=shuffle_rows[index] if shuffle_rows else 0)
    parts.append(dataset.map(_NOT_CONVERTED(lambda exp, info, index=index, rows=rows: (
        exp, dict(info, **{TABLE_INDEX: tf.fill([rows], index)})))))
  if len(parts) == 1:
    return parts[0]
  return tf.data.Dataset.zip(tuple(parts)).map(_NOT_CONVERTED(
      lambda *batches: tf.nest.map_structure(lambda *x: tf.concat(x, 0), *batches)))


"""Reverb table factories for the three training styles, plus the variables table.

Rate limiting is a first-class setting: off-policy tables take `samples_per_insert`
(with an error buffer), which sets how many times each item is sampled on average and
therefore the ratio of training to collection, independent of process speeds.
"""
import random
from typing import Any, Optional

import reverb
import tensorflow as tf

VARIABLES_TABLE = 'variables'


def rate_limiter(min_size_to_sample: int = 1,
                 samples_per_insert: Optional[float] = None,
                 error_buffer: Optional[float] = None) -> reverb.rate_limiters.RateLimiter:
  """Returns a MinSize limiter, or a SampleToInsertRatio one when `samples_per_insert`.

  Args:
    min_size_to_sample: no sample is served before the table holds this many items.
    samples_per_insert: target average number of samples of each item; None for no
      ratio (sampling and inserting run at their own speeds).
    error_buffer: how far (in samples) the ratio may drift before the faster side is
      blocked; defaults to max(2 * min_size_to_sample, 10 * samples_per_insert), loose
      enough that a lone actor and a lone learner do not block each other at start.

  Returns:
    A reverb rate limiter.

  Raises:
    ValueError: for a non-positive `samples_per_insert` or `min_size_to_sample` < 1.
  """
  if min_size_to_sample < 1:
    raise ValueError(f'min_size_to_sample must be >= 1, got {min_size_to_sample}.')
  if samples_per_insert is None:
    return reverb.rate_limiters.MinSize(min_size_to_sample)
  if samples_per_insert <= 0:
    raise ValueError(f'samples_per_insert must be > 0, got {samples_per_insert}.')
  if error_buffer is None:
    error_buffer = default_error_buffer(min_size_to_sample, samples_per_insert)
  return reverb.rate_limiters.SampleToInsertRatio(
      samples_per_insert=samples_per_insert,
      min_size_to_sample=min_size_to_sample,
      error_buffer=error_buffer)


def default_error_buffer(min_size_to_sample: int, samples_per_insert: float) -> float:
  """`rate_limiter`'s default slack: max(2 * min_size_to_sample, 10 * samples_per_insert)."""
  return max(2.0 * min_size_to_sample, 10.0 * samples_per_insert)


def _replay_table(name: str, sampler: Any,
                  remover: Any, max_size: int, signature: Any,
                  min_size_to_sample: int, samples_per_insert: Optional[float],
                  error_buffer: Optional[float]) -> reverb.Table:
  return reverb.Table(
      name=name,
      sampler=sampler,
      remover=remover,
      max_size=int(max_size),
      rate_limiter=rate_limiter(min_size_to_sample, samples_per_insert, error_buffer),
      signature=signature)


def uniform_table(name: str,
                  max_size: int,
                  signature: Any,
                  min_size_to_sample: int = 1,
                  samples_per_insert: Optional[float] = None,
                  error_buffer: Optional[float] = None) -> reverb.Table:
  """A replay table: uniform sampling, oldest item evicted first.

  Args:
    name: table name.
    max_size: capacity in items.
    signature: the item signature (see `tfrl.replay.writers`' `item_signature`s).
    min_size_to_sample, samples_per_insert, error_buffer: see `rate_limiter`.

  Returns:
    A `reverb.Table`.
  """
  return _replay_table(name, reverb.selectors.Uniform(), reverb.selectors.Fifo(), max_size,
                       signature, min_size_to_sample, samples_per_insert, error_buffer)


def reservoir_table(name: str,
                    max_size: int,
                    signature: Any,
                    min_size_to_sample: int = 1,
                    samples_per_insert: Optional[float] = None,
                    error_buffer: Optional[float] = None) -> reverb.Table:
  """A replay table that keeps a uniform random sample of everything ever inserted.

  Reservoir sampling, as CLEAR keeps its replay: once full, the table holds each of
  the items inserted so far with the same probability, so old experience stays as
  likely as new (FIFO eviction keeps only the recent past). Writers must insert each
  item with an independent uniform random priority (`reservoir_priority`); the table
  evicts the item with the smallest one (a min-heap remover), which keeps the
  `max_size` items with the largest keys: a uniform random subset. Sampling is uniform
  and ignores the priorities.

  Args:
    name: table name.
    max_size: capacity in items.
    signature: the item signature.
    min_size_to_sample, samples_per_insert, error_buffer: see `rate_limiter`.

  Returns:
    A `reverb.Table`.
  """
  return _replay_table(name, reverb.selectors.Uniform(), reverb.selectors.MinHeap(),
                       max_size, signature, min_size_to_sample, samples_per_insert,
                       error_buffer)


def reservoir_priority() -> float:
  """A new item's key in a `reservoir_table`: uniform in [0, 1)."""
  return random.random()


def prioritized_table(name: str,
                      max_size: int,
                      signature: Any,
                      priority_exponent: float = 0.6,
                      min_size_to_sample: int = 1,
                      samples_per_insert: Optional[float] = None,
                      error_buffer: Optional[float] = None) -> reverb.Table:
  """A prioritized replay table: P(i) ~ priority_i ** priority_exponent.

  Args:
    name: table name.
    max_size: capacity in items.
    signature: the item signature.
    priority_exponent: alpha of prioritized replay (0 is uniform).
    min_size_to_sample, samples_per_insert, error_buffer: see `rate_limiter`.

  Returns:
    A `reverb.Table`.
  """
  return _replay_table(name, reverb.selectors.Prioritized(priority_exponent),
                       reverb.selectors.Fifo(), max_size, signature, min_size_to_sample,
                       samples_per_insert, error_buffer)


def queue_table(name: str, max_size: int, signature: Any) -> reverb.Table:
  """A FIFO queue: each item is sampled exactly once, in insertion order.

  For on-policy and IMPALA-style learners. Writers block (up to their flush timeout)
  while the queue is full, which bounds how stale the queued data can get.

  Args:
    name: table name.
    max_size: capacity in items.
    signature: the item signature.

  Returns:
    A `reverb.Table`.
  """
  return reverb.Table.queue(name=name, max_size=int(max_size), signature=signature)


def variables_table(signature: Any = None, name: str = VARIABLES_TABLE) -> reverb.Table:
  """A size-1 table holding the latest policy variables (and the train step).

  Learners insert; actors sample. Sampling never removes the item, so every actor
  reads the newest copy; a new insert replaces it.

  Args:
    signature: the structure of what is pushed (see `tfrl.replay.VariableContainer`).
    name: table name.

  Returns:
    A `reverb.Table`.
  """
  return reverb.Table(
      name=name,
      sampler=reverb.selectors.Fifo(),
      remover=reverb.selectors.Fifo(),
      max_size=1,
      max_times_sampled=0,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=signature)


def spec_of_variables(variables: Any) -> Any:
  """The signature of a nest of variables, for `variables_table`."""
  return tf.nest.map_structure(lambda v: tf.TensorSpec(v.shape, v.dtype), variables)

"""Epochs of shuffled minibatches over one train call's batch: PPO's scheme, which the
IMPALA agent also takes for APPO (Sample Factory's learner makes `num_epochs` passes of
`num_batches_per_epoch` minibatches over every batch, on-policy or not).

`run_epochs` draws one row order per epoch up front and calls a gradient step on each
minibatch's row indices: inside a `tf.while_loop` on one device (a small graph whatever
the count), unrolled in the graph under a `tf.distribute` strategy, where each step's
cross-replica sum cannot sit inside a while loop.
"""
from typing import Callable, TypeVar, Union

import tensorflow as tf

LossInfo = TypeVar('LossInfo')


def check_counts(num_epochs: int, num_minibatches: int) -> None:
  """Raises ValueError unless both counts are at least 1."""
  if num_epochs < 1 or num_minibatches < 1:
    raise ValueError(f'num_epochs and num_minibatches must be at least 1, got '
                     f'num_epochs={num_epochs}, num_minibatches={num_minibatches}.')


def checked_rows(rows: Union[int, None, tf.Tensor], dynamic_rows: tf.Tensor,
                 num_minibatches: int, owner: str, unit: str) -> Union[int, tf.Tensor]:
  """The batch's row count, checked to split into `num_minibatches`.

  Args:
    rows: the count known while tracing (a static shape), or None.
    dynamic_rows: the count as a tensor (used when `rows` is None).
    num_minibatches: minibatches per epoch.
    owner: who asks, for the message (e.g. 'PpoAgent').
    unit: what a row is, for the message (e.g. 'rows (unrolls; per replica ...)').

  Returns:
    `rows` when known, else `dynamic_rows` behind an assertion of the division.

  Raises:
    ValueError: the rows are known and `num_minibatches` does not divide them (a
      silent remainder would leave rows out of every epoch).
  """
  message = (f'{owner}: num_minibatches={num_minibatches} must divide the batch\'s '
             f'{unit}')
  if rows is not None:
    if rows % num_minibatches:
      raise ValueError(f'{message}, got {rows}. Choose a num_minibatches that divides '
                       f'{rows}, or change the batch size.')
    return rows
  check = tf.debugging.assert_equal(dynamic_rows % num_minibatches, 0, message=message)
  with tf.control_dependencies([check]):
    return tf.identity(dynamic_rows)


def run_epochs(num_epochs: int, num_minibatches: int, rows: Union[int, tf.Tensor],
               gradient_step: Callable[[tf.Tensor], LossInfo], zero: LossInfo) -> LossInfo:
  """Calls `gradient_step(index)` on every minibatch of `num_epochs` shuffled passes.

  Args:
    num_epochs, num_minibatches: passes over the rows, and minibatches per pass.
    rows: the batch's row count (`checked_rows`), divisible by `num_minibatches`.
    gradient_step: takes a minibatch's [rows / num_minibatches] int32 row indices,
      applies one optimizer step, and returns its loss info (a nest of scalars).
    zero: a loss info of `gradient_step`'s structure and dtypes (the loop's start).

  Returns:
    The last gradient step's loss info.
  """
  minibatch = rows // num_minibatches
  orders = tf.argsort(tf.random.uniform([num_epochs, rows]), axis=1)
  num_steps = num_epochs * num_minibatches

  def body(i, unused_loss_info):
    start = (i % num_minibatches) * minibatch
    return i + 1, gradient_step(orders[i // num_minibatches, start:start + minibatch])

  loss_info = zero
  if tf.distribute.has_strategy():
    for i in range(num_steps):
      _, loss_info = body(tf.constant(i), loss_info)
    return loss_info
  _, loss_info = tf.while_loop(lambda i, _: i < num_steps, body, (tf.constant(0), zero))
  return loss_info

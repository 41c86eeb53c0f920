"""Masked reductions and shape checks shared by the loss primitives.

A loss over a batch of unrolls is a sum over the steps that are experience (mask 1,
or a row weight) divided by a count. The count is an argument rather than always the
mask's own sum: under a `tf.distribute` strategy each replica divides its local sum by
the count over *all* replicas, so that the replicas' losses add up to the batch mean.
"""
from typing import Optional

import tensorflow as tf


def check_same_shape(name_a: str, a: tf.Tensor, name_b: str, b: tf.Tensor) -> None:
  """Raises if two tensors' static shapes cannot be equal.

  Unknown dimensions (and unknown ranks) are compatible with anything: only what is
  known when the graph is built is checked.

  Args:
    name_a: the first argument's name, for the message.
    a: the first tensor.
    name_b: the second argument's name.
    b: the second tensor.

  Raises:
    ValueError: the shapes are incompatible (the message names both arguments).
  """
  if not a.shape.is_compatible_with(b.shape):
    raise ValueError(f'{name_a} and {name_b} must have the same shape, got '
                     f'{name_a}: {a.shape} and {name_b}: {b.shape}.')


def masked_sum(x_t: tf.Tensor, mask_t: tf.Tensor) -> tf.Tensor:
  """sum(mask_t * x_t) over every element.

  Args:
    x_t: values, e.g. [T, B] per-step losses.
    mask_t: weights of the same shape (0/1 masks or row weights); cast to x_t's dtype.

  Returns:
    A scalar.

  Raises:
    ValueError: x_t and mask_t have incompatible static shapes.
  """
  x_t = tf.convert_to_tensor(x_t)
  mask_t = tf.convert_to_tensor(mask_t)
  check_same_shape('x_t', x_t, 'mask_t', mask_t)
  return tf.reduce_sum(tf.cast(mask_t, x_t.dtype) * x_t)


def masked_mean(x_t: tf.Tensor, mask_t: tf.Tensor,
                count: Optional[tf.Tensor] = None) -> tf.Tensor:
  """sum(mask_t * x_t) / count: the mean of x_t over the steps the mask keeps.

  Args:
    x_t: values, e.g. [T, B] per-step losses.
    mask_t: weights of the same shape (0/1 masks or row weights).
    count: what to divide by. None: the mask's sum, at least 1 (a batch with nothing
      to average gives 0, not NaN). Under tf.distribute pass the count over all
      replicas (`tfrl.replicas.global_count`) so that the replicas' shares add up
      to the mean over the whole batch; a mask that keeps a subset of the steps (the
      positive advantages, the replayed rows) may also be averaged over a larger set.

  Returns:
    A scalar.

  Raises:
    ValueError: x_t and mask_t have incompatible static shapes.
  """
  total = masked_sum(x_t, mask_t)
  if count is None:
    # The count carries no gradient: it is the size of the batch, not a function of it.
    count = tf.maximum(tf.stop_gradient(tf.reduce_sum(tf.cast(mask_t, total.dtype))),
                       1.0)
  return total / tf.cast(count, total.dtype)

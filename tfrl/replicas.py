"""Reductions across the replicas of a `strategy.run`, the identity with one replica.

A loss, a statistic or a normalizer that must mean the same under any number of
replicas (see `tfrl.agents.actor_critic_agent`, prioritized replay's importance weights)
is computed from these instead of from the replica's own shard alone.
"""
from typing import Tuple

import tensorflow as tf


def multi_replica_context():
  """The replica context when more than one replica trains in sync, else None."""
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return None
  return context


def num_replicas() -> int:
  """Replicas training in sync (1 outside a multi-replica `strategy.run`)."""
  context = multi_replica_context()
  return 1 if context is None else context.num_replicas_in_sync


def sum_over_replicas(values):
  """All-reduces a tensor (or a nest of them) by SUM; the identity with one replica."""
  context = multi_replica_context()
  if context is None:
    return values
  return context.all_reduce(tf.distribute.ReduceOp.SUM, values)


def gather_over_replicas(value: tf.Tensor) -> tf.Tensor:
  """Stacks every replica's `value` along a new first axis ([1, ...] with one replica)."""
  context = multi_replica_context()
  if context is None:
    return value[None]
  return context.all_gather(value[None], axis=0)


def global_count(local_count: tf.Tensor) -> tf.Tensor:
  """The count summed over replicas, at least 1: the normalizer of a mean over steps."""
  return tf.maximum(tf.stop_gradient(sum_over_replicas(local_count)), 1.0)


def global_weighted_moments(x: tf.Tensor, weights: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """(mean, variance) of `x` weighted by `weights`, over every replica's elements."""
  if multi_replica_context() is None:
    return tf.nn.weighted_moments(x, list(range(x.shape.rank)), weights)
  sums = sum_over_replicas(tf.stack([tf.reduce_sum(weights), tf.reduce_sum(weights * x),
                                     tf.reduce_sum(weights * tf.square(x))]))
  count = tf.maximum(sums[0], 1e-8)
  mean = sums[1] / count
  return mean, tf.maximum(sums[2] / count - tf.square(mean), 0.0)


def max_over_replicas(value: tf.Tensor) -> tf.Tensor:
  """The largest element of `value` over every replica's copy (a scalar).

  `tf.distribute.ReduceOp` has no MAX, so each replica's maximum is gathered first.
  """
  return tf.reduce_max(gather_over_replicas(tf.reduce_max(value)))

"""Running observation normalization inside a network, as VecNormalize does for SB3.

`ObservationNormalizer` keeps a count, mean and variance per entry of every float
observation leaf (a Dict's images and integer leaves pass through) and maps an
observation to `clip((x - mean) / sqrt(var + eps), -clip, clip)`. Its statistics are
non-trainable variables of the network, so they go wherever the policy's variables go:
pushed through Reverb to collectors and evaluators, into checkpoints, and into the
exported SavedModel, which therefore takes raw observations.

The learner updates them (`update`) from each training batch after that batch's
gradient steps, the way tf-agents' PPOAgent does, rather than each collector from what
it sees: one set of statistics, the same in every process. The loss on a batch thus
normalizes with the statistics its behaviour policy acted with (those pushed to the
collectors), and the batch shapes the statistics of the next one. Under a
`tf.distribute` strategy the batch moments are summed over the replicas, so every
replica assigns the same values.
"""
from typing import Any, Optional

import tensorflow as tf

from tfrl import replicas


def _normalized_leaf(spec) -> bool:
  """Whether a leaf of this spec is normalized: float (images are uint8, see encoders)."""
  return spec.dtype.is_floating


class ObservationNormalizer(tf.keras.layers.Layer):
  """Normalizes the float leaves of an observation nest by running statistics."""

  def __init__(self, observation_spec, clip: float = 10.0, epsilon: float = 1e-8,
               name: str = 'observation_normalizer'):
    """Args:
      observation_spec: the observation spec (a nest allowed).
      clip: normalized entries are clipped to [-clip, clip] (VecNormalize's clip_obs).
      epsilon: added to the variance before the square root.
      name: layer name.

    Raises:
      ValueError: no leaf of `observation_spec` is a float to normalize.
    """
    super().__init__(name=name, dtype=tf.float32)
    object.__setattr__(self, '_observation_spec', observation_spec)
    self._clip = clip
    self._epsilon = epsilon
    flat = tf.nest.flatten(observation_spec)
    if not any(_normalized_leaf(spec) for spec in flat):
      raise ValueError('normalize_observations needs a float observation (images are '
                       f'uint8 and scaled by the CNN), got {observation_spec}.')
    # ONLY_FIRST_REPLICA: every replica assigns the same all-reduced statistics.
    weight = lambda name, shape, init: self.add_weight(  # pylint: disable=g-long-lambda
        name=name, shape=shape, initializer=init, trainable=False,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    self._count = weight('count', [], 'zeros')
    self._moments = [
        (weight(f'mean_{i}', spec.shape, 'zeros'), weight(f'variance_{i}', spec.shape, 'ones'))
        if _normalized_leaf(spec) else None for i, spec in enumerate(flat)]

  @property
  def count(self) -> tf.Variable:
    """Observations the statistics were computed from."""
    return self._count

  def call(self, observation):
    """Normalizes `observation` (outer dims any, inner dims those of the spec)."""
    flat = tf.nest.flatten(observation)
    out = []
    for x, moments in zip(flat, self._moments):
      if moments is None:
        out.append(x)
        continue
      mean, variance = moments
      scaled = (tf.cast(x, tf.float32) - mean) * tf.math.rsqrt(variance + self._epsilon)
      out.append(tf.clip_by_value(scaled, -self._clip, self._clip))
    return tf.nest.pack_sequence_as(observation, out)

  def update(self, observation, mask: Optional[tf.Tensor] = None) -> tf.Operation:
    """Folds a batch into the statistics (Chan et al.'s parallel mean/variance).

    Args:
      observation: a nest like the spec's, with outer dims [...] matching `mask`.
      mask: 1.0 for the entries to count (e.g. not a padding or bootstrap step); all
        when None.

    Returns:
      The op that assigns the new statistics.
    """
    flat = [tf.convert_to_tensor(x) for x in tf.nest.flatten(observation)]
    first_spec = tf.nest.flatten(self._observation_spec)[0]
    outer_shape = tf.shape(flat[0])[:flat[0].shape.rank - first_spec.shape.rank]
    if mask is None:
      mask = tf.ones(outer_shape, tf.float32)
    mask = tf.reshape(tf.cast(mask, tf.float32), [-1])
    batch_count = replicas.sum_over_replicas(tf.reduce_sum(mask))
    count = self._count + batch_count
    updates = []
    for x, spec, moments in zip(flat, tf.nest.flatten(self._observation_spec),
                                self._moments):
      if moments is None:
        continue
      mean, variance = moments
      rows = tf.reshape(tf.cast(x, tf.float32), [-1] + spec.shape.as_list())
      weights = tf.reshape(mask, [-1] + [1] * spec.shape.rank)
      sums = replicas.sum_over_replicas(tf.stack([
          tf.reduce_sum(weights * rows, 0), tf.reduce_sum(weights * tf.square(rows), 0)]))
      safe_count = tf.maximum(batch_count, 1.0)
      batch_mean = sums[0] / safe_count
      batch_variance = tf.maximum(sums[1] / safe_count - tf.square(batch_mean), 0.0)
      delta = batch_mean - mean
      share = batch_count / tf.maximum(count, 1.0)
      new_mean = mean + delta * share
      new_m2 = (variance * self._count + batch_variance * batch_count +
                tf.square(delta) * self._count * share)
      # No counted rows: keep the old statistics (and the initial variance of 1).
      keep = tf.equal(batch_count, 0.0)
      updates.append(mean.assign(tf.where(keep, mean, new_mean)))
      updates.append(variance.assign(
          tf.where(keep, variance, new_m2 / tf.maximum(count, 1.0))))
    with tf.control_dependencies(updates):
      return self._count.assign(count)


def maybe_normalizer(observation_spec: Any, normalize: bool
                     ) -> Optional[ObservationNormalizer]:
  """An `ObservationNormalizer` for the spec when `normalize`, else None."""
  return ObservationNormalizer(observation_spec) if normalize else None

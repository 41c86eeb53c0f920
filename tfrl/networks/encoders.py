"""Observation encoders: a nest of observations with flattened outer dims [N, ...] ->
features [N, F]. The actor-critic network runs one before its heads (and its LSTM).

`make_encoder(observation_spec, ...)` picks the encoder for a spec; today an MLP over
the flattened observation.
"""
from typing import Callable, Sequence

import tensorflow as tf

# (units, activation, gain) -> a Dense layer with the network's initializer.
DenseFn = Callable[..., tf.keras.layers.Layer]


def orthogonal_dense(units: int, activation=None, gain: float = 2.0 ** 0.5
                     ) -> tf.keras.layers.Dense:
  """Dense with orthogonal initialization, as PPO/IMPALA reference implementations use."""
  return tf.keras.layers.Dense(units, activation=activation,
                               kernel_initializer=tf.keras.initializers.Orthogonal(gain))


class MlpEncoder(tf.keras.layers.Layer):
  """Flattens one observation (cast to float32) and applies dense layers."""

  def __init__(self, observation_spec, fc_layer_params: Sequence[int], activation: str,
               name: str = 'mlp_encoder'):
    super().__init__(name=name)
    if tf.nest.is_nested(observation_spec):
      raise ValueError('MlpEncoder takes one flat observation; flatten nested '
                       'observations first (gymnasium.wrappers.FlattenObservation).')
    self._size = int(observation_spec.shape.num_elements())
    self._layers = [orthogonal_dense(units, activation) for units in fc_layer_params]

  def call(self, observation):
    x = tf.reshape(tf.cast(observation, tf.float32), [-1, self._size])
    for layer in self._layers:
      x = layer(x)
    return x


def make_encoder(observation_spec, fc_layer_params: Sequence[int] = (64, 64),
                 activation: str = 'tanh', name: str = 'encoder') -> tf.keras.layers.Layer:
  """The encoder for `observation_spec`.

  Raises:
    ValueError: an observation no encoder serves.
  """
  return MlpEncoder(observation_spec, fc_layer_params, activation, name=name)

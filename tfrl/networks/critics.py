"""A Q(s, a) critic whose hidden layers are layer-normalized, as RLPD's (Ball et al.
2023, "Efficient Online Reinforcement Learning with Offline Data").

RLPD found layer normalization the piece that lets an off-policy agent learn from a
replay half made of offline data: it bounds the critic's values on actions the data
does not cover, so Q does not extrapolate upward from them early in training. Each
hidden layer is Dense -> LayerNorm -> ReLU (RLPD's MLP with `use_layer_norm`); the
output is a linear unit. Otherwise it takes and returns what tf-agents'
`CriticNetwork` does, so `SacAgent` uses it (and copies it for the twin and targets)
unchanged.
"""
from typing import Sequence

import tensorflow as tf
from tf_agents.networks import network


class _LayerNorm(tf.keras.layers.Layer):
  """Layer normalization over the last axis, as Keras' `LayerNormalization` computes it
  (biased variance, epsilon 1e-3, a gain and an offset per unit), in four ops: Keras'
  own goes through a fused batch-norm kernel that costs 2.5-4 times as much per
  pass on a CPU (`benchmarks/layer_norm.py`; docs/results/sac.md, "The layer-normalized
  critic's cost: tfrl's normalization against Keras' (layer_norm.py)"), and a SAC step
  passes through the critics six times (twins and targets on the batch, twins on the
  policy's actions), each pass through every hidden layer."""

  def build(self, input_shape):
    units = input_shape[-1]
    self.gamma = self.add_weight(name='gamma', shape=[units], initializer='ones')
    self.beta = self.add_weight(name='beta', shape=[units], initializer='zeros')

  def call(self, x):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + 1e-3) * self.gamma + self.beta


class LayerNormCritic(network.Network):
  """Q of the concatenated flat observation and action (see the module docstring)."""

  def __init__(self, input_tensor_spec, joint_fc_layer_params: Sequence[int],
               name: str = 'LayerNormCritic'):
    """
    Args:
      input_tensor_spec: (observation spec, action spec), each one flat tensor.
      joint_fc_layer_params: the hidden layers' widths.
      name: the network's name.
    """
    super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), name=name)
    self._hidden = []
    for units in joint_fc_layer_params:
      self._hidden += [tf.keras.layers.Dense(units, kernel_initializer='glorot_uniform'),
                       _LayerNorm()]
    self._value = tf.keras.layers.Dense(1, kernel_initializer='glorot_uniform')

  def call(self, inputs, step_type=(), network_state=(), training=False):
    del step_type  # Q does not depend on it
    observations, actions = (tf.cast(tf.nest.flatten(x)[0], tf.float32) for x in inputs)
    x = tf.concat([observations, actions], axis=1)
    for dense, norm in zip(self._hidden[::2], self._hidden[1::2]):
      x = tf.nn.relu(norm(dense(x)))
    return tf.reshape(self._value(x), [-1]), network_state

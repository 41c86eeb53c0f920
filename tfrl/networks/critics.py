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
                       tf.keras.layers.LayerNormalization()]
    self._value = tf.keras.layers.Dense(1, kernel_initializer='glorot_uniform')

  def call(self, inputs, step_type=(), network_state=(), training=False):
    del step_type  # Q does not depend on it
    observations, actions = (tf.cast(tf.nest.flatten(x)[0], tf.float32) for x in inputs)
    x = tf.concat([observations, actions], axis=1)
    for dense, norm in zip(self._hidden[::2], self._hidden[1::2]):
      x = tf.nn.relu(norm(dense(x), training=training))
    return tf.reshape(self._value(x), [-1]), network_state

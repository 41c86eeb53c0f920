"""A Keras actor-critic network: shared MLP torso, categorical logits and a value."""
from typing import Sequence

import tensorflow as tf
from tf_agents.networks import network
from tf_agents.specs import tensor_spec


class ActorCriticNetwork(network.Network):
  """observation -> MLP -> (logits [num_actions], value []).

  The observation is flattened; nested observations should be flattened by a wrapper
  first. Works on any number of outer dimensions ([B] or [T, B]).
  """

  def __init__(self, observation_spec, action_spec, fc_layer_params: Sequence[int] = (64, 64),
               activation: str = 'tanh', name: str = 'ActorCriticNetwork'):
    """Args:
      observation_spec: a single (non-nested) observation spec.
      action_spec: a scalar discrete action spec with minimum 0.
      fc_layer_params: hidden layer sizes of the shared torso.
      activation: hidden activation.
      name: network name.

    Raises:
      ValueError: for a nested observation or a non-scalar / shifted discrete action.
    """
    if tf.nest.is_nested(observation_spec):
      raise ValueError('ActorCriticNetwork takes one flat observation; flatten nested '
                       'observations first (gymnasium.wrappers.FlattenObservation).')
    if (action_spec.shape.rank != 0 or not action_spec.dtype.is_integer or
        int(action_spec.minimum) != 0):
      raise ValueError(f'ActorCriticNetwork needs a scalar discrete action from 0, got '
                       f'{action_spec}.')
    super().__init__(input_tensor_spec=observation_spec, state_spec=(), name=name)
    self._num_actions = int(action_spec.maximum) + 1
    self._observation_rank = len(observation_spec.shape)
    self._torso = [tf.keras.layers.Dense(units, activation=activation)
                   for units in fc_layer_params]
    # Small initial logits: the first policy is close to uniform.
    self._logits = tf.keras.layers.Dense(
        self._num_actions, kernel_initializer=tf.keras.initializers.VarianceScaling(0.01))
    self._value = tf.keras.layers.Dense(1)

  @property
  def num_actions(self) -> int:
    return self._num_actions

  def call(self, observation, step_type=None, network_state=(), training=False):
    del step_type, training
    outer_shape = tf.shape(observation)[:tf.rank(observation) - self._observation_rank]
    x = tf.reshape(tf.cast(observation, tf.float32), [-1, _flat_size(observation,
                                                                      self._observation_rank)])
    for layer in self._torso:
      x = layer(x)
    logits = tf.reshape(self._logits(x), tf.concat([outer_shape, [self._num_actions]], 0))
    value = tf.reshape(self._value(x), outer_shape)
    return (logits, value), network_state


def _flat_size(observation, observation_rank: int) -> int:
  dims = observation.shape[-observation_rank:] if observation_rank else []
  size = 1
  for d in dims:
    size *= int(d)
  return size


def create_variables(net: ActorCriticNetwork, observation_spec) -> None:
  """Builds the network's variables with one dummy call."""
  net(tensor_spec.sample_spec_nest(tensor_spec.add_outer_dims_nest(observation_spec, (1,))))

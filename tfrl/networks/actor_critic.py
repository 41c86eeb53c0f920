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
               activation: str = 'tanh', shared_torso: bool = True,
               name: str = 'ActorCriticNetwork'):
    """Args:
      observation_spec: a single (non-nested) observation spec.
      action_spec: a scalar discrete action spec with minimum 0.
      fc_layer_params: hidden layer sizes of the torso.
      activation: hidden activation.
      shared_torso: one torso for both heads; False gives the value head its own torso
        of the same shape (PPO often learns faster without the value loss's gradients
        in the policy's features).
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
    # Orthogonal initialization, as PPO/IMPALA reference implementations use.
    dense = lambda units, gain=2.0 ** 0.5, act=activation: tf.keras.layers.Dense(
        units, activation=act, kernel_initializer=tf.keras.initializers.Orthogonal(gain))
    self._torso = [dense(units) for units in fc_layer_params]
    self._value_torso = (None if shared_torso else
                         [dense(units) for units in fc_layer_params])
    # Small initial logits: the first policy is close to uniform.
    self._logits = dense(self._num_actions, gain=0.01, act=None)
    self._value = dense(1, gain=1.0, act=None)

  @property
  def num_actions(self) -> int:
    return self._num_actions

  def call(self, observation, step_type=None, network_state=(), training=False):
    del step_type, training
    outer_shape = tf.shape(observation)[:tf.rank(observation) - self._observation_rank]
    flat = tf.reshape(tf.cast(observation, tf.float32),
                      [-1, _flat_size(observation, self._observation_rank)])
    policy_features = value_features = _apply(self._torso, flat)
    if self._value_torso is not None:
      value_features = _apply(self._value_torso, flat)
    logits = tf.reshape(self._logits(policy_features),
                        tf.concat([outer_shape, [self._num_actions]], 0))
    value = tf.reshape(self._value(value_features), outer_shape)
    return (logits, value), network_state


def _apply(layers, x):
  for layer in layers:
    x = layer(x)
  return x


def _flat_size(observation, observation_rank: int) -> int:
  dims = observation.shape[-observation_rank:] if observation_rank else []
  size = 1
  for d in dims:
    size *= int(d)
  return size


def create_variables(net: ActorCriticNetwork, observation_spec) -> None:
  """Builds the network's variables with one dummy call."""
  net(tensor_spec.sample_spec_nest(tensor_spec.add_outer_dims_nest(observation_spec, (1,))))

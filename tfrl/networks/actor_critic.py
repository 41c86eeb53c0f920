"""A Keras actor-critic network: an observation encoder, an optional LSTM core, an
action head (categorical, or a tanh-squashed or clipped Gaussian, see
`action_heads`) and a value head."""
from typing import Optional, Sequence

import tensorflow as tf
from tf_agents.networks import network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl.networks import action_heads
from tfrl.networks import encoders
from tfrl.networks import initializers
from tfrl.networks import normalization


class ActorCriticNetwork(network.Network):
  """observation -> [normalizer] -> encoder -> [LSTM] -> (distribution parameters
  {name: [...]}, value).

  Inputs have outer dims [B] (one step per env: what a policy passes) or [T, B]
  (time-major unrolls: what the agents pass). With an LSTM (`lstm_size`), the network
  state is the LSTM's (h, c) per env: zeros at every FIRST step, inside an unroll too,
  and carried otherwise; a [T, B] call starts from `network_state` (the state stored
  with the unroll's first step) and returns the state after its last step.
  """

  def __init__(self, observation_spec, action_spec, fc_layer_params: Sequence[int] = (64, 64),
               activation: str = 'tanh', shared_torso: bool = True,
               lstm_size: Optional[int] = None, cnn: encoders.CnnChoice = 'nature',
               normalize_observations: bool = False, initial_log_scale: float = 0.0,
               continuous_head: str = 'tanh', initializer: str = 'orthogonal',
               name: str = 'ActorCriticNetwork'):
    """Args:
      observation_spec: the observation spec, a nest allowed (see
        `encoders.make_encoder`): uint8 images [H, W, C] go to a CNN, Dicts to one
        encoder per key.
      action_spec: a scalar discrete action spec with minimum 0, or a bounded
        continuous one (see `action_heads.make_head`).
      fc_layer_params: hidden layer sizes of the encoder's MLPs (a CNN ends in its own
        dense layer and does not use them).
      activation: hidden activation.
      shared_torso: one encoder for both heads; False gives the value head its own
        encoder of the same shape (PPO often learns faster without the value loss's
        gradients in the policy's features). With an LSTM the torso is shared.
      lstm_size: units of an LSTM core after the encoder (None: feed-forward).
      cnn: the CNN for image observations: 'nature', 'impala', 'grid' or a callable (see
        `encoders.make_encoder`).
      normalize_observations: normalize float observations by running statistics
        (see `normalization.ObservationNormalizer`), which the agent updates from
        its training batches (`update_normalizer`).
      initial_log_scale: the starting log standard deviation of continuous actions
        (see `action_heads.TanhGaussianHead`; unused for discrete actions).
      continuous_head: how continuous samples meet the action bounds: 'tanh' squashes
        them, 'clipped' clips them as SB3 does (see `action_heads`).
      initializer: how the dense layers (the MLPs', the heads') start:
        'orthogonal' (gain sqrt(2) hidden, 0.01 policy, 1 value; SB3's ortho_init) or
        'fan_in_uniform' (PyTorch's nn.Linear default: SB3's ortho_init=False); see
        `initializers.INITIALIZERS`. CNNs and the LSTM keep their own.
      name: network name.

    Raises:
      ValueError: an observation or action spec no encoder or head serves, an LSTM
        with shared_torso=False, normalize_observations with no float observation, or
        an unknown initializer.
    """
    if lstm_size and not shared_torso:
      raise ValueError('An LSTM core is shared by both heads: use shared_torso=True '
                       'with lstm_size.')
    state_spec = ()
    if lstm_size:
      state_spec = (tf.TensorSpec([lstm_size], tf.float32, name='lstm_h'),
                    tf.TensorSpec([lstm_size], tf.float32, name='lstm_c'))
    super().__init__(input_tensor_spec=observation_spec, state_spec=state_spec, name=name)
    self._observation_spec = observation_spec
    self._normalizer = normalization.maybe_normalizer(observation_spec,
                                                      normalize_observations)
    self._encoder = encoders.make_encoder(observation_spec, fc_layer_params, activation,
                                          cnn=cnn, initializer=initializer)
    self._value_encoder = (None if shared_torso else encoders.make_encoder(
        observation_spec, fc_layer_params, activation, name='value_encoder', cnn=cnn,
        initializer=initializer))
    self._lstm = tf.keras.layers.LSTMCell(lstm_size) if lstm_size else None
    self._head = action_heads.make_head(
        action_spec,
        lambda units, gain: initializers.dense(units, gain=gain, initializer=initializer),
        initial_log_scale=initial_log_scale, continuous_head=continuous_head)
    self._value = initializers.dense(1, gain=1.0, initializer=initializer)

  @property
  def head(self) -> action_heads.ActionHead:
    """How the distribution parameters are sampled and scored."""
    return self._head

  @property
  def is_recurrent(self) -> bool:
    return self._lstm is not None

  def update_normalizer(self, observation, mask=None) -> None:
    """Folds observations (outer dims matching `mask`) into the normalizer's statistics;
    nothing without `normalize_observations`."""
    if self._normalizer is not None:
      self._normalizer.update(observation, mask)

  def call(self, observation, step_type=None, network_state=(), training=False):
    del training
    if self._normalizer is not None:
      observation = self._normalizer(observation)
    first_leaf = tf.nest.flatten(observation)[0]
    first_spec = tf.nest.flatten(self._observation_spec)[0]
    outer_rank = first_leaf.shape.rank - first_spec.shape.rank
    outer_shape = tf.shape(first_leaf)[:outer_rank]
    # Every leaf (each key of a Dict, an image) to [N, *spec.shape]: static inner dims
    # keep the encoder's shapes known when traced (a CNN's dense layer needs them).
    flat = tf.nest.map_structure(
        lambda x, spec: tf.reshape(x, [-1] + spec.shape.as_list()),
        observation, self._observation_spec)
    policy_features = value_features = self._encoder(flat)
    if self._value_encoder is not None:
      value_features = self._value_encoder(flat)
    if self._lstm is not None:
      features = tf.reshape(policy_features,
                            tf.concat([outer_shape, tf.shape(policy_features)[-1:]], 0))
      features, network_state = self._unroll(features, step_type, network_state,
                                             outer_rank)
      policy_features = value_features = tf.reshape(features, [-1, self._lstm.units])
    params = {name: tf.reshape(x, tf.concat([outer_shape, tf.shape(x)[-1:]], 0))
              for name, x in self._head(policy_features).items()}
    value = tf.reshape(self._value(value_features), outer_shape)
    return (params, value), network_state

  def _unroll(self, features, step_type, network_state, outer_rank: int):
    """Runs the LSTM over [B, F] (one step) or time-major [T, B, F] features."""
    if step_type is None:
      raise ValueError('A recurrent ActorCriticNetwork needs step_type (its state is '
                       'reset at FIRST steps).')
    if outer_rank == 1:
      features, step_type = features[None], step_type[None]
    batch_size = tf.shape(features)[1]
    if not tf.nest.flatten(network_state):
      network_state = tuple(tf.zeros([batch_size, self._lstm.units]) for _ in range(2))

    def step(carry, inputs):
      (h, c), _ = carry
      x, first = inputs
      keep = 1.0 - tf.cast(first, tf.float32)[:, None]
      output, (h, c) = self._lstm(x, (h * keep, c * keep))
      return (h, c), output

    initial = (tuple(network_state), tf.zeros([batch_size, self._lstm.units]))
    states, outputs = tf.scan(step, (features, tf.equal(step_type, ts.StepType.FIRST)),
                              initializer=initial)
    final_state = tf.nest.map_structure(lambda x: x[-1], states)
    if outer_rank == 1:
      outputs = outputs[0]
    return outputs, final_state


def create_variables(net: ActorCriticNetwork, observation_spec) -> None:
  """Builds the network's variables with one dummy call."""
  observation = tensor_spec.sample_spec_nest(
      tensor_spec.add_outer_dims_nest(observation_spec, (1,)))
  net(observation, step_type=tf.constant([int(ts.StepType.FIRST)]),
      network_state=net.get_initial_state(1) if net.state_spec else ())

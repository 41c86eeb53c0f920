"""Behaviour cloning: supervised learning of a dataset's actions from its observations.

The baseline every offline-RL method is compared with (and, on expert data, hard to
beat). It trains from the transition layout like DQN, using each row's first step only:
the observation o_t and the action a_t taken there. Rows that start on an episode
boundary weigh 0, as everywhere.

- Discrete actions: a Q-network-shaped network of logits (`tfrl.agents.dqn.q_network_for`,
  so images and Dicts work as for DQN), cross-entropy; the policy takes the most likely
  action.
- Continuous actions: tf-agents' deterministic `ActorNetwork` (tanh to the action
  bounds), mean squared error; the policy acts with it (vector observations).

Both policies export and serve like every tfrl policy.

What a population may change while BC trains (`BehaviorCloningAgent.hyperparameters`):
its Adam rate, `learning_rate` (BC has no returns, so no discount).
"""
from typing import Sequence

import gin
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.ddpg import actor_network
from tf_agents.policies import actor_policy
from tf_agents.policies import q_policy
from tf_agents.utils import common

from tfrl import layouts
from tfrl.agents import dqn
from tfrl.agents import hyperparameters as hyperparameters_lib
from tfrl.agents import interface


class BehaviorCloningAgent(tf_agent.TFAgent):
  """Clones the actions of the transitions it trains on (see the module docstring)."""

  def __init__(self, time_step_spec, action_spec, network, optimizer,
               train_step_counter: tf.Variable):
    self._network = network
    self._optimizer = optimizer
    self._discrete = action_spec.dtype.is_integer
    network.create_variables(time_step_spec.observation)
    if self._discrete:
      policy = q_policy.QPolicy(time_step_spec, action_spec, q_network=network)
    else:
      policy = actor_policy.ActorPolicy(time_step_spec, action_spec,
                                        actor_network=network, clip=True)
    super().__init__(time_step_spec, action_spec, policy, collect_policy=policy,
                     train_sequence_length=None, train_step_counter=train_step_counter)
    rate = hyperparameters_lib.rate_of(optimizer)
    self._hyperparameters = hyperparameters_lib.untracked(
        self, hyperparameters_lib.Hyperparameters(
            **({} if rate is None else {'learning_rate': rate})))

  @property
  def hyperparameters(self) -> hyperparameters_lib.Hyperparameters:
    """What population-based training may change (see the module docstring)."""
    return self._hyperparameters

  def _initialize(self):
    return tf.no_op()

  def _loss(self, experience, weights=None, training=False) -> tf_agent.LossInfo:
    """The weighted mean of the per-row loss over the global batch."""
    observation = tf.nest.map_structure(lambda x: x[:, 0], experience.observation)
    action = tf.nest.map_structure(lambda x: x[:, 0], experience.action)
    output, _ = self._network(observation, step_type=experience.step_type[:, 0],
                              training=training)
    if self._discrete:
      per_row = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=tf.cast(action, tf.int32), logits=output)
    else:
      per_row = tf.reduce_sum(tf.square(output - tf.cast(action, output.dtype)),
                              axis=list(range(1, output.shape.rank)))
    loss = common.aggregate_losses(per_example_loss=per_row, sample_weight=weights).total_loss
    return tf_agent.LossInfo(loss, ())

  def _train(self, experience, weights=None) -> tf_agent.LossInfo:
    variables = self._network.trainable_variables
    with tf.GradientTape() as tape:
      loss_info = self._loss(experience, weights, training=True)
    gradients = tape.gradient(loss_info.loss, variables)
    self._optimizer.apply_gradients(zip(gradients, variables))
    self.train_step_counter.assign_add(1)
    return loss_info


@gin.configurable
@interface.trains_from(layouts.TransitionReplay)
@interface.acts_in('discrete', 'continuous')
@interface.tunable('learning_rate')
def create_bc_agent(time_step_spec, action_spec, train_step: tf.Variable,
                    fc_layer_params: Sequence[int] = (256, 256),
                    learning_rate: float = 1e-3, gamma: float = 0.99,
                    cnn: str = 'nature') -> BehaviorCloningAgent:
  """Returns a behaviour-cloning agent (see the module docstring).

  Args:
    time_step_spec, action_spec: from the environment (or the dataset's env).
    train_step: the learner's step variable (the agent increments it).
    fc_layer_params: hidden layer sizes.
    learning_rate: Adam's learning rate.
    gamma: unused (BC has no returns); taken as every builder takes it.
    cnn: the CNN for image observations (discrete actions; see `make_encoder`).

  Returns:
    The agent.

  Raises:
    ValueError: continuous actions with image or Dict observations.
  """
  del gamma
  observation_spec = time_step_spec.observation
  if action_spec.dtype.is_integer:
    network = dqn.q_network_for(observation_spec, action_spec, fc_layer_params, cnn)
  else:
    if tf.nest.is_nested(observation_spec) or len(observation_spec.shape) != 1:
      raise ValueError('Behaviour cloning of continuous actions takes vector '
                       f'observations; got {observation_spec}.')
    network = actor_network.ActorNetwork(observation_spec, action_spec,
                                         fc_layer_params=tuple(fc_layer_params))
  return BehaviorCloningAgent(time_step_spec, action_spec, network,
                              tf.keras.optimizers.Adam(learning_rate), train_step)

"""Implicit Q-learning (IQL, Kostrikov et al. 2022) for continuous actions, offline.

IQL never values an action the dataset did not take. Three functions learn from the
dataset's transitions (s, a, r, s'):

- V(s): expectile regression (expectile tau > 0.5) towards min_i Q'_i(s, a), the twin
  target critics at the dataset's action, so V approaches the value of the best actions
  the data shows in s rather than their mean;
- Q_i(s, a): regression towards r + gamma * discount * V(s');
- the actor: advantage-weighted regression, the log density of the dataset's action
  weighted by min(exp(beta * (min_i Q'_i(s, a) - V(s))), max_weight).

Each train step updates V first, then the actor and the critics with the new V, then
moves the target critics (the IQL authors' order). The actor is a Gaussian whose mean is
tanh-squashed to the action bounds and whose scale is one learned vector (tf-agents'
`NormalProjectionNetwork`; the authors' and d3rlpy's policy); its samples are clipped to
the bounds, the greedy policy plays the mean. Every loss is the weighted mean over the
global batch (`common.aggregate_losses`), so replicas under a `tf.distribute` strategy
train as one device does, and boundary rows (weight 0) count nowhere.

For the D4RL locomotion sets the authors scale rewards by 1000 / (the dataset's highest
less its lowest episode return) and anneal the actor's rate to 0 with a cosine over the
run (`actor_decay_steps = 'run'`). A job's builder computes that scale from its RLDS dataset
(`Experiment.dataset_dir`) unless `reward_scale_factor` is set.

What a population may change while IQL trains (`IqlAgent.hyperparameters`): the three
Adam rates (`actor_learning_rate` unless it is annealed, `critic_learning_rate`,
`value_learning_rate`), the discount `gamma`, V's `expectile` and the advantage weights'
`temperature`.
"""
from typing import Optional, Sequence, Union

import gin
import numpy as np
import tensorflow as tf
from tf_agents.agents import data_converter
from tf_agents.agents import tf_agent
from tf_agents.networks import actor_distribution_network
from tf_agents.networks import normal_projection_network
from tf_agents.networks import value_network
from tf_agents.policies import actor_policy
from tf_agents.utils import common

from tfrl import layouts
from tfrl import logs
from tfrl.agents import hyperparameters as hyperparameters_lib
from tfrl.agents import interface
from tfrl.agents import sac
from tfrl.datasets import formats
from tfrl.datasets import reverb_checkpoint
from tfrl.datasets import rlds

# The IQL authors' locomotion reward scale: the dataset's episode-return range becomes this.
RETURN_RANGE = 1000.0


def expectile_loss(difference: tf.Tensor, expectile: float) -> tf.Tensor:
  """|expectile - 1(difference < 0)| * difference^2, per element.

  Args:
    difference: target less prediction.
    expectile: in (0, 1); 0.5 is half the squared error, above it weighs the
      prediction's underestimates more.

  Returns:
    The loss, shaped as `difference`.
  """
  weight = tf.where(difference < 0.0, 1.0 - expectile, expectile)
  return weight * tf.square(difference)


def advantage_weights(q_values: tf.Tensor, values: tf.Tensor, temperature: float,
                      max_weight: float) -> tf.Tensor:
  """Advantage-weighted regression's weights, min(exp(temperature * (Q - V)), max_weight).

  Args:
    q_values, values: Q(s, a) of the dataset's actions and V(s), per row.
    temperature: beta, the inverse temperature.
    max_weight: the cap (exp of a large advantage would overflow).

  Returns:
    The weights, per row, without gradients.
  """
  return tf.stop_gradient(tf.minimum(tf.exp(temperature * (q_values - values)), max_weight))


class IqlAgent(tf_agent.TFAgent):
  """IQL's value, twin critics and advantage-weighted actor (see the module docstring)."""

  def __init__(self, time_step_spec, action_spec, actor_network, critic_network,
               value_net, actor_optimizer, critic_optimizer, value_optimizer,
               train_step_counter: tf.Variable, gamma: float = 0.99,
               expectile: float = 0.7, temperature: float = 3.0,
               max_weight: float = 100.0, target_update_tau: float = 0.005,
               reward_scale_factor: float = 1.0):
    """Builds the agent.

    Args:
      time_step_spec, action_spec: the environment's specs (Box actions).
      actor_network: a distribution network of the observation.
      critic_network: Q of (observation, action); copied for the twin and targets.
      value_net: V of the observation.
      actor_optimizer, critic_optimizer, value_optimizer: one optimizer each.
      train_step_counter: the learner's step variable (incremented every train step).
      gamma: the discount.
      expectile: V's expectile tau.
      temperature: the advantage weights' beta.
      max_weight: the advantage weights' cap.
      target_update_tau: the target critics' soft update rate, every train step.
      reward_scale_factor: multiplies rewards.
    """
    observation_spec = time_step_spec.observation
    self._actor_network = actor_network
    self._critic_network_1 = critic_network
    self._critic_network_2 = critic_network.copy(name='CriticNetwork2')
    self._value_network = value_net
    actor_network.create_variables(observation_spec)
    value_net.create_variables(observation_spec)
    critic_input = (observation_spec, action_spec)
    self._critic_network_1.create_variables(critic_input)
    self._critic_network_2.create_variables(critic_input)
    self._target_critic_network_1 = common.maybe_copy_target_network_with_checks(
        self._critic_network_1, None, 'TargetCriticNetwork1', critic_input)
    self._target_critic_network_2 = common.maybe_copy_target_network_with_checks(
        self._critic_network_2, None, 'TargetCriticNetwork2', critic_input)
    self._actor_optimizer = actor_optimizer
    self._critic_optimizer = critic_optimizer
    self._value_optimizer = value_optimizer
    # Variables the traced losses read, so a population can change them; not checkpoint
    # dependencies of the agent (the Learner saves them with the hyperparameters).
    settings = {name: hyperparameters_lib.tunable_variable(float(value), name)
                for name, value in (('gamma', gamma), ('expectile', expectile),
                                    ('temperature', temperature))}
    self._gamma = self._no_dependency(settings['gamma'])
    self._expectile = self._no_dependency(settings['expectile'])
    self._temperature = self._no_dependency(settings['temperature'])
    self._max_weight = max_weight
    self._target_update_tau = target_update_tau
    self._reward_scale_factor = reward_scale_factor
    policy = actor_policy.ActorPolicy(time_step_spec, action_spec,
                                      actor_network=actor_network, training=False,
                                      clip=True)
    super().__init__(time_step_spec, action_spec, policy, collect_policy=policy,
                     train_sequence_length=2, train_step_counter=train_step_counter)
    self._as_transition = data_converter.AsTransition(self.data_context,
                                                      squeeze_time_dim=True)
    rates = {f'{part}_learning_rate': hyperparameters_lib.rate_of(optimizer)
             for part, optimizer in (('actor', actor_optimizer),
                                     ('critic', critic_optimizer),
                                     ('value', value_optimizer))}
    self._hyperparameters = hyperparameters_lib.untracked(
        self, hyperparameters_lib.Hyperparameters(
            **{name: rate for name, rate in rates.items() if rate is not None},
            **settings))

  @property
  def hyperparameters(self) -> hyperparameters_lib.Hyperparameters:
    """What population-based training may change (see the module docstring)."""
    return self._hyperparameters

  @property
  def reward_scale_factor(self) -> float:
    """What rewards are multiplied by before they enter the critics' targets."""
    return self._reward_scale_factor

  def _initialize(self):
    return self._update_targets(tau=1.0)

  def _update_targets(self, tau: float):
    return tf.group(
        common.soft_variables_update(self._critic_network_1.variables,
                                     self._target_critic_network_1.variables, tau),
        common.soft_variables_update(self._critic_network_2.variables,
                                     self._target_critic_network_2.variables, tau))

  def _target_q(self, observation, actions, step_type) -> tf.Tensor:
    """min_i Q'_i(s, a) of the target critics (no gradient)."""
    inputs = (observation, actions)
    q_1, _ = self._target_critic_network_1(inputs, step_type, training=False)
    q_2, _ = self._target_critic_network_2(inputs, step_type, training=False)
    return tf.stop_gradient(tf.minimum(q_1, q_2))

  def _mean(self, weights):
    """The weighted global-batch mean of a per-row loss."""
    return lambda per_row: common.aggregate_losses(per_example_loss=per_row,
                                                   sample_weight=weights).total_loss

  def _value_loss(self, time_steps, target_q, weights, training: bool) -> tf.Tensor:
    values, _ = self._value_network(time_steps.observation, time_steps.step_type,
                                    training=training)
    return self._mean(weights)(expectile_loss(target_q - values, self._expectile))

  def _actor_and_critic_losses(self, time_steps, actions, next_time_steps, target_q,
                               weights, training: bool):
    """(actor loss, critic loss) with V as it stands."""
    mean = self._mean(weights)
    observation, step_type = time_steps.observation, time_steps.step_type
    values, _ = self._value_network(observation, step_type, training=False)
    awr = advantage_weights(target_q, values, self._temperature, self._max_weight)
    distribution, _ = self._actor_network(observation, step_type, (), training=training)
    actor_loss = mean(-awr * distribution.log_prob(actions))

    next_values, _ = self._value_network(next_time_steps.observation,
                                         next_time_steps.step_type, training=False)
    td_targets = tf.stop_gradient(
        self._reward_scale_factor * next_time_steps.reward
        + self._gamma * next_time_steps.discount * next_values)
    critic_loss = 0.0
    for critic in (self._critic_network_1, self._critic_network_2):
      q_values, _ = critic((observation, actions), step_type, training=training)
      critic_loss += mean(tf.square(q_values - td_targets))
    return actor_loss, critic_loss

  def _loss(self, experience, weights=None, training=False) -> tf_agent.LossInfo:
    """The three losses at the current variables (no update)."""
    time_steps, policy_steps, next_time_steps = self._as_transition(experience)
    actions = policy_steps.action
    target_q = self._target_q(time_steps.observation, actions, time_steps.step_type)
    value_loss = self._value_loss(time_steps, target_q, weights, training)
    actor_loss, critic_loss = self._actor_and_critic_losses(
        time_steps, actions, next_time_steps, target_q, weights, training)
    return _loss_info(value_loss, actor_loss, critic_loss)

  def _train(self, experience, weights=None) -> tf_agent.LossInfo:
    time_steps, policy_steps, next_time_steps = self._as_transition(experience)
    actions = policy_steps.action
    target_q = self._target_q(time_steps.observation, actions, time_steps.step_type)
    value_variables = self._value_network.trainable_variables
    with tf.GradientTape(watch_accessed_variables=False) as tape:
      tape.watch(value_variables)
      value_loss = self._value_loss(time_steps, target_q, weights, training=True)
    self._value_optimizer.apply_gradients(
        zip(tape.gradient(value_loss, value_variables), value_variables))
    # The value step's assignments come before the reads below (a tf.function runs
    # the ops on one variable in program order), so the actor and the critics see the
    # new V; likewise the target update reads the updated critics.
    actor_variables = self._actor_network.trainable_variables
    critic_variables = (self._critic_network_1.trainable_variables
                        + self._critic_network_2.trainable_variables)
    with tf.GradientTape(watch_accessed_variables=False, persistent=True) as tape:
      tape.watch(actor_variables + critic_variables)
      actor_loss, critic_loss = self._actor_and_critic_losses(
          time_steps, actions, next_time_steps, target_q, weights, training=True)
    self._actor_optimizer.apply_gradients(
        zip(tape.gradient(actor_loss, actor_variables), actor_variables))
    self._critic_optimizer.apply_gradients(
        zip(tape.gradient(critic_loss, critic_variables), critic_variables))
    del tape
    self._update_targets(self._target_update_tau)
    self.train_step_counter.assign_add(1)
    return _loss_info(value_loss, actor_loss, critic_loss)


def _loss_info(value_loss, actor_loss, critic_loss) -> tf_agent.LossInfo:
  return tf_agent.LossInfo(value_loss + actor_loss + critic_loss,
                           dict(value_loss=value_loss, actor_loss=actor_loss,
                                critic_loss=critic_loss))


@gin.configurable
@interface.trains_from(layouts.TransitionReplay)
@interface.acts_in('continuous')
# actor_learning_rate only when it is constant (no actor_decay_steps).
@interface.tunable('actor_learning_rate', 'critic_learning_rate', 'value_learning_rate',
                   'gamma', 'expectile', 'temperature')
def create_iql_agent(time_step_spec, action_spec, train_step: tf.Variable,
                     gamma: float = 0.99,
                     actor_fc_layer_params: Sequence[int] = (256, 256),
                     critic_joint_fc_layer_params: Sequence[int] = (256, 256),
                     value_fc_layer_params: Sequence[int] = (256, 256),
                     actor_learning_rate: float = 3e-4,
                     critic_learning_rate: float = 3e-4,
                     value_learning_rate: float = 3e-4,
                     actor_decay_steps: Union[int, str, None] = None,
                     expectile: float = 0.7, temperature: float = 3.0,
                     max_weight: float = 100.0, target_update_tau: float = 0.005,
                     reward_scale_factor: Optional[float] = None,
                     dataset_dir: Optional[str] = None,
                     num_train_steps: Optional[int] = None) -> IqlAgent:
  """Returns an initialized IQL agent; defaults are the IQL authors' locomotion settings.

  Args:
    time_step_spec, action_spec: the environment's specs (flat observations, Box
      actions).
    train_step: the learner's step variable.
    gamma: the discount.
    actor_fc_layer_params, critic_joint_fc_layer_params, value_fc_layer_params: hidden
      layer sizes.
    actor_learning_rate, critic_learning_rate, value_learning_rate: Adam's rates.
    actor_decay_steps: anneal the actor's rate to 0 with a cosine over this many train
      steps; 'run': over the job's `num_train_steps`; None keeps it constant.
    expectile, temperature, max_weight: V's expectile, the advantage weights' beta and
      cap.
    target_update_tau: the target critics' soft update rate, every train step.
    reward_scale_factor: multiplies rewards; None: the authors' 1000 / the episode-return
      range of the RLDS dataset at `dataset_dir` (`dataset_reward_scale`), or 1 without
      a dataset.
    dataset_dir, num_train_steps: the job's dataset and length (`Experiment` passes
      them).

  Returns:
    The agent.

  Raises:
    ValueError: actor_decay_steps 'run' without num_train_steps, or another string.
    rlds.DatasetError: no reward scale given and `dataset_dir` holds a Reverb checkpoint
      (whose episode returns are not read here) or episodes of one return.
  """
  if isinstance(actor_decay_steps, str):
    if actor_decay_steps != 'run' or not num_train_steps:
      raise ValueError(f"create_iql_agent.actor_decay_steps = {actor_decay_steps!r}: give a "
                       "number of train steps, or 'run' in a job with num_train_steps.")
    actor_decay_steps = num_train_steps
  if reward_scale_factor is None:
    reward_scale_factor = 1.0 if dataset_dir is None else dataset_reward_scale(dataset_dir)
  observation_spec = time_step_spec.observation
  actor = actor_distribution_network.ActorDistributionNetwork(
      observation_spec, action_spec, fc_layer_params=tuple(actor_fc_layer_params),
      continuous_projection_net=normal_projection_network.NormalProjectionNetwork)
  _, critic = sac.sac_networks(observation_spec, action_spec, actor_fc_layer_params,
                               critic_joint_fc_layer_params)
  value = value_network.ValueNetwork(observation_spec,
                                     fc_layer_params=tuple(value_fc_layer_params))
  actor_rate = actor_learning_rate
  if actor_decay_steps:
    actor_rate = tf.keras.optimizers.schedules.CosineDecay(actor_learning_rate,
                                                           actor_decay_steps)
  agent = IqlAgent(
      time_step_spec, action_spec, actor, critic, value,
      actor_optimizer=tf.keras.optimizers.Adam(actor_rate),
      critic_optimizer=tf.keras.optimizers.Adam(critic_learning_rate),
      value_optimizer=tf.keras.optimizers.Adam(value_learning_rate),
      train_step_counter=train_step, gamma=gamma, expectile=expectile,
      temperature=temperature, max_weight=max_weight,
      target_update_tau=target_update_tau, reward_scale_factor=reward_scale_factor)
  agent.initialize()
  return agent


def dataset_reward_scale(dataset_dir: str) -> float:
  """1000 / (the highest less the lowest episode return) of the dataset at
  `dataset_dir` (RLDS, D4RL or Minari: `formats.read`): the IQL authors' reward scale
  for the D4RL locomotion sets.

  Raises:
    rlds.DatasetError: a Reverb checkpoint there, or every episode of one return.
  """
  if reverb_checkpoint.find_checkpoint(dataset_dir) is not None:
    raise rlds.DatasetError(
        f"IQL's reward scale is read from an RLDS dataset's episode returns, and "
        f'{dataset_dir} holds a Reverb checkpoint: set create_iql_agent.reward_scale_factor.')
  returns = formats.read(dataset_dir).episode_returns()
  spread = float(np.max(returns) - np.min(returns))
  if spread <= 0:
    raise rlds.DatasetError(
        f'Every episode of the dataset at {dataset_dir} returns {returns[0]:g}, so its '
        'return range gives IQL no reward scale: set create_iql_agent.reward_scale_factor.')
  logs.progress("IQL's rewards are scaled by %.4g: %g / the dataset's episode-return "
                'range, %.1f.', RETURN_RANGE / spread, RETURN_RANGE, spread)
  return RETURN_RANGE / spread

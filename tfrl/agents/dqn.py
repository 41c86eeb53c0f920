"""DQN agents from tf-agents, configured for tfrl's n-step transition items.

`NStepTransitionWriter(n, discount=gamma)` stores each n-step transition as a 2-step
Trajectory whose reward already sums the n discounted rewards and whose discount is
gamma^(k-1) * d. A DqnAgent with `n_step_update=1` and the same gamma therefore
computes the exact n-step target; do not also set the agent's n_step_update.

Besides tf-agents' agent, tfrl's DQN declares (see `tfrl.agents.interface`) its
priorities for prioritized replay (|TD error| per row) and a collect policy per
collector: with several collectors, collector i's exploration decays to
epsilon_end ** (1 + i / (num_collectors - 1)) (Ape-X's spread, anchored at the config:
collector 0 keeps the configured epsilon_end, the last one its square).
"""
import dataclasses
from typing import Sequence, Union

import gin
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.policies import epsilon_greedy_policy
from tf_agents.policies import tf_policy
from tf_agents.utils import common

from tfrl import layouts
from tfrl.agents import hyperparameters as hyperparameters_lib
from tfrl.agents import interface
from tfrl.networks import encoders


@dataclasses.dataclass(frozen=True)
class EpsilonSchedule:
  """Exploration falling linearly from `start` to `end` over `decay_steps` train steps.

  `end` may be a variable (population-based training changes it while the job runs);
  a collector of several acts with `end ** end_exponent` (`for_task`).
  """
  start: float
  end: Union[float, tf.Variable]
  decay_steps: int
  train_step: tf.Variable
  end_exponent: float = 1.0

  def __call__(self) -> tf.Tensor:
    fraction = tf.minimum(
        tf.cast(self.train_step, tf.float32) / float(max(self.decay_steps, 1)), 1.0)
    end = tf.cast(self.end, tf.float32) ** self.end_exponent
    return self.start + fraction * (end - self.start)

  def for_task(self, task_id: int, num_tasks: int) -> 'EpsilonSchedule':
    """Collector `task_id`'s schedule: its end is end ** (1 + task_id / (num_tasks - 1))."""
    if num_tasks < 2:
      return self
    return dataclasses.replace(self, end_exponent=1 + task_id / (num_tasks - 1))


def _track_epsilon_end(policy: tf_policy.TFPolicy,
                       schedule: EpsilonSchedule) -> tf_policy.TFPolicy:
  """`policy`, holding the schedule's `end` where it is a variable: in its `variables()`,
  which its export saves, but not a checkpoint dependency (the agent's checkpoint holds
  the policy; see `tfrl.agents.hyperparameters` on checkpoints written before)."""
  if isinstance(schedule.end, tf.Variable):
    policy._epsilon_end = policy._no_dependency(schedule.end)  # pylint: disable=protected-access
  return policy


class _ReplayAgentInterface:
  """What tfrl's trainers ask of a DQN agent (see `tfrl.agents.interface`), and the
  conservative (CQL) term for training from datasets."""

  def __init__(self, *args, epsilon_schedule: EpsilonSchedule, cql_alpha: float = 0.0,
               **kwargs):
    self._epsilon_schedule = epsilon_schedule
    self._cql_alpha = float(cql_alpha)
    super().__init__(*args, epsilon_greedy=epsilon_schedule, **kwargs)
    # A policy's SavedModel saves the variables its functions read only when the policy
    # tracks them: the schedule (a dataclass) does not, so the policy holds `end` too.
    _track_epsilon_end(self.collect_policy, epsilon_schedule)
    # The discount as a variable the traced loss reads (tf-agents' DqnAgent reads
    # `self._gamma` when it traces), kept out of the agent's checkpoint: a checkpoint
    # written before it existed still matches the agent, and the Learner saves it with
    # the hyperparameters.
    self._gamma = self._no_dependency(
        hyperparameters_lib.tunable_variable(float(self._gamma), 'gamma'))
    # What population-based training may change: those given as variables.
    candidates = {'learning_rate': hyperparameters_lib.rate_of(self._optimizer),
                  'epsilon_end': epsilon_schedule.end,
                  'target_update_period': kwargs.get('target_update_period'),
                  'gamma': self._gamma}
    self._hyperparameters = hyperparameters_lib.untracked(
        self, hyperparameters_lib.Hyperparameters(
            **{key: value for key, value in candidates.items()
               if isinstance(value, tf.Variable)}))

  @property
  def hyperparameters(self) -> hyperparameters_lib.Hyperparameters:
    """What population-based training may change while the agent trains: the learning
    rate, the exploration's end, the train steps between target updates and the
    discount (`gamma`; with n-step transitions the writer's folding keeps the config's,
    so a population refuses bounds on it unless n_step is 1)."""
    return self._hyperparameters

  def _initialize(self):
    # The optimizer's slots now, as its first `apply_gradients` makes them (same
    # variables, names and order) but before the train step is traced: tf.function
    # traces a function that creates variables twice, and tracing is most of a
    # Learner's start-up. Keras lifts them out of any function the same way.
    with tf.name_scope(self._optimizer.name), tf.init_scope():
      self._optimizer.build(self._q_network.trainable_weights)
    return super()._initialize()

  def _get_target_updater(self, tau=1.0, period=1):
    """tf-agents' target update, with a period that may be a variable (tf-agents'
    `Periodically` asks `period == 1` in Python, which a variable cannot answer inside
    the traced train step)."""
    def update():
      return common.soft_variables_update(self._q_network.variables,
                                          self._target_q_network.variables, tau,
                                          tau_non_trainable=1.0)
    return _PeriodicUpdate(update, period)

  def _loss(self, experience, td_errors_loss_fn=None, gamma=1.0, reward_scale_factor=1.0,
            weights=None, training=False):
    """DQN's TD loss, plus with `cql_alpha` > 0 CQL(H)'s conservative term.

    CQL (Kumar et al. 2020, eq. 4, the discrete form in their code and in d3rlpy's
    DiscreteCQL): alpha * E_s[logsumexp_a Q(s, a) - Q(s, a_data)], which lowers the
    values of actions the data does not take. Averaged like the TD loss: over the
    global batch, boundary rows weighing 0.
    """
    loss_info = super()._loss(experience, td_errors_loss_fn=td_errors_loss_fn,
                              gamma=gamma, reward_scale_factor=reward_scale_factor,
                              weights=weights, training=training)
    if not self._cql_alpha:
      return loss_info
    time_steps, policy_steps, _ = self._as_transition(experience)
    q_values, _ = self._q_network(time_steps.observation, step_type=time_steps.step_type,
                                  training=training)
    data_q = common.index_with_actions(q_values, tf.cast(policy_steps.action, tf.int32))
    gap = tf.reduce_logsumexp(q_values, axis=-1) - data_q
    valid = tf.cast(~time_steps.is_last(), tf.float32)
    conservative = common.aggregate_losses(per_example_loss=valid * gap,
                                           sample_weight=weights).total_loss
    tf.summary.scalar('Losses/cql_gap', conservative, step=self.train_step_counter)
    return loss_info._replace(loss=loss_info.loss + self._cql_alpha * conservative)

  def priorities(self, loss_info: tf_agent.LossInfo) -> tf.Tensor:
    """|TD error| per row: prioritized replay's priorities."""
    return tf.abs(loss_info.extra.td_error)

  def collect_policy_for_task(self, task_id: int, num_tasks: int) -> tf_policy.TFPolicy:
    """Epsilon-greedy over the greedy policy with collector `task_id`'s exploration."""
    schedule = self._epsilon_schedule.for_task(task_id, num_tasks)
    return _track_epsilon_end(
        epsilon_greedy_policy.EpsilonGreedyPolicy(self.policy, epsilon=schedule), schedule)


class _PeriodicUpdate(tf.Module):
  """Runs `body` on every `period`-th call (the 1st call counts as 1); `period` is read
  at each call, so a variable's new value applies from the next call on."""

  def __init__(self, body, period, name='periodic_update_targets'):
    super().__init__(name=name)
    self._body = body
    # Not a checkpoint dependency: a variable period is a hyperparameter, saved beside
    # the agent (`tfrl.agents.hyperparameters`).
    self._period = self._no_dependency(period)
    # The same name as tf-agents' Periodically: checkpoints keep their counter.
    self._counter = tf.Variable(0, dtype=tf.int64, trainable=False, name='counter')

  def __call__(self):
    def call(strategy=None):
      del strategy
      period = tf.cast(self._period, tf.int64)
      remainder = tf.math.mod(self._counter.assign_add(1), period)
      return tf.cond(tf.equal(remainder, 0), self._body, tf.no_op)
    context = tf.distribute.get_replica_context()
    return context.merge_call(call) if context else call()


class DqnAgent(_ReplayAgentInterface, dqn_agent.DqnAgent):
  """tf-agents' DqnAgent with tfrl's priorities and per-collector exploration."""


class DdqnAgent(_ReplayAgentInterface, dqn_agent.DdqnAgent):
  """tf-agents' DdqnAgent (Double DQN) with tfrl's priorities and per-collector
  exploration."""


def _per_entry(nest, make_layer):
  """`nest`'s top level with each entry replaced by make_layer(key, entry)."""
  if isinstance(nest, dict):
    return {key: make_layer(key, value) for key, value in nest.items()}
  layers = [make_layer(getattr(nest, '_fields', range(len(nest)))[i], value)
            for i, value in enumerate(nest)]
  return type(nest)(*layers) if hasattr(nest, '_fields') else type(nest)(layers)


def q_network_for(observation_spec, action_spec, fc_layer_params: Sequence[int],
                  cnn='nature') -> q_network.QNetwork:
  """A Q-network (one output per action) for any observation tfrl's encoders serve.

  A flat vector observation gets a fully connected network. Image observations (uint8
  [H, W, C]) and nested ones (Dicts) get tfrl's encoder as the network's preprocessing
  layer (`tfrl.networks.encoders.make_encoder`): a CNN for images (which casts and
  scales uint8 to [0, 1] itself), and for a nest each image key's CNN features
  concatenated with the other keys' flattened values; `fc_layer_params` then follow.

  Raises:
    ValueError: an observation no encoder serves (see `make_encoder`).
  """
  preprocessing, combiner = None, None
  if tf.nest.is_nested(observation_spec):
    # One tfrl encoder per top-level entry, concatenated: DictEncoder's features, in
    # the form tf-agents' EncodingNetwork takes (it wants a combiner for a nest).
    preprocessing = _per_entry(observation_spec, lambda key, spec: encoders.make_encoder(
        spec, fc_layer_params=(), name=f'q_encoder_{key}', cnn=cnn))
    combiner = tf.keras.layers.Concatenate(axis=-1)
  elif encoders.is_image_spec(observation_spec):
    # EncodingNetwork applies it to the batch-squashed [N, H, W, C] observation, what
    # tfrl's encoders take, and copies it (get_config/from_config) for the target.
    preprocessing = encoders.make_encoder(observation_spec, fc_layer_params=(),
                                          name='q_encoder', cnn=cnn)
  return q_network.QNetwork(observation_spec, action_spec,
                            preprocessing_layers=preprocessing,
                            preprocessing_combiner=combiner,
                            fc_layer_params=tuple(fc_layer_params))


@gin.configurable
@interface.trains_from(layouts.TransitionReplay)
@interface.acts_in('discrete')
@interface.tunable('learning_rate', 'epsilon_end', 'target_update_period', 'gamma')
def create_dqn_agent(time_step_spec,
                     action_spec,
                     train_step: tf.Variable,
                     fc_layer_params: Sequence[int] = (100,),
                     learning_rate: float = 1e-3,
                     gamma: float = 0.99,
                     double_q: bool = True,
                     target_update_period: int = 100,
                     target_update_tau: float = 1.0,
                     epsilon_start: float = 1.0,
                     epsilon_end: float = 0.05,
                     epsilon_decay_steps: int = 5000,
                     gradient_clipping: float = None,
                     global_gradient_clipping: float = None,
                     cnn: str = 'nature',
                     cql_alpha: float = 0.0) -> DqnAgent:
  """Returns an initialized (Double) DQN agent.

  The Q-network is `q_network_for`'s: fully connected for vectors, tfrl's encoders
  (the torso classes the actor-critic agents use) for images and Dicts.

  Args:
    time_step_spec, action_spec: from the environment.
    train_step: the learner's step variable (the agent increments it).
    fc_layer_params: hidden layer sizes of the Q-network.
    learning_rate: Adam's learning rate.
    gamma: discount; must equal the writer's `discount`.
    double_q: use Double DQN targets.
    target_update_period: train steps between target network updates.
    target_update_tau: 1.0 copies; < 1 moves the target that fraction of the way.
    epsilon_start, epsilon_end, epsilon_decay_steps: the collect policy's exploration
      falls linearly from start to end over the first decay steps (in train steps).
    gradient_clipping: clip each variable's gradient to this norm separately
      (tf-agents' clipping; None: none).
    global_gradient_clipping: clip the global norm of all the gradients together to
      this (SB3's `max_grad_norm`; None: none). Done by the optimizer
      (`global_clipnorm`), which clips after summing the replicas' gradients, so
      under a strategy it is the clip of the whole batch's gradient.
    cnn: the CNN for image observations: 'nature', 'impala', 'grid' or a callable (see
      `tfrl.networks.encoders.make_encoder`).
      Nature DQN's own network is cnn='nature' with fc_layer_params=() (the CNN ends
      in its 512-unit layer).
    cql_alpha: > 0 adds CQL's conservative term with this weight (offline training
      from a dataset, `Experiment.dataset_dir`; d3rlpy's DiscreteCQL uses 1.0).

  Returns:
    A `DqnAgent` (or `DdqnAgent`, a subclass of tf-agents' `DqnAgent` too).

  Raises:
    ValueError: an observation no encoder serves (see `make_encoder`), or both
      gradient_clipping and global_gradient_clipping set.
  """
  if gradient_clipping is not None and global_gradient_clipping is not None:
    raise ValueError('Set one of gradient_clipping (per variable) and '
                     'global_gradient_clipping (global norm), not both.')
  network = q_network_for(time_step_spec.observation, action_spec, fc_layer_params, cnn)
  # Variables, so population-based training can change them (`agent.hyperparameters`).
  epsilon_end = tf.Variable(epsilon_end, dtype=tf.float32, trainable=False,
                            name='epsilon_end')
  target_update_period = tf.Variable(target_update_period, dtype=tf.int64,
                                     trainable=False, name='target_update_period')
  agent_class = DdqnAgent if double_q else DqnAgent
  agent = agent_class(
      time_step_spec, action_spec,
      q_network=network,
      optimizer=tf.keras.optimizers.Adam(learning_rate,
                                         global_clipnorm=global_gradient_clipping),
      epsilon_schedule=EpsilonSchedule(epsilon_start, epsilon_end, epsilon_decay_steps,
                                       train_step),
      cql_alpha=cql_alpha,
      gamma=gamma,
      target_update_period=target_update_period,
      target_update_tau=target_update_tau,
      td_errors_loss_fn=common.element_wise_huber_loss,
      gradient_clipping=gradient_clipping,
      train_step_counter=train_step)
  agent.initialize()
  return agent

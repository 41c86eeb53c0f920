"""PPO: clipped surrogate, GAE, value clipping, epochs of minibatches per batch.

Schulman et al. 2017, arXiv:1707.06347. Trains on batch-major `[B, T+1]` unrolls from a
FIFO queue (`SequenceWriter(length=T+1, stride=T)`), the same data as IMPALA, with the
same `ActorCriticNetwork` and policy, whose info holds the behaviour distribution and
value of every acted step: the old log-probabilities and old values PPO needs.

Why not tf-agents' PPOAgent: it has no minibatches (each epoch is one step on the whole
batch), and it expects its own policy-info layout and trajectory handling; this one
reuses tfrl's tested GAE (`tfrl.losses.returns`) and the on-policy data path.

One `train` call = `num_epochs` passes over the batch, each in `num_minibatches`
shuffled minibatches: num_epochs * num_minibatches gradient steps. The train step
counter advances by one per call. GAE always runs on whole unrolls first; what is then
shuffled is `shuffle`'s unit: 'rows' (whole unrolls per minibatch, the default) or
'steps' (single (unroll, t) steps drawn from all unrolls, as Stable-Baselines3 does).
"""
import collections
from typing import Optional, Tuple

import gin
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.trajectories import time_step as ts

from tfrl import layouts
from tfrl import replicas
from tfrl.agents import actor_critic_agent
from tfrl.agents import actor_critic_policy
from tfrl.agents import interface
from tfrl.agents import minibatches
from tfrl.losses import policy_gradient
from tfrl.losses import reductions
from tfrl.losses import returns as returns_lib
from tfrl.networks import action_heads

PpoLossInfo = collections.namedtuple(
    'PpoLossInfo', ['policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction'])

SHUFFLE = ('rows', 'steps')


def _steps_as_rows(x):
  """[T, B, ...] -> [1, T * B, ...]: every step becomes a row of its own."""
  trailing = x.shape[2:]
  if trailing.is_fully_defined():
    # Static trailing dims keep the network's input shape known when traced.
    return tf.reshape(x, [1, -1] + trailing.as_list())
  return tf.reshape(x, tf.concat([[1, -1], tf.shape(x)[2:]], 0))


@gin.configurable
class PpoAgent(actor_critic_agent.ActorCriticAgentBase):
  """PPO-clip over an `ActorCriticNetwork`."""

  # Its clipped ratio corrects a little drift, not a queue's worth of stale unrolls:
  # separate collectors are paced to the trainer (tfrl.agents.interface.on_policy).
  on_policy = True

  def __init__(self, time_step_spec, action_spec, network, optimizer,
               train_step_counter: tf.Variable, gamma: float = 0.99,
               lambda_: float = 0.95, clip_ratio: float = 0.2,
               value_clip: Optional[float] = None, value_cost: float = 0.5,
               entropy_cost: float = 0.0, num_epochs: int = 4,
               num_minibatches: int = 1, normalize_advantages: bool = True,
               gradient_clipping: Optional[float] = 0.5, shuffle: str = 'rows',
               reward_scale: float = 1.0, reward_clipping: str = 'none',
               name: str = 'PpoAgent'):
    """Args:
      time_step_spec, action_spec: the environment's specs.
      network: an `ActorCriticNetwork`.
      optimizer: a Keras optimizer.
      train_step_counter: advanced once per `train` call.
      gamma: the discount.
      lambda_: GAE's lambda.
      clip_ratio: epsilon of the clipped surrogate.
      value_clip: clip the new value to old value +- this in the value loss (None: off,
        as in RL-Zoo's configs; Baselines' PPO2 clips it, SB3 with clip_range_vf).
      value_cost, entropy_cost: loss weights.
      num_epochs, num_minibatches: passes over the batch, and minibatches per pass.
        num_minibatches must divide the batch's rows (its unrolls, per replica under
        a strategy) with shuffle='rows', its steps (rows x unroll length) with
        shuffle='steps'; the first `train` call checks.
      normalize_advantages: standardize advantages per minibatch.
      gradient_clipping: global gradient norm clip (None: off).
      shuffle: what a minibatch is made of. 'rows': whole unrolls. 'steps': single
        steps of any unrolls (GAE is computed on the whole unrolls before).
      reward_scale: rewards are multiplied by this before GAE, which keeps the value
        targets of tasks with large returns (Pendulum's reach -160 at gamma 0.9) in a
        range the value head fits (what SB3 users get from VecNormalize).
      reward_clipping: 'none' | 'abs_one' | 'soft_asymmetric', applied after
        `reward_scale` (`tfrl.losses.returns.clip_rewards`; 'abs_one' is Atari's usual
        clipping, which SB3's AtariWrapper applies in the env). The env and every
        reported return keep the raw rewards.
      name: agent name.

    Raises:
      ValueError: num_epochs or num_minibatches below 1, an unknown shuffle or
        reward_clipping.
    """
    minibatches.check_counts(num_epochs, num_minibatches)
    returns_lib.check_reward_clipping(reward_clipping)
    if shuffle not in SHUFFLE:
      raise ValueError(f'shuffle must be one of {SHUFFLE}, got {shuffle!r}.')
    if shuffle == 'steps' and network.is_recurrent:
      raise ValueError("shuffle='steps' takes steps out of their unrolls, which a "
                       "recurrent network needs whole: use shuffle='rows' with an LSTM.")
    self._lambda = lambda_
    self._value_clip = value_clip
    self._value_cost = value_cost
    self._reward_clipping = reward_clipping
    self._num_epochs = num_epochs
    self._num_minibatches = num_minibatches
    self._normalize_advantages = normalize_advantages
    self._gradient_clipping = gradient_clipping
    self._shuffle = shuffle
    super().__init__(time_step_spec, action_spec, network, optimizer, train_step_counter,
                     name, hyperparameters={'entropy_cost': entropy_cost,
                                            'clip_ratio': clip_ratio,
                                            'reward_scale': reward_scale,
                                            'gamma': gamma})

  @property
  def train_inputs(self) -> Tuple[str, ...]:
    """'policy_state' (each unroll's starting state) with a recurrent network."""
    return ('policy_state',) if self._network.is_recurrent else ()

  def _prepare(self, experience, policy_state=None):
    """Time-major tensors, masks, old log-probs/values, GAE advantages and returns.

    Everything is time-major [T, B, ...] except 'policy_state', a recurrent network's
    state at each row's first step ([B, ...]; () without one).
    """
    data = self.time_major(experience)
    valid = tf.cast(data.step_type[:-1] != ts.StepType.LAST, tf.float32)  # [T, B]
    head = self._network.head
    # What the head stored of each acted step (parameters; a squashed Gaussian's sample).
    action_info = {name: data.policy_info[name][:-1] for name in head.info_spec}
    old_values = data.policy_info[actor_critic_policy.VALUE]  # [T+1, B]
    actions = data.action[:-1]
    discounts = self._hyperparameters['gamma'] * data.discount[:-1] * valid
    rewards = returns_lib.clip_rewards(
        self._hyperparameters['reward_scale'] * data.reward[:-1], self._reward_clipping)
    advantages, value_targets = returns_lib.generalized_advantage_estimation(
        rewards, discounts, old_values[:-1], old_values[-1], self._lambda, valid)
    old_log_prob = head.log_prob(action_heads.params_of(action_info, head), actions,
                                 action_info)
    # A nest for Dict observations: every leaf loses the bootstrap step.
    observation = tf.nest.map_structure(lambda x: x[:-1], data.observation)
    return {'observation': observation, 'step_type': data.step_type[:-1],
            'action': actions, 'valid': valid, 'action_info': action_info,
            'old_log_prob': old_log_prob, 'old_value': old_values[:-1],
            'advantage': advantages, 'value_target': value_targets,
            'policy_state': self.initial_network_state(policy_state)}

  def _minibatch_loss(self, batch):
    """This replica's share of the PPO loss on a dict of time-major [T, b] tensors.

    Sums over this replica's steps divided by the count over all replicas (see
    `actor_critic_agent`): with one replica, the minibatch mean.
    """
    (params, values), _ = self._network(batch['observation'], batch['step_type'],
                                        batch['policy_state'])
    head = self._network.head
    valid = batch['valid']
    count = replicas.global_count(tf.reduce_sum(valid))
    advantages = batch['advantage']
    if self._normalize_advantages:
      # Moments over every replica's minibatch: each shard is scaled as the whole one.
      advantages = policy_gradient.normalize_advantages(
          advantages, valid, replicas.global_weighted_moments)
    log_prob = head.log_prob(params, batch['action'], batch['action_info'])
    log_ratio = log_prob - batch['old_log_prob']
    ratio = tf.exp(log_ratio)
    clip_ratio = self._hyperparameters['clip_ratio']
    policy_loss = policy_gradient.clipped_surrogate_loss(
        ratio, advantages, valid, clip_ratio, count)
    value_error = tf.square(values - batch['value_target'])
    if self._value_clip is not None:
      clipped_values = batch['old_value'] + tf.clip_by_value(
          values - batch['old_value'], -self._value_clip, self._value_clip)
      value_error = tf.maximum(value_error, tf.square(clipped_values - batch['value_target']))
    value_loss = 0.5 * reductions.masked_mean(value_error, valid, count)
    entropy = reductions.masked_mean(head.entropy(params), valid, count)
    total = (policy_loss + self._value_cost * value_loss -
             self._hyperparameters['entropy_cost'] * entropy)
    # Diagnostics: KL(old || new) by the low-variance estimator (r - 1) - log r, and
    # the share of steps whose ratio is outside the clip range.
    approx_kl = reductions.masked_mean((ratio - 1) - log_ratio, valid, count)
    clip_fraction = reductions.masked_mean(
        tf.cast(tf.abs(ratio - 1) > clip_ratio, tf.float32), valid, count)
    return total, PpoLossInfo(policy_loss, value_loss, entropy, approx_kl, clip_fraction)

  def _train(self, experience, weights=None, policy_state=None):
    del weights
    data = self._prepare(experience, policy_state)
    if self._shuffle == 'steps':
      # GAE has run on the whole unrolls: from here on a step needs nothing of its
      # neighbours, so every step becomes a row (a length-1 unroll) to shuffle.
      data = tf.nest.map_structure(_steps_as_rows, data)
    rows = self._checked_rows(data['valid'])

    def gradient_step(index):
      # Rows are axis 1 of the time-major tensors, axis 0 of the starting states.
      batch = {name: tf.nest.map_structure(
          lambda x, axis=int(name != 'policy_state'): tf.gather(x, index, axis=axis), value)
               for name, value in data.items()}
      with tf.GradientTape() as tape:
        total, extra = self._minibatch_loss(batch)
      self.apply_gradients(tape, total, self._gradient_clipping)
      return tf_agent.LossInfo(total, extra)

    zero = tf.constant(0.0)
    loss_info = minibatches.run_epochs(
        self._num_epochs, self._num_minibatches, rows, gradient_step,
        tf_agent.LossInfo(zero, PpoLossInfo(*[zero] * 5)))
    # Every epoch normalized with the statistics the batch was collected with.
    self.update_normalizer(experience, after=loss_info)
    self.train_step_counter.assign_add(1)
    actor_critic_agent.write_summaries('losses', PpoLossInfo._fields, loss_info.extra,
                                       self.train_step_counter)
    return loss_info

  def _checked_rows(self, valid):
    """The rows of the prepared [T', rows] `valid` ([1, T * B] with shuffle='steps'),
    checked to split into num_minibatches (`minibatches.checked_rows`)."""
    if self._shuffle == 'rows':
      unit = 'rows (unrolls; per replica under a strategy)'
    else:
      unit = 'steps (rows x unroll length; per replica under a strategy)'
    return minibatches.checked_rows(valid.shape[1], tf.shape(valid)[1],
                                    self._num_minibatches, 'PpoAgent', unit)

  def _loss(self, experience, weights=None, policy_state=None, training=False):
    del weights, training
    total, extra = self._minibatch_loss(self._prepare(experience, policy_state))
    return tf_agent.LossInfo(total, extra)


@gin.configurable
@interface.trains_from(layouts.SequenceQueue)
@interface.acts_in('discrete', 'continuous')
@interface.tunable('learning_rate', 'entropy_cost', 'clip_ratio', 'reward_scale', 'gamma')
def create_ppo_agent(time_step_spec, action_spec, train_step: tf.Variable,
                     gamma: float = 0.99, learning_rate: float = 3e-4,
                     **kwargs) -> PpoAgent:
  """Builds a PpoAgent with an ActorCriticNetwork and Adam.

  Args:
    time_step_spec, action_spec: the environment's specs.
    train_step: the learner's step variable.
    gamma: the discount.
    learning_rate: Adam's learning rate.
    **kwargs: the network's settings (fc_layer_params, shared_torso, lstm_size, cnn,
      normalize_observations, activation, initial_log_scale, continuous_head,
      initializer, adam_epsilon: see
      `actor_critic_agent.create_agent`) and any `PpoAgent` argument.

  Returns:
    The agent.

  Raises:
    ValueError: an observation or action spec the network cannot serve, or bad
      PpoAgent arguments.
  """
  return actor_critic_agent.create_agent(PpoAgent, time_step_spec, action_spec,
                                         train_step, gamma, learning_rate, **kwargs)

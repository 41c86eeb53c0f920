"""IMPALA (V-trace actor-critic), with CLEAR cloning and APPO's clipped surrogate.

One agent, three algorithms, chosen by configuration:

- IMPALA (Espeholt et al. 2018, arXiv:1802.01561): policy gradient on V-trace
  advantages, a value baseline regressed to V-trace targets, an entropy bonus.
- CLEAR (Rolnick et al. 2019, arXiv:1811.11682): IMPALA on batches that mix fresh
  unrolls with replayed ones; on the replayed rows (`replay_mask`), policy cloning
  KL(mu || pi) and value cloning ||V - V_replay||^2 keep the agent close to what it did
  (the losses: `tfrl.losses.cloning`; the builder with the paper's costs:
  `tfrl.agents.clear`).
- APPO (asynchronous PPO, as in Sample Factory): PPO's clipped surrogate on V-trace
  advantages, with rows dropped whose policy lag (train_step - policy_version) exceeds
  `max_policy_lag`.

With CLEAR, `max_policy_lag` applies to the fresh (queue) rows only: Sample Factory's
lag bounds how stale asynchronous on-policy data may get, while replayed rows are old by
design and CLEAR (the paper, and the seed learner) trains V-trace and cloning on all of
them; dropping them would silently turn CLEAR back into IMPALA. A recurrent CLEAR may
burn in replayed unrolls (R2D2, Kapturowski et al. 2019): their first
`replay_burn_in_steps` steps only refresh the LSTM state stored when they were acted.

Training data are unrolls of T+1 steps, batch-major `[B, T+1]` Trajectories from a
`SequenceWriter(length=T+1, stride=T)`; step t's transition is (x_t, a_t, r_t, x_{t+1}),
and the value of x_T bootstraps the unroll. Steps whose step type is LAST are episode
boundaries (the transition LAST -> FIRST is no experience): they get rho = c = 0 (so
the V-trace target at them is V itself and nothing crosses into the next episode) and
zero loss weight.
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
from tfrl.losses import cloning
from tfrl.losses import policy_gradient
from tfrl.losses import reductions
from tfrl.losses import returns as returns_lib
from tfrl.losses import vtrace
from tfrl.networks import action_heads

ImpalaLossInfo = collections.namedtuple('ImpalaLossInfo', [
    'policy_loss', 'baseline_loss', 'entropy_loss', 'policy_cloning_loss',
    'value_cloning_loss', 'gradient_norm', 'fraction_dropped'])

POLICY_LOSSES = ('vtrace', 'ppo')


@gin.configurable
class ImpalaAgent(actor_critic_agent.ActorCriticAgentBase):
  """V-trace actor-critic over an `ActorCriticNetwork` (IMPALA / CLEAR / APPO)."""

  def __init__(self, time_step_spec, action_spec, network, optimizer,
               train_step_counter: tf.Variable,
               gamma: float = 0.99,
               baseline_cost: float = 0.5,
               entropy_cost: float = 0.01,
               reward_clipping: str = 'none',
               gradient_clipping: Optional[float] = 40.0,
               clip_rho_threshold: float = 1.0,
               clip_pg_rho_threshold: float = 1.0,
               lambda_: float = 1.0,
               positive_advantages_only: bool = False,
               policy_loss: str = 'vtrace',
               ppo_clip_ratio: float = 0.2,
               normalize_advantages: bool = False,
               max_policy_lag: Optional[int] = None,
               policy_cloning_cost: float = 0.0,
               value_cloning_cost: float = 0.0,
               reward_scale: float = 1.0,
               replay_burn_in_steps: int = 0,
               num_epochs: int = 1,
               num_minibatches: int = 1,
               name: str = 'ImpalaAgent'):
    """Args:
      time_step_spec, action_spec: the environment's specs.
      network: an `ActorCriticNetwork`.
      optimizer: a Keras optimizer.
      train_step_counter: incremented once per train step.
      gamma: the discount.
      baseline_cost, entropy_cost: weights of the value and entropy losses.
      reward_clipping: 'none' | 'abs_one' | 'soft_asymmetric'.
      gradient_clipping: clip the global gradient norm to this (None: no clipping).
      clip_rho_threshold, clip_pg_rho_threshold, lambda_: V-trace's rho_bar,
        pg rho_bar and lambda.
      positive_advantages_only: use only steps with a positive advantage in the policy
        loss (a self-imitation style variant).
      policy_loss: 'vtrace' (IMPALA's policy gradient) or 'ppo' (APPO's clipped
        surrogate on V-trace advantages).
      ppo_clip_ratio: epsilon of the clipped surrogate.
      normalize_advantages: standardize the policy-gradient advantages per batch.
      max_policy_lag: drop steps whose train_step - policy_version exceeds this; with
        a replay mask (CLEAR) only fresh rows are dropped, never replayed ones.
      policy_cloning_cost, value_cloning_cost: CLEAR's cloning loss weights (0: no
        cloning, IMPALA; `create_clear_agent` passes the paper's). The cloning losses
        sum over the valid steps of replayed rows and, like every other term, divide by
        the count of all valid steps (fresh and replayed).
      reward_scale: rewards are multiplied by this (before any clipping), to keep
        value targets of tasks with large returns in a range the value head fits.
      replay_burn_in_steps: on replayed rows of a recurrent network, the first this many
        steps only refresh the LSTM state from the stored one (no loss, and no gradient
        through the refreshed state); the agent then declares 'replay_mask'. Fresh rows
        train on every step: their stored state is current.
      num_epochs, num_minibatches: passes over each batch, and minibatches of whole
        unrolls (dividing the replica's unrolls) per pass, each with V-trace by the
        network of that step: Sample Factory's APPO scheme. 1, 1: IMPALA's one step.
      name: agent name.

    Raises:
      ValueError: an unknown reward_clipping or policy_loss; a negative
        replay_burn_in_steps, or one above 0 without a recurrent network;
        num_epochs or num_minibatches below 1.
    """
    minibatches.check_counts(num_epochs, num_minibatches)
    returns_lib.check_reward_clipping(reward_clipping)
    if policy_loss not in POLICY_LOSSES:
      raise ValueError(f'policy_loss must be one of {POLICY_LOSSES}, got {policy_loss!r}.')
    if replay_burn_in_steps < 0:
      raise ValueError(f'replay_burn_in_steps must be >= 0, got {replay_burn_in_steps}.')
    if replay_burn_in_steps and not network.is_recurrent:
      raise ValueError(f'replay_burn_in_steps={replay_burn_in_steps} refreshes an LSTM '
                       'state: set lstm_size, or replay_burn_in_steps=0.')
    self._baseline_cost = baseline_cost
    self._reward_clipping = reward_clipping
    self._gradient_clipping = gradient_clipping
    self._clip_rho_threshold = clip_rho_threshold
    self._clip_pg_rho_threshold = clip_pg_rho_threshold
    self._lambda = lambda_
    self._positive_advantages_only = positive_advantages_only
    self._policy_loss = policy_loss
    self._normalize_advantages = normalize_advantages
    self._max_policy_lag = max_policy_lag
    self._policy_cloning_cost = policy_cloning_cost
    self._value_cloning_cost = value_cloning_cost
    self._replay_burn_in_steps = replay_burn_in_steps
    self._num_epochs = num_epochs
    self._num_minibatches = num_minibatches
    hyperparameters = {'entropy_cost': entropy_cost, 'reward_scale': reward_scale,
                       'gamma': gamma}
    if policy_loss == 'ppo':
      hyperparameters['clip_ratio'] = ppo_clip_ratio
    super().__init__(time_step_spec, action_spec, network, optimizer, train_step_counter,
                     name, hyperparameters)

  @property
  def train_inputs(self) -> Tuple[str, ...]:
    """The sample fields `train` needs (see `tfrl.agents.interface`): 'replay_mask'
    when a cloning cost or the replay burn-in is above zero (CLEAR), 'policy_version'
    with a maximum lag, 'policy_state' (each unroll's starting state) with a recurrent
    network."""
    inputs = ()
    if (self._policy_cloning_cost > 0 or self._value_cloning_cost > 0 or
        self._replay_burn_in_steps > 0):
      inputs += ('replay_mask',)
    if self._max_policy_lag is not None:
      inputs += ('policy_version',)
    if self._network.is_recurrent:
      inputs += ('policy_state',)
    return inputs

  def _train(self, experience, weights=None, replay_mask=None, policy_version=None,
             policy_state=None):
    inputs = {'experience': experience, 'weights': weights, 'replay_mask': replay_mask,
              'policy_version': policy_version, 'policy_state': policy_state}
    inputs = {name: value for name, value in inputs.items() if value is not None}

    def gradient_step(index=None):
      # Every input is batch-major: rows (unrolls) are axis 0.
      batch = inputs if index is None else tf.nest.map_structure(
          lambda x: tf.gather(x, index), inputs)
      with tf.GradientTape() as tape:
        loss_info = self._loss(**batch, training=True)
      norm = self.apply_gradients(tape, loss_info.loss, self._gradient_clipping)
      return loss_info._replace(extra=loss_info.extra._replace(gradient_norm=norm))

    if self._num_epochs == self._num_minibatches == 1:
      loss_info = gradient_step()
    else:
      step_type = tf.nest.flatten(experience.step_type)[0]
      rows = minibatches.checked_rows(
          step_type.shape[0], tf.shape(step_type)[0], self._num_minibatches,
          'ImpalaAgent', 'rows (unrolls; per replica under a strategy)')
      zero = tf.constant(0.0)
      zero = tf_agent.LossInfo(zero, ImpalaLossInfo(*[zero] * len(ImpalaLossInfo._fields)))
      loss_info = minibatches.run_epochs(self._num_epochs, self._num_minibatches, rows,
                                         gradient_step, zero)
    norm = loss_info.extra.gradient_norm  # the last step's
    # The loss normalized with the statistics the batch was collected with.
    self.update_normalizer(experience, after=(loss_info, norm))
    self.train_step_counter.assign_add(1)
    tf.summary.scalar('losses/gradient_norm', norm, step=self.train_step_counter)
    # The Learner sums the replicas' loss info: each reports its share of the norm.
    share = norm / float(replicas.num_replicas())
    return tf_agent.LossInfo(loss_info.loss, loss_info.extra._replace(gradient_norm=share))

  def _loss(self, experience, weights=None, replay_mask=None, policy_version=None,
            policy_state=None, training=False):
    """Computes this replica's share of the loss on `[B, T+1]` unrolls.

    Every term is a sum over this replica's steps divided by the count over all
    replicas (see `actor_critic_agent`), so with one replica it is the batch mean.

    Args:
      experience: a batch-major Trajectory of unrolls.
      weights: optional [B] row weights.
      replay_mask: optional [B], 1.0 for replayed rows (CLEAR's cloning and the replay
        burn-in apply there; a maximum policy lag does not).
      policy_version: optional [B, T+1] train step of the acting policy per step.
      policy_state: a recurrent network's state at each row's first step ([B, ...]).
      training: unused (no dropout or batch norm).

    Returns:
      LossInfo(total loss, ImpalaLossInfo).

    Raises:
      ValueError: a replay burn-in without a replay_mask, or as long as the unroll.
    """
    del training
    time_major = self.time_major(experience)
    replayed_rows = (None if replay_mask is None
                     else tf.cast(replay_mask, tf.float32))  # [B]
    params, values = self._unroll(time_major, policy_state, replayed_rows)
    valid, fraction_dropped = self._valid_steps(time_major.step_type[:-1], weights,
                                                replayed_rows, policy_version)
    rewards = returns_lib.clip_rewards(
        self._hyperparameters['reward_scale'] * time_major.reward[:-1],
        self._reward_clipping)
    # Row weights weight the loss; only their zeros (masked steps) cut the returns.
    discounts = self._hyperparameters['gamma'] * time_major.discount[:-1] * tf.cast(valid > 0, tf.float32)
    head = self._network.head
    info = tf.nest.map_structure(lambda x: x[:-1], time_major.policy_info)
    behaviour = action_heads.params_of(info, head)
    target = {name: x[:-1] for name, x in params.items()}
    actions = time_major.action[:-1]
    target_log_probs = head.log_prob(target, actions, info)
    behaviour_log_probs = head.log_prob(behaviour, actions, info)
    # Boundary steps: rho = c = 0, so their V-trace target is V itself.
    log_rhos = tf.where(valid > 0, target_log_probs - behaviour_log_probs, -1e9)
    returns = vtrace.from_importance_weights(
        log_rhos, discounts, rewards, values[:-1], values[-1],
        self._clip_rho_threshold, self._clip_pg_rho_threshold, self._lambda)
    advantages = returns.pg_advantages
    if self._normalize_advantages:
      # Moments over every replica's steps: each shard is scaled as the whole batch.
      advantages = policy_gradient.normalize_advantages(
          advantages, valid, replicas.global_weighted_moments)
    policy_weight = valid
    if self._positive_advantages_only:
      policy_weight *= tf.cast(advantages > 0, tf.float32)
    # Every term is averaged over all valid steps (of all replicas), whatever subset
    # of them it sums over: the weights of the terms do not depend on the mix.
    count = replicas.global_count(tf.reduce_sum(valid))
    if self._policy_loss == 'ppo':
      ratio = tf.exp(target_log_probs - behaviour_log_probs)
      policy_loss = policy_gradient.clipped_surrogate_loss(
          ratio, advantages, policy_weight, self._hyperparameters['clip_ratio'], count)
    else:
      policy_loss = policy_gradient.policy_gradient_loss(
          target_log_probs, advantages, policy_weight, count)
    baseline_loss = 0.5 * reductions.masked_mean(
        tf.square(returns.vs - values[:-1]), valid, count)
    entropy_loss = -reductions.masked_mean(
        head.entropy(target), valid, count)
    policy_cloning_loss = value_cloning_loss = tf.constant(0.0)
    if replay_mask is not None:
      replayed = valid * tf.cast(replay_mask, tf.float32)[None, :]
      policy_cloning_loss, value_cloning_loss = cloning.replay_cloning_losses(
          head.kl(behaviour, target), values[:-1], info[actor_critic_policy.VALUE],
          replayed, count)
    total = (policy_loss + self._baseline_cost * baseline_loss +
             self._hyperparameters['entropy_cost'] * entropy_loss +
             self._policy_cloning_cost * policy_cloning_loss +
             self._value_cloning_cost * value_cloning_loss)
    terms = {'policy_loss': policy_loss, 'baseline_loss': baseline_loss,
             'entropy_loss': entropy_loss, 'policy_cloning_loss': policy_cloning_loss,
             'value_cloning_loss': value_cloning_loss, 'total_loss': total,
             'fraction_dropped': fraction_dropped}
    actor_critic_agent.write_summaries('losses', list(terms), list(terms.values()),
                                       self.train_step_counter)
    return tf_agent.LossInfo(total, ImpalaLossInfo(
        policy_loss, baseline_loss, entropy_loss, policy_cloning_loss, value_cloning_loss,
        tf.constant(0.0), fraction_dropped))

  def _valid_steps(self, step_type, weights, replayed_rows, policy_version):
    """The [T, B] weight of each step in the loss, and the share a max lag dropped.

    Args:
      step_type: [T, B] step types of the unrolls' first T steps.
      weights: optional [B] row weights.
      replayed_rows: optional [B], 1.0 for replayed rows.
      policy_version: optional [B, T+1] train step of the acting policy per step.

    Returns:
      (valid [T, B]: 0 at episode boundaries, replayed rows' burn-in steps and steps
      past max_policy_lag, else the row's weight; the dropped fraction of the valid
      steps of all replicas, a scalar).
    """
    valid = tf.cast(step_type != ts.StepType.LAST, tf.float32)  # [T, B]
    if weights is not None:
      valid *= tf.cast(weights, tf.float32)[None, :]
    if self._replay_burn_in_steps:
      # Replayed rows' burn-in steps only refreshed the state: no loss term at all.
      burn_in = tf.cast(tf.range(tf.shape(valid)[0]) < self._replay_burn_in_steps,
                        tf.float32)[:, None]  # [T, 1]
      valid *= 1.0 - burn_in * replayed_rows[None, :]
    fraction_dropped = tf.constant(0.0)
    if policy_version is not None:
      fresh = self._fresh_steps(policy_version, replayed_rows)
      fraction_dropped = (tf.reduce_sum(valid * (1.0 - fresh)) /
                          replicas.global_count(tf.reduce_sum(valid)))
      valid *= fresh
    return valid, fraction_dropped

  def _unroll(self, time_major, policy_state, replayed_rows):
    """Distribution parameters ({name: [T+1, B, ...]}) and values [T+1, B].

    A recurrent network unrolls from each row's stored starting state. With a replay
    burn-in it unrolls the first k steps, then the rest from the state they reach; on
    replayed rows that state is a constant (R2D2's burn-in: the stale stored state is
    refreshed by the current network, and no gradient flows back into the burn-in),
    on fresh rows it is the same unroll as without burn-in, gradient included.
    """
    observation, step_type = time_major.observation, time_major.step_type
    state = self.initial_network_state(policy_state)
    k = self._replay_burn_in_steps
    if not k:
      (params, values), _ = self._network(observation, step_type, state)
      return params, values
    if replayed_rows is None:
      raise ValueError(f'replay_burn_in_steps={k} applies to replayed rows: train with '
                       "the 'replay_mask' input (CLEAR: create_clear_agent).")
    steps = step_type.shape[0]
    if steps is not None and k >= steps - 1:
      raise ValueError(f'replay_burn_in_steps={k} leaves no step to train of unrolls of '
                       f'{steps - 1} transitions: make it smaller than unroll_length.')
    head, tail = ([tf.nest.map_structure(lambda x: x[part], observation), step_type[part]]
                  for part in (slice(None, k), slice(k, None)))
    (head_params, head_values), state = self._network(*head, state)
    replayed = tf.cast(replayed_rows, tf.bool)[:, None]
    state = tf.nest.map_structure(
        lambda x: tf.where(replayed, tf.stop_gradient(x), x), state)
    (tail_params, tail_values), _ = self._network(*tail, state)
    params = tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), head_params,
                                   tail_params)
    return params, tf.concat([head_values, tail_values], 0)

  def _fresh_steps(self, policy_version, replayed_rows=None):
    """[T, B] 1.0 where a step is kept by max_policy_lag; summarizes the lags.

    The lag of a step is train_step - policy_version; its min, mean and max over the
    fresh rows (every replica's; all rows without a replay mask) go to
    `policy_lag/version_diff_{min,avg,max}`. Replayed rows are always kept: the lag is
    Sample Factory's bound on stale on-policy data, and replay is old by design. Only
    an agent with a max_policy_lag takes 'policy_version' (see `train_inputs`).
    """
    versions = tf.transpose(tf.cast(policy_version, tf.int64))[:-1]  # [T, B]
    lag = tf.cast(self.train_step_counter - versions, tf.float32)
    fresh_row = (tf.ones_like(lag[0]) if replayed_rows is None
                 else 1.0 - replayed_rows)[None, :] * tf.ones_like(lag)  # [T, B]
    is_fresh = fresh_row > 0
    per_replica = replicas.gather_over_replicas(tf.stack([
        tf.reduce_min(tf.where(is_fresh, lag, float('inf'))),
        tf.reduce_max(tf.where(is_fresh, lag, -float('inf'))),
        tf.reduce_sum(lag * fresh_row), tf.reduce_sum(fresh_row)]))  # [replicas, 4]
    count = tf.reduce_sum(per_replica[:, 3])
    step = self.train_step_counter
    # A batch without fresh rows has no lag to report: 0 rather than +-inf or NaN.
    for name, value in (('min', tf.reduce_min(per_replica[:, 0])),
                        ('avg', tf.reduce_sum(per_replica[:, 2]) / tf.maximum(count, 1.0)),
                        ('max', tf.reduce_max(per_replica[:, 1]))):
      tf.summary.scalar(f'policy_lag/version_diff_{name}',
                        tf.where(count > 0, value, 0.0), step=step)
    within = tf.cast(lag <= float(self._max_policy_lag), tf.float32)
    return tf.maximum(within, 1.0 - fresh_row)


@gin.configurable
@interface.trains_from(layouts.SequenceQueue)
@interface.acts_in('discrete', 'continuous')
# clip_ratio only with policy_loss='ppo' (APPO).
@interface.tunable('learning_rate', 'entropy_cost', 'reward_scale', 'clip_ratio', 'gamma')
def create_impala_agent(time_step_spec, action_spec, train_step: tf.Variable,
                        gamma: float = 0.99, learning_rate: float = 1e-3,
                        **kwargs) -> ImpalaAgent:
  """Builds an ImpalaAgent with an ActorCriticNetwork and Adam.

  Args:
    time_step_spec, action_spec: the environment's specs.
    train_step: the learner's step variable.
    gamma: the discount.
    learning_rate: Adam's learning rate.
    **kwargs: the network's settings (fc_layer_params, shared_torso, lstm_size, cnn,
      normalize_observations, activation, initial_log_scale, continuous_head,
      initializer, adam_epsilon: see
      `actor_critic_agent.create_agent`) and any `ImpalaAgent` argument
      (policy_loss='ppo' for APPO, cloning costs for CLEAR, ...).

  Returns:
    The agent.
  """
  return actor_critic_agent.create_agent(ImpalaAgent, time_step_spec, action_spec,
                                         train_step, gamma, learning_rate, **kwargs)

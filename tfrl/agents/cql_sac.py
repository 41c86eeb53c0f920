"""CQL for continuous actions: tf-agents' CqlSacAgent, averaged as tfrl averages losses.

Conservative Q-learning (Kumar et al. 2020, CQL(H), eq. 4) adds to SAC's critic loss
alpha * E_s[logsumexp_a Q(s, a) - Q(s, a_data)], estimated for continuous actions by
importance sampling (their appendix F): N actions from the policy and N uniform ones,
each Q-value less its proposal's log density, inside one logsumexp.

tf-agents' `CqlSacAgent` computes that term with a plain mean over the rows it is
given, which departs from tfrl's losses in two ways this subclass fixes:

- Under a `tf.distribute` strategy each replica holds a slice of the batch and the
  replicas' gradients are summed, so every loss must be a replica's share of the
  global batch mean (`common.aggregate_losses`, as SAC's own losses are). A per-replica
  mean makes the term `num_replicas` times too strong, and the Lagrange multiplier's
  budget `cql_tau` then counts once per replica.
- Rows that do not hold a transition (episode boundaries, weight 0 in the transition
  layout's inputs) count in the mean.

and in one way where tf-agents departs from the CQL authors' code and d3rlpy: their
logsumexp takes three proposals, N uniform actions, N of the policy at s and N of the
policy at s' (all valued at s), where tf-agents' takes the first two. Here it takes all
three. The samples come from the parent's helpers; the estimator has no log 3N
correction (as the authors' code and d3rlpy), and the uniform proposal's log density
is summed over the action's dimensions once (tf-agents multiplies the summed log range
by the dimension again when the bounds are given per dimension).

The CQL authors' code and tf-agents' D4RL example train the actor by behaviour cloning
for its first steps (`num_bc_steps`: the authors' `policy_eval_start`, tf-agents' 10,000
on MuJoCo) while the critics learn conservatively; a dataset's actions at the bounds have
no finite density under the tanh-squashed actor, so here they are pulled inside the
bounds for that loss (tf-agents' example clips its data to +-0.995 for the same reason).

What a population may change while it trains (`CqlSacAgent.hyperparameters`): SAC's
(`tfrl.agents.sac.sac_hyperparameters`: the actor's, critics' and alpha's Adam rates and
`gamma`) and, when it is fixed (no Lagrange multiplier), the conservative weight
`cql_alpha`.
"""
from typing import Optional, Sequence

import gin
import tensorflow as tf
from tf_agents.agents.cql import cql_sac_agent
from tf_agents.utils import common

from tfrl import layouts
from tfrl.agents import hyperparameters as hyperparameters_lib
from tfrl.agents import interface
from tfrl.agents import sac


# The share of the half-range a cloned action may reach: tf-agents' +-0.995 on [-1, 1].
_BC_ACTION_MARGIN = 0.995


def conservative_gap(q_samples: tf.Tensor, log_proposal: tf.Tensor, q_data: tf.Tensor,
                     temperature: float = 1.0) -> tf.Tensor:
  """CQL(H)'s gap per row: the importance-sampled logsumexp over actions less Q(s, a_data).

  Args:
    q_samples: [B, M] Q-values of M sampled actions (every proposal's, side by side).
    log_proposal: [B, M] (or broadcastable) each sample's log density under the
      proposal that drew it.
    q_data: [B] Q-values of the dataset's actions.
    temperature: the softmax temperature (1: the paper's logsumexp).

  Returns:
    [B] the gap, temperature-scaled logsumexp of (Q * temperature - log proposal)
    over the M samples, less q_data.
  """
  log_proposal = tf.broadcast_to(log_proposal, tf.shape(q_samples))
  return (tf.reduce_logsumexp(q_samples * temperature - log_proposal, axis=1) / temperature
          - q_data)


class CqlSacAgent(cql_sac_agent.CqlSacAgent):
  """tf-agents' CqlSacAgent with the conservative term averaged over the global batch,
  boundary rows (weight 0) left out, and one Lagrange budget per batch under any
  strategy."""

  # Set by _train while it traces: the parent's _cql_loss is given neither the row
  # weights nor the next time steps (whose policy samples are the third proposal).
  _cql_row_weights = None
  _cql_next_time_steps = None

  def __init__(self, *args, **kwargs):
    """Args: those of tf-agents' `CqlSacAgent`."""
    super().__init__(*args, **kwargs)
    hyperparameters = sac.sac_hyperparameters(self)
    if not self._use_lagrange_cql_alpha:
      # A variable the traced loss reads (tf-agents converts it to a tensor there), kept
      # out of the agent's checkpoint as SAC's discount is.
      self._cql_alpha = self._no_dependency(
          hyperparameters_lib.tunable_variable(float(self._cql_alpha), 'cql_alpha'))
      hyperparameters = hyperparameters_lib.Hyperparameters(
          **{name: hyperparameters[name] for name in hyperparameters.names},
          cql_alpha=self._cql_alpha)
    self._hyperparameters = hyperparameters_lib.untracked(self, hyperparameters)

  @property
  def hyperparameters(self) -> hyperparameters_lib.Hyperparameters:
    """What population-based training may change (see the module docstring)."""
    return self._hyperparameters

  @property
  def _cql_tau(self):
    # The parent's multiplier loss is -alpha * (replica's share of the term - tau), and
    # the replicas' gradients are summed: each replica holds tau / num_replicas.
    replicas = tf.distribute.get_replica_context()
    return self._cql_budget / (replicas.num_replicas_in_sync if replicas else 1)

  @_cql_tau.setter
  def _cql_tau(self, value):
    self._cql_budget = value

  def _train(self, experience, weights):
    self._cql_row_weights = weights
    self._cql_next_time_steps = self._as_transition(experience).next_time_step
    try:
      return super()._train(experience, weights)
    finally:
      self._cql_row_weights = None
      self._cql_next_time_steps = None

  def actor_loss(self, time_steps, actions, weights=None, training=True):
    """The parent's actor loss (behaviour cloning for the first `num_bc_steps`) with the
    cloned actions pulled inside the bounds so their log density stays finite."""
    spec = tf.nest.flatten(self.action_spec)[0]
    middle = (spec.maximum + spec.minimum) / 2.0
    reach = _BC_ACTION_MARGIN * (spec.maximum - spec.minimum) / 2.0
    actions = tf.clip_by_value(actions, middle - reach, middle + reach)
    return super().actor_loss(time_steps, actions, weights=weights, training=training)

  def _uniform_proposal(self, observation):
    """One action drawn uniformly within the action bounds per row of `observation`.

    Returns:
      (actions [rows, ...action shape], the uniform density's log, a scalar).
    """
    spec = tf.nest.flatten(self.action_spec)[0]
    low = tf.broadcast_to(tf.constant(spec.minimum, spec.dtype), spec.shape)
    high = tf.broadcast_to(tf.constant(spec.maximum, spec.dtype), spec.shape)
    rows = tf.shape(tf.nest.flatten(observation)[0])[:1]
    unit = tf.random.uniform(tf.concat([rows, spec.shape], axis=0), dtype=spec.dtype,
                             seed=self._action_seed_stream())
    return low + unit * (high - low), -tf.reduce_sum(tf.math.log(high - low))

  def _cql_loss(self, time_steps, actions, training=False):
    """The conservative term: this replica's share of the weighted global mean gap
    (averaged over the two critics)."""
    batch_size = tf.shape(actions)[0]
    num = self._num_cql_samples
    tile = lambda x: tf.repeat(x, num, axis=0)  # row-major: [B * N], as the reshape reads
    observation = tf.nest.map_structure(tile, time_steps.observation)
    flat = lambda x: tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], axis=0))
    # The three proposals' [B, N] actions and log densities, every one valued at s.
    policy_actions, log_pi = self._sample_and_transpose_actions_and_log_probs(
        time_steps, num, training=False)
    next_time_steps = self._cql_next_time_steps
    if next_time_steps is None:  # called outside _train: s' is s
      next_time_steps = time_steps
    next_actions, log_pi_next = self._sample_and_transpose_actions_and_log_probs(
        next_time_steps, num, training=False)
    uniform_actions, log_uniform = self._uniform_proposal(observation)
    sampled = tf.concat([flat(policy_actions), flat(next_actions), uniform_actions], 0)
    log_proposal = tf.concat([log_pi, log_pi_next,
                              tf.fill(tf.shape(log_pi), tf.cast(log_uniform, log_pi.dtype))],
                             axis=1)
    # One critic call for all 3 * B * N samples (rows ordered proposal, row, sample).
    three = lambda x: tf.concat([x] * 3, axis=0)
    inputs = (tf.nest.map_structure(three, observation), sampled)
    step_type = three(tile(time_steps.step_type))
    by_row = lambda q: tf.reshape(tf.transpose(tf.reshape(q, [3, batch_size, num]),
                                               [1, 0, 2]), [batch_size, 3 * num])
    gaps = []
    for critic in (self._critic_network_1, self._critic_network_2):
      q_samples, _ = critic(inputs, step_type, training=False)
      q_data, _ = critic((time_steps.observation, actions), time_steps.step_type,
                         training=training)
      gaps.append(conservative_gap(by_row(q_samples), log_proposal, q_data,
                                   self._softmax_temperature))
    valid = tf.cast(~time_steps.is_last(), tf.float32)
    return common.aggregate_losses(per_example_loss=valid * 0.5 * (gaps[0] + gaps[1]),
                                   sample_weight=self._cql_row_weights).total_loss


@gin.configurable
@interface.trains_from(layouts.TransitionReplay)
@interface.acts_in('continuous')
# cql_alpha only when fixed (use_lagrange_cql_alpha False).
@interface.tunable('actor_learning_rate', 'critic_learning_rate', 'alpha_learning_rate',
                   'gamma', 'cql_alpha')
def create_cql_sac_agent(time_step_spec, action_spec, train_step: tf.Variable,
                         gamma: float = 0.99,
                         actor_fc_layer_params: Sequence[int] = (256, 256),
                         critic_joint_fc_layer_params: Sequence[int] = (256, 256, 256),
                         actor_learning_rate: float = 1e-4,
                         critic_learning_rate: float = 3e-4,
                         alpha_learning_rate: float = 3e-4,
                         cql_alpha: float = 5.0,
                         num_cql_samples: int = 10,
                         use_lagrange_cql_alpha: bool = False,
                         cql_alpha_learning_rate: float = 3e-4,
                         cql_tau: float = 10.0,
                         target_update_tau: float = 0.005,
                         reward_scale_factor: float = 1.0,
                         num_bc_steps: int = 0,
                         seed: Optional[int] = None,
                         target_entropy: Optional[float] = None) -> CqlSacAgent:
  """Returns an initialized CQL-SAC agent (tanh-squashed Gaussian actor, twin critics).

  Defaults follow the CQL authors' MuJoCo settings (a fixed alpha of 5, 10 samples
  per proposal, actor learning rate 1e-4, three 256-unit critic layers; tf-agents'
  kumar20 example uses the same networks).

  Args:
    time_step_spec, action_spec: the environment's specs (Box actions).
    train_step: the learner's step variable.
    gamma: the discount.
    actor_fc_layer_params, critic_joint_fc_layer_params: hidden layer sizes.
    actor_learning_rate, critic_learning_rate, alpha_learning_rate: Adam's rates (alpha:
      SAC's entropy temperature).
    cql_alpha: the conservative term's weight (its initial value with Lagrange).
    num_cql_samples: actions drawn from each proposal (uniform, the policy at s, the
      policy at s') per state.
    use_lagrange_cql_alpha: tune cql_alpha so the gap stays near `cql_tau` (CQL's
      Lagrangian form) instead of keeping it fixed.
    cql_alpha_learning_rate, cql_tau: the multiplier's Adam rate and budget.
    target_update_tau: soft target update rate, every train step.
    reward_scale_factor: multiplies rewards.
    num_bc_steps: train steps whose actor loss clones the dataset's actions (SAC's
      entropy term kept) before it maximizes Q (the CQL authors' policy_eval_start).
    seed: seeds the CQL action samples (None: unseeded).
    target_entropy: the policy entropy SAC's temperature is tuned towards; None: -dim(A)
      as the CQL authors' code and `create_sac_agent` (`sac.sac_target_entropy`).

  Returns:
    The agent.
  """
  actor, critic = sac.sac_networks(time_step_spec.observation, action_spec,
                                   actor_fc_layer_params, critic_joint_fc_layer_params)
  agent = CqlSacAgent(
      time_step_spec, action_spec, actor_network=actor, critic_network=critic,
      actor_optimizer=tf.keras.optimizers.Adam(actor_learning_rate),
      critic_optimizer=tf.keras.optimizers.Adam(critic_learning_rate),
      alpha_optimizer=tf.keras.optimizers.Adam(alpha_learning_rate),
      cql_alpha=cql_alpha, num_cql_samples=num_cql_samples,
      include_critic_entropy_term=False, use_lagrange_cql_alpha=use_lagrange_cql_alpha,
      cql_alpha_learning_rate=cql_alpha_learning_rate, cql_tau=cql_tau, random_seed=seed,
      target_update_tau=target_update_tau, target_update_period=1,
      td_errors_loss_fn=tf.math.squared_difference, gamma=gamma,
      reward_scale_factor=reward_scale_factor, num_bc_steps=num_bc_steps,
      target_entropy=sac.sac_target_entropy(action_spec, target_entropy),
      train_step_counter=train_step)
  agent.initialize()
  return agent

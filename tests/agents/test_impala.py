"""Tests for tfrl.agents.impala (IMPALA / CLEAR / APPO) against independent numpy math.

Every reference below recomputes the loss from the agent's network outputs with its own
float64 numpy V-trace recursion (rho = c = 0 at LAST steps, discounts = gamma *
discount * valid), so the agent's masking, reductions and weights are what is checked.

The unrolls are batch-major [B, T+1] Trajectories matching `agent.collect_data_spec`
for CartPole (observation float32 [4], action int64 in {0, 1}):
  row 0: FIRST MID MID MID MID MID MID      no boundary
  row 1: MID MID LAST FIRST MID MID MID     terminated: discount[1] = 0 (x_2 is terminal)
  row 2: MID MID MID MID LAST FIRST MID     truncated: discount stays 1 (time limit at x_4)
"""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from tfrl import learner as learner_lib
from tfrl.agents import impala
from tfrl.losses import vtrace
from tfrl.networks import actor_critic

import unrolls  # tests/agents/unrolls.py

FIRST, MID, LAST = int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST)
T = 6  # Unroll length; rows hold T + 1 steps.
GAMMA = 0.9
HIDDEN = (16,)

STEP_TYPES = [[FIRST, MID, MID, MID, MID, MID, MID],
              [MID, MID, LAST, FIRST, MID, MID, MID],
              [MID, MID, MID, MID, LAST, FIRST, MID]]
DISCOUNTS = [[1, 1, 1, 1, 1, 1, 1],
             [1, 0, 1, 1, 1, 1, 1],
             [1, 1, 1, 1, 1, 1, 1]]
TERM_ROW, TERM_LAST = 1, 2    # Row 1: step 2 is LAST, reached by termination.
TRUNC_ROW, TRUNC_LAST = 2, 4  # Row 2: step 4 is LAST, reached by truncation.


# -- Data -------------------------------------------------------------------------

def make_unrolls(step_type=STEP_TYPES, discount=DISCOUNTS, seed=0):
  """A numpy batch-major Trajectory [B, T+1] (see unrolls.make)."""
  return unrolls.make(step_type, discount, seed)


tensors = unrolls.tensors


def replace(traj, **fields):
  """A deep copy of `traj` with some numpy fields replaced (policy_info: a dict)."""
  copy = tf.nest.map_structure(np.copy, traj)
  return copy._replace(**fields)


def take_rows(traj, rows):
  return tf.nest.map_structure(lambda x: x[rows], traj)


# -- Agents -----------------------------------------------------------------------

def make_agent(specs, network=None, optimizer=None, train_step=None, **kwargs):
  """An ImpalaAgent over a small ActorCriticNetwork (or `network`, to share one)."""
  time_step_spec, action_spec = specs
  if network is None:
    network = actor_critic.ActorCriticNetwork(time_step_spec.observation, action_spec,
                                              HIDDEN)
  kwargs.setdefault('gamma', GAMMA)
  return impala.ImpalaAgent(
      time_step_spec, action_spec, network,
      optimizer or tf.keras.optimizers.SGD(0.1),
      train_step if train_step is not None else learner_lib.new_train_step(), **kwargs)


# -- Numpy references ---------------------------------------------------------------

log_softmax = unrolls.log_softmax
action_log_prob = unrolls.action_log_prob


def network_outputs(agent, traj):
  """The agent's current (logits [B, T+1, A], values [B, T+1]), float64."""
  (params, values), _ = agent._network(tf.constant(traj.observation))
  logits = params['logits']
  return logits.numpy().astype(np.float64), values.numpy().astype(np.float64)


def vtrace_reference(traj, logits, values, gamma=GAMMA, lambda_=1.0, rho_bar=1.0,
                     pg_rho_bar=1.0, weights=None, rewards=None, log_probs=None):
  """V-trace by its backward recursion in float64, batch-major [B, T].

  valid = (step_type != LAST) [* row weight > 0]; discounts = gamma * discount * (valid
  as a 0/1 mask); rho = c = 0 on invalid steps. `log_probs`: (target, behaviour)
  log-probabilities [B, T] of the taken actions, for a family other than categorical
  (then `logits` is unused).

  Returns:
    dict of vs, pg_advantages, valid (weighted), target log-probs and rhos.
  """
  mask = (traj.step_type[:, :-1] != LAST).astype(np.float64)
  valid = mask.copy()
  if weights is not None:
    valid *= np.asarray(weights, np.float64)[:, None]
    mask *= (np.asarray(weights)[:, None] > 0)
  rewards = traj.reward[:, :-1].astype(np.float64) if rewards is None else rewards
  discounts = gamma * traj.discount[:, :-1].astype(np.float64) * mask
  actions = traj.action[:, :-1]
  if log_probs is None:
    log_probs = (action_log_prob(logits[:, :-1], actions),
                 action_log_prob(traj.policy_info['logits'][:, :-1], actions))
  target_log_probs, behaviour_log_probs = log_probs
  rhos = np.where(mask > 0, np.exp(target_log_probs - behaviour_log_probs), 0.0)
  v, bootstrap = values[:, :-1], values[:, -1]
  rows, steps = v.shape
  vs = np.zeros_like(v)
  acc = np.zeros(rows)
  next_v = bootstrap
  for t in reversed(range(steps)):
    delta = np.minimum(rho_bar, rhos[:, t]) * (
        rewards[:, t] + discounts[:, t] * next_v - v[:, t])
    acc = delta + discounts[:, t] * lambda_ * np.minimum(1.0, rhos[:, t]) * acc
    vs[:, t] = v[:, t] + acc
    next_v = v[:, t]
  next_vs = np.concatenate([vs[:, 1:], bootstrap[:, None]], 1)
  pg_advantages = np.minimum(pg_rho_bar, rhos) * (rewards + discounts * next_vs - v)
  return {'vs': vs, 'pg_advantages': pg_advantages, 'valid': valid,
          'target_log_probs': target_log_probs, 'rhos': rhos}


def entropy(logits):
  log_probs = log_softmax(logits)
  return -(np.exp(log_probs) * log_probs).sum(-1)


def impala_loss_reference(agent, traj, baseline_cost=0.5, entropy_cost=0.01, **vtrace_kw):
  logits, values = network_outputs(agent, traj)
  ref = vtrace_reference(traj, logits, values, **vtrace_kw)
  valid = ref['valid']
  normalizer = max(valid.sum(), 1.0)
  policy = -(valid * ref['target_log_probs'] * ref['pg_advantages']).sum() / normalizer
  baseline = 0.5 * (valid * (ref['vs'] - values[:, :-1]) ** 2).sum() / normalizer
  entropy_loss = -(valid * entropy(logits[:, :-1])).sum() / normalizer
  total = policy + baseline_cost * baseline + entropy_cost * entropy_loss
  return {'policy_loss': policy, 'baseline_loss': baseline, 'entropy_loss': entropy_loss,
          'total': total}


def assert_loss_matches(loss_info, ref, rtol=1e-4, atol=1e-6):
  extra = loss_info.extra
  np.testing.assert_allclose(extra.policy_loss.numpy(), ref['policy_loss'], rtol, atol)
  np.testing.assert_allclose(extra.baseline_loss.numpy(), ref['baseline_loss'], rtol, atol)
  np.testing.assert_allclose(extra.entropy_loss.numpy(), ref['entropy_loss'], rtol, atol)
  np.testing.assert_allclose(loss_info.loss.numpy(), ref['total'], rtol, atol)


def loss_values(loss_info):
  """The total and every loss term (gradient_norm and fraction_dropped left out)."""
  extra = loss_info.extra
  return np.array([float(x) for x in (
      loss_info.loss, extra.policy_loss, extra.baseline_loss, extra.entropy_loss,
      extra.policy_cloning_loss, extra.value_cloning_loss)])


@pytest.fixture
def vtrace_spy(monkeypatch):
  """Records the VTraceReturns of every `vtrace.from_importance_weights` call."""
  calls = []
  original = vtrace.from_importance_weights

  def spy(*args, **kwargs):
    returns = original(*args, **kwargs)
    calls.append(returns)
    return returns

  monkeypatch.setattr(impala.vtrace, 'from_importance_weights', spy)
  return calls


# -- Loss values --------------------------------------------------------------------

def test_loss_info_fields_finite_and_collect_data_spec(specs):
  time_step_spec, action_spec = specs
  agent = impala.create_impala_agent(time_step_spec, action_spec,
                                     learner_lib.new_train_step(), fc_layer_params=HIDDEN)
  traj = make_unrolls()
  # The hand-made unrolls match the agent's spec with outer dims [B, T+1].
  tf.nest.assert_same_structure(agent.collect_data_spec, traj)
  for spec, value in zip(tf.nest.flatten(agent.collect_data_spec), tf.nest.flatten(traj)):
    assert tuple(value.shape[2:]) == tuple(spec.shape), spec
    assert value.dtype == spec.dtype.as_numpy_dtype, spec
  loss_info = agent.loss(tensors(traj))
  assert isinstance(loss_info.extra, impala.ImpalaLossInfo)
  assert loss_info.extra._fields == (
      'policy_loss', 'baseline_loss', 'entropy_loss', 'policy_cloning_loss',
      'value_cloning_loss', 'gradient_norm', 'fraction_dropped')
  assert np.all(np.isfinite([float(loss_info.loss)] + [float(x) for x in loss_info.extra]))


@pytest.mark.parametrize('config', [
    {},
    {'lambda_': 0.7, 'clip_rho_threshold': 2.0, 'clip_pg_rho_threshold': 1.5},
], ids=['default', 'lambda_and_rho_bars'])
def test_loss_matches_numpy_vtrace(specs, config):
  agent = make_agent(specs, baseline_cost=0.5, entropy_cost=0.01, **config)
  traj = make_unrolls()
  ref = impala_loss_reference(
      agent, traj, lambda_=config.get('lambda_', 1.0),
      rho_bar=config.get('clip_rho_threshold', 1.0),
      pg_rho_bar=config.get('clip_pg_rho_threshold', 1.0))
  loss_info = agent.loss(tensors(traj))
  assert_loss_matches(loss_info, ref)
  # The data really exercise the clipping: some rhos above 1, some below.
  logits, values = network_outputs(agent, traj)
  rhos = vtrace_reference(traj, logits, values)['rhos']
  assert (rhos > 1).any() and ((rhos < 1) & (rhos > 0)).any()
  assert float(loss_info.extra.policy_cloning_loss) == 0.0
  assert float(loss_info.extra.value_cloning_loss) == 0.0
  assert float(loss_info.extra.fraction_dropped) == 0.0


def test_vtrace_targets_equal_reference(specs, vtrace_spy):
  agent = make_agent(specs)
  traj = make_unrolls()
  agent.loss(tensors(traj))
  logits, values = network_outputs(agent, traj)
  ref = vtrace_reference(traj, logits, values)
  vs = vtrace_spy[-1].vs.numpy().T  # time-major -> [B, T]
  np.testing.assert_allclose(vs, ref['vs'], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(vtrace_spy[-1].pg_advantages.numpy().T, ref['pg_advantages'],
                             rtol=1e-4, atol=1e-5)
  # At boundary steps the target is V itself and the advantage 0.
  for row, step in ((TERM_ROW, TERM_LAST), (TRUNC_ROW, TRUNC_LAST)):
    np.testing.assert_allclose(vs[row, step], values[row, step], rtol=1e-5, atol=1e-6)
    assert ref['pg_advantages'][row, step] == 0.0


def test_row_weights_mask_rows(specs):
  agent = make_agent(specs)
  traj = make_unrolls()
  masked = agent.loss(tensors(traj), weights=tf.constant([1.0, 0.0, 1.0]))
  without = agent.loss(tensors(take_rows(traj, [0, 2])))
  np.testing.assert_allclose(loss_values(masked), loss_values(without), rtol=1e-5,
                             atol=1e-7)


def test_row_weights_weight_the_loss_not_the_returns(specs):
  """Fractional row weights scale each row's share of the loss; they are no discount."""
  agent = make_agent(specs)
  traj = make_unrolls()
  weights = np.array([0.5, 1.0, 0.25], np.float32)
  ref = impala_loss_reference(agent, traj, weights=weights)
  assert_loss_matches(agent.loss(tensors(traj), weights=tf.constant(weights)), ref)
  # Uniform weights leave the (weight-normalized) loss unchanged.
  np.testing.assert_allclose(
      loss_values(agent.loss(tensors(traj), weights=tf.constant([0.3, 0.3, 0.3]))),
      loss_values(agent.loss(tensors(traj))), rtol=1e-5, atol=1e-7)


# -- Boundaries ---------------------------------------------------------------------

def test_boundary_step_transition_is_ignored(specs):
  """Reward, action and behaviour logits of LAST steps (LAST -> FIRST) are no data."""
  agent = make_agent(specs)
  traj = make_unrolls()
  base = loss_values(agent.loss(tensors(traj)))
  reward, action = traj.reward.copy(), traj.action.copy()
  logits = traj.policy_info['logits'].copy()
  for row, step in ((TERM_ROW, TERM_LAST), (TRUNC_ROW, TRUNC_LAST)):
    reward[row, step] += 100.0
    action[row, step] = 1 - action[row, step]
    logits[row, step] = [5.0, -5.0]
  changed = replace(traj, reward=reward, action=action,
                    policy_info={'logits': logits, 'value': traj.policy_info['value']})
  np.testing.assert_array_equal(loss_values(agent.loss(tensors(changed))), base)
  # The same change on an ordinary step does change the loss.
  reward = traj.reward.copy()
  reward[0, 3] += 100.0
  assert abs(agent.loss(tensors(replace(traj, reward=reward))).loss.numpy() -
             base[0]) > 1e-3


def test_terminal_observation_is_ignored_but_truncated_one_bootstraps(specs):
  agent = make_agent(specs)
  traj = make_unrolls()
  base = loss_values(agent.loss(tensors(traj)))
  # Terminated (discount 0 before the LAST step): V(x_LAST) enters nothing.
  observation = traj.observation.copy()
  observation[TERM_ROW, TERM_LAST] += 3.0
  np.testing.assert_array_equal(
      loss_values(agent.loss(tensors(replace(traj, observation=observation)))), base)
  # Truncated: V(x_LAST) bootstraps the step before, so the loss changes.
  observation = traj.observation.copy()
  observation[TRUNC_ROW, TRUNC_LAST] += 3.0
  changed = replace(traj, observation=observation)
  loss_info = agent.loss(tensors(changed))
  assert abs(loss_info.loss.numpy() - base[0]) > 1e-4
  assert_loss_matches(loss_info, impala_loss_reference(agent, changed))


def test_episode_end_stops_vtrace_targets(specs, vtrace_spy):
  """Perturbing observations after an episode end leaves earlier targets unchanged."""
  agent = make_agent(specs)
  traj = make_unrolls()

  def targets(data):
    agent.loss(tensors(data))
    returns = vtrace_spy[-1]
    logits, values = network_outputs(agent, data)
    ref = vtrace_reference(data, logits, values)
    np.testing.assert_allclose(returns.vs.numpy().T, ref['vs'], rtol=1e-4, atol=1e-5)
    return returns.vs.numpy().T, returns.pg_advantages.numpy().T

  vs, adv = targets(traj)

  def perturbed(row, from_step):
    observation = traj.observation.copy()
    observation[row, from_step:] += 2.0
    return targets(replace(traj, observation=observation))

  # Terminated at step 1 (discount 0): observations from the LAST step on do not reach
  # steps 0 and 1; later targets do change.
  new_vs, new_adv = perturbed(TERM_ROW, TERM_LAST)
  np.testing.assert_array_equal(new_vs[TERM_ROW, :TERM_LAST], vs[TERM_ROW, :TERM_LAST])
  np.testing.assert_array_equal(new_adv[TERM_ROW, :TERM_LAST], adv[TERM_ROW, :TERM_LAST])
  assert np.abs(new_vs[TERM_ROW, TERM_LAST + 1:] - vs[TERM_ROW, TERM_LAST + 1:]).max() > 1e-3
  # Truncated at step 4: the next episode (from step 5) does not reach steps 0..4 ...
  new_vs, new_adv = perturbed(TRUNC_ROW, TRUNC_LAST + 1)
  np.testing.assert_array_equal(new_vs[TRUNC_ROW, :TRUNC_LAST + 1],
                                vs[TRUNC_ROW, :TRUNC_LAST + 1])
  np.testing.assert_array_equal(new_adv[TRUNC_ROW, :TRUNC_LAST + 1],
                                adv[TRUNC_ROW, :TRUNC_LAST + 1])
  # ... but the truncated episode's own last observation bootstraps it.
  new_vs, _ = perturbed(TRUNC_ROW, TRUNC_LAST)
  assert np.abs(new_vs[TRUNC_ROW, :TRUNC_LAST] - vs[TRUNC_ROW, :TRUNC_LAST]).min() > 1e-5
  # Without an episode end, the later observations reach the first step's target.
  new_vs, _ = perturbed(0, T - 1)
  assert abs(new_vs[0, 0] - vs[0, 0]) > 1e-5


def test_unknown_modes_raise(specs):
  with pytest.raises(ValueError, match='reward_clipping'):
    make_agent(specs, reward_clipping='sign')
  with pytest.raises(ValueError, match='policy_loss'):
    make_agent(specs, policy_loss='a2c')


def test_agent_clips_rewards(specs):
  agent = make_agent(specs, reward_clipping='abs_one')
  plain = make_agent(specs, network=agent._network)
  traj = make_unrolls()
  large = replace(traj, reward=traj.reward * 10.0)
  clipped = replace(traj, reward=np.clip(traj.reward * 10.0, -1.0, 1.0))
  np.testing.assert_allclose(loss_values(agent.loss(tensors(large))),
                             loss_values(plain.loss(tensors(clipped))), rtol=1e-6)
  assert abs(plain.loss(tensors(large)).loss.numpy() -
             agent.loss(tensors(large)).loss.numpy()) > 1e-3


# -- APPO ---------------------------------------------------------------------------

def appo_unrolls():
  return make_unrolls(step_type=[[FIRST] + [MID] * T, [MID] * (T + 1)],
                      discount=np.ones((2, T + 1)), seed=3)


def test_appo_policy_loss_matches_numpy(specs):
  agent = make_agent(specs, policy_loss='ppo', ppo_clip_ratio=0.2)
  traj = make_unrolls()
  logits, values = network_outputs(agent, traj)
  ref = vtrace_reference(traj, logits, values)
  behaviour = action_log_prob(traj.policy_info['logits'][:, :-1], traj.action[:, :-1])
  ratio = np.exp(ref['target_log_probs'] - behaviour)
  adv = ref['pg_advantages']
  surrogate = np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv)
  expected = -(ref['valid'] * surrogate).sum() / ref['valid'].sum()
  np.testing.assert_allclose(agent.loss(tensors(traj)).extra.policy_loss.numpy(), expected,
                             rtol=1e-4, atol=1e-6)


def test_positive_advantages_only_keeps_policy_gradient_of_positive_steps(specs):
  """The policy loss sums over steps with A > 0 only, still normalized by all valid steps;
  the baseline and entropy terms are unchanged."""
  agent = make_agent(specs, positive_advantages_only=True)
  plain = make_agent(specs, network=agent._network)
  traj = make_unrolls()
  logits, values = network_outputs(agent, traj)
  ref = vtrace_reference(traj, logits, values)
  adv, valid = ref['pg_advantages'], ref['valid']
  positive = valid * (adv > 0)
  assert 0 < positive.sum() < valid.sum()  # the data have steps of both signs
  expected = -(positive * ref['target_log_probs'] * adv).sum() / valid.sum()
  loss_info = agent.loss(tensors(traj))
  np.testing.assert_allclose(loss_info.extra.policy_loss.numpy(), expected, rtol=1e-4,
                             atol=1e-6)
  plain_info = plain.loss(tensors(traj))
  assert abs(float(plain_info.extra.policy_loss) - expected) > 1e-4
  np.testing.assert_allclose(loss_values(loss_info)[2:], loss_values(plain_info)[2:],
                             rtol=1e-6)


def test_appo_drops_stale_rows(specs):
  train_step = learner_lib.new_train_step()
  train_step.assign(10)
  agent = make_agent(specs, train_step=train_step, policy_loss='ppo', max_policy_lag=2)
  traj = appo_unrolls()
  versions = tf.constant(np.array([[10] * (T + 1), [5] * (T + 1)], np.int64))  # lags 0, 5
  loss_info = agent.loss(tensors(traj), policy_version=versions)
  np.testing.assert_allclose(loss_info.extra.fraction_dropped.numpy(), 0.5)
  row0 = agent.loss(tensors(take_rows(traj, [0])), policy_version=versions[:1])
  assert float(row0.extra.fraction_dropped) == 0.0
  np.testing.assert_allclose(loss_values(loss_info), loss_values(row0), rtol=1e-5,
                             atol=1e-7)
  # A lag equal to max_policy_lag is still fresh.
  edge = tf.constant(np.array([[8] * (T + 1), [7] * (T + 1)], np.int64))  # lags 2, 3
  np.testing.assert_allclose(
      agent.loss(tensors(traj), policy_version=edge).extra.fraction_dropped.numpy(), 0.5)
  np.testing.assert_allclose(
      loss_values(agent.loss(tensors(traj), policy_version=edge)), loss_values(row0),
      rtol=1e-5, atol=1e-7)
  # Without max_policy_lag the agent takes no versions, so nothing is dropped: its
  # loss is the plain one over both rows.
  keep_all = make_agent(specs, network=agent._network, train_step=train_step,
                        policy_loss='ppo', max_policy_lag=None)
  assert 'policy_version' in agent.train_inputs
  assert 'policy_version' not in keep_all.train_inputs
  kept = keep_all.loss(tensors(traj))
  assert float(kept.extra.fraction_dropped) == 0.0
  assert abs(kept.loss.numpy() - loss_info.loss.numpy()) > 1e-5


# -- Epochs of minibatches (Sample Factory's APPO scheme) -----------------------------

def four_unrolls():
  """STEP_TYPES' three rows (no boundary, terminated, truncated) and one more MID row."""
  return make_unrolls(step_type=STEP_TYPES + [[MID] * (T + 1)],
                      discount=DISCOUNTS + [[1] * (T + 1)], seed=5)


def test_epochs_of_minibatches_are_steps_on_their_rows_in_turn(specs):
  """num_epochs=2, num_minibatches=2: four gradient steps, each the whole IMPALA/APPO
  loss (V-trace recomputed by the network of that moment) on 2 of the 4 unrolls, every
  epoch a partition of the rows; the same as one-step agents trained on those rows in
  that order."""
  kwargs = dict(policy_loss='ppo', max_policy_lag=None, gradient_clipping=None)
  agent = make_agent(specs, num_epochs=2, num_minibatches=2, **kwargs)
  reference = make_agent(specs, **kwargs)
  traj = four_unrolls()
  for model in (agent, reference):
    model.loss(tensors(traj))  # builds the variables
  reference._network.set_weights(agent._network.get_weights())
  minibatches_seen = []
  loss = agent._loss

  def spy(experience, **kwargs):
    first = experience.observation.numpy()[:, 0, 0]  # distinct per row
    minibatches_seen.append(
        [int(np.flatnonzero(traj.observation[:, 0, 0] == x)[0]) for x in first])
    return loss(experience, **kwargs)

  agent._loss = spy
  iterations = int(agent._optimizer.iterations.numpy())
  loss_info = agent.train(tensors(traj))
  assert int(agent._optimizer.iterations.numpy()) - iterations == 4
  assert int(agent.train_step_counter.numpy()) == 1
  assert len(minibatches_seen) == 4
  for epoch in range(2):
    first, second = minibatches_seen[2 * epoch:2 * epoch + 2]
    assert len(first) == len(second) == 2 and sorted(first + second) == [0, 1, 2, 3]
  for rows in minibatches_seen:
    last = reference.train(tensors(take_rows(traj, rows)))
  for ours, theirs in zip(agent._network.get_weights(), reference._network.get_weights()):
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
  # The loss info is the last step's.
  np.testing.assert_allclose(loss_info.loss.numpy(), last.loss.numpy(), rtol=1e-5)
  np.testing.assert_allclose(loss_info.extra.gradient_norm.numpy(),
                             last.extra.gradient_norm.numpy(), rtol=1e-5)


def test_epochs_of_minibatches_in_a_graph_under_a_lag(specs):
  """In a tf.function (as the Learner runs it), with a maximum lag: epochs x
  minibatches optimizer steps, one train step, finite loss info."""
  agent = make_agent(specs, num_epochs=3, num_minibatches=2, policy_loss='ppo',
                     max_policy_lag=2)
  traj = tensors(four_unrolls())
  version = tf.zeros(traj.step_type.shape, tf.int64)
  train = tf.function(agent.train)
  for calls in (1, 2):
    loss_info = train(traj, policy_version=version)
    assert int(agent._optimizer.iterations.numpy()) == 6 * calls
    assert int(agent.train_step_counter.numpy()) == calls
  assert np.all(np.isfinite([float(x) for x in tf.nest.flatten(loss_info)]))


def test_num_minibatches_must_divide_the_unrolls(specs):
  with pytest.raises(ValueError, match='num_epochs and num_minibatches must be at least 1'):
    make_agent(specs, num_epochs=0)
  agent = make_agent(specs, num_minibatches=3)
  with pytest.raises(ValueError,
                     match=r'ImpalaAgent: num_minibatches=3 must divide .*unrolls.*got 4'):
    agent.train(tensors(four_unrolls()))


# -- CLEAR --------------------------------------------------------------------------

def test_clear_cloning_losses(specs):
  agent = make_agent(specs, policy_cloning_cost=0.3, value_cloning_cost=0.2)
  traj = make_unrolls()
  logits, values = network_outputs(agent, traj)
  mask = tf.constant([1.0, 0.0, 1.0])

  # No replayed rows: no cloning loss, whatever the stored logits and values.
  none = agent.loss(tensors(traj), replay_mask=tf.zeros([3]))
  assert float(none.extra.policy_cloning_loss) == 0.0
  assert float(none.extra.value_cloning_loss) == 0.0
  np.testing.assert_allclose(none.loss.numpy(), agent.loss(tensors(traj)).loss.numpy(),
                             rtol=1e-6)

  # Stored logits and values equal to the current ones: nothing to clone.
  current = replace(traj, policy_info={'logits': logits.astype(np.float32),
                                       'value': values.astype(np.float32)})
  same = agent.loss(tensors(current), replay_mask=tf.ones([3]))
  np.testing.assert_allclose(same.extra.policy_cloning_loss.numpy(), 0.0, atol=1e-6)
  np.testing.assert_allclose(same.extra.value_cloning_loss.numpy(), 0.0, atol=1e-6)

  # Different stored logits/values: KL(mu || pi) and squared value error summed over
  # the valid steps of replayed rows and, like the V-trace terms, divided by the count
  # of all valid steps (as CLEAR's learner normalizes every term alike).
  info = agent.loss(tensors(traj), replay_mask=mask)
  mu = log_softmax(traj.policy_info['logits'][:, :-1])
  pi = log_softmax(logits[:, :-1])
  kl = (np.exp(mu) * (mu - pi)).sum(-1)
  value_error = (values[:, :-1] - traj.policy_info['value'][:, :-1]) ** 2
  valid = (traj.step_type[:, :-1] != LAST).astype(np.float64)
  replayed = valid * np.array([1.0, 0.0, 1.0])[:, None]
  assert replayed.sum() < valid.sum()  # the two normalizers differ
  expected_kl = (replayed * kl).sum() / valid.sum()
  expected_value = (replayed * value_error).sum() / valid.sum()
  np.testing.assert_allclose(info.extra.policy_cloning_loss.numpy(), expected_kl,
                             rtol=1e-4)
  np.testing.assert_allclose(info.extra.value_cloning_loss.numpy(), expected_value,
                             rtol=1e-4)
  ref = impala_loss_reference(agent, traj)
  np.testing.assert_allclose(
      info.loss.numpy(), ref['total'] + 0.3 * expected_kl + 0.2 * expected_value,
      rtol=1e-4)


def test_clear_cloning_scales_with_the_replayed_share(specs):
  """Per replayed step, cloning weighs the same against the V-trace terms: replaying
  one row of three gives a third of the cloning loss of replaying all three rows when
  the rows are identical (the count is all valid steps, not the replayed ones)."""
  agent = make_agent(specs, policy_cloning_cost=0.3, value_cloning_cost=0.2)
  row = take_rows(make_unrolls(), [0])  # No boundary: every step is valid.
  traj = tf.nest.map_structure(lambda x: np.concatenate([x] * 3), row)
  one = agent.loss(tensors(traj), replay_mask=tf.constant([1.0, 0.0, 0.0]))
  every = agent.loss(tensors(traj), replay_mask=tf.ones([3]))
  for name in ('policy_cloning_loss', 'value_cloning_loss'):
    value = float(getattr(every.extra, name))
    assert value > 1e-3, name
    np.testing.assert_allclose(float(getattr(one.extra, name)), value / 3, rtol=1e-5,
                               err_msg=name)
  # The V-trace terms do not depend on which rows are replayed.
  np.testing.assert_allclose(loss_values(one)[1:4], loss_values(every)[1:4], rtol=1e-6)


# -- Training -----------------------------------------------------------------------

def gradients_of_loss(agent, traj, **kwargs):
  variables = agent._network.trainable_variables
  with tf.GradientTape() as tape:
    loss = agent.loss(tensors(traj), **kwargs).loss
  return [g.numpy() for g in tape.gradient(loss, variables)]


def test_train_applies_the_loss_gradient(specs):
  learning_rate = 0.1
  agent = make_agent(specs, optimizer=tf.keras.optimizers.SGD(learning_rate),
                     gradient_clipping=None)
  traj = make_unrolls()
  expected_loss = agent.loss(tensors(traj)).loss.numpy()
  gradients = gradients_of_loss(agent, traj)
  before = [v.numpy() for v in agent._network.trainable_variables]
  loss_info = agent.train(tensors(traj))
  assert int(agent.train_step_counter.numpy()) == 1
  np.testing.assert_allclose(loss_info.loss.numpy(), expected_loss, rtol=1e-6)
  norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in gradients))
  assert np.isfinite(loss_info.extra.gradient_norm.numpy())
  np.testing.assert_allclose(loss_info.extra.gradient_norm.numpy(), norm, rtol=1e-4)
  for old, new, gradient in zip(before, agent._network.trainable_variables, gradients):
    np.testing.assert_allclose(new.numpy() - old, -learning_rate * gradient, rtol=1e-3,
                               atol=1e-7)


def test_train_clips_the_gradient_norm(specs):
  learning_rate, clip = 0.1, 1e-3
  agent = make_agent(specs, optimizer=tf.keras.optimizers.SGD(learning_rate),
                     gradient_clipping=clip)
  traj = make_unrolls()
  gradients = gradients_of_loss(agent, traj)
  norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in gradients))
  assert norm > 100 * clip
  before = [v.numpy() for v in agent._network.trainable_variables]
  loss_info = agent.train(tensors(traj))
  # The reported norm is the unclipped one; the step is lr * clip along the gradient.
  np.testing.assert_allclose(loss_info.extra.gradient_norm.numpy(), norm, rtol=1e-4)
  change = [new.numpy() - old for old, new in zip(before, agent._network.trainable_variables)]
  change_norm = np.sqrt(sum((c.astype(np.float64) ** 2).sum() for c in change))
  np.testing.assert_allclose(change_norm, learning_rate * clip, rtol=1e-2)
  for c, gradient in zip(change, gradients):
    # float32 rounding of `variable + tiny step` limits the agreement to ~1e-8.
    np.testing.assert_allclose(c, -learning_rate * clip / norm * gradient, rtol=1e-2,
                               atol=1e-7)


def test_create_impala_agent_trains(specs):
  time_step_spec, action_spec = specs
  train_step = learner_lib.new_train_step()
  agent = impala.create_impala_agent(time_step_spec, action_spec, train_step,
                                     fc_layer_params=HIDDEN, policy_cloning_cost=0.1,
                                     value_cloning_cost=0.1)
  traj = make_unrolls()
  before = [v.numpy() for v in agent._network.trainable_variables]
  loss_info = agent.train(tensors(traj), replay_mask=tf.constant([0.0, 1.0, 1.0]))
  assert int(train_step.numpy()) == 1
  assert np.all(np.isfinite(loss_values(loss_info)))
  assert np.isfinite(loss_info.extra.gradient_norm.numpy())
  assert float(loss_info.extra.gradient_norm) > 0
  assert all(np.abs(new.numpy() - old).max() > 0
             for old, new in zip(before, agent._network.trainable_variables))
  assert int(agent._optimizer.iterations.numpy()) == 1


def test_trains_under_learner(specs, tmp_path):
  time_step_spec, action_spec = specs
  train_step = learner_lib.new_train_step()
  agent = impala.create_impala_agent(time_step_spec, action_spec, train_step,
                                     fc_layer_params=HIDDEN, policy_cloning_cost=0.1,
                                     value_cloning_cost=0.1)
  traj = tensors(make_unrolls())
  mask = tf.constant([0.0, 1.0, 0.0])
  before = [v.numpy() for v in agent._network.trainable_variables]
  learner = learner_lib.Learner(
      str(tmp_path), train_step, agent,
      experience_dataset_fn=lambda: tf.data.Dataset.from_tensors(
          {'experience': traj, 'replay_mask': mask}).map(lambda x: (x, ())).repeat(),
      use_kwargs_in_agent_train=True, checkpoint_interval=0, summary_interval=0)
  loss_info = learner.run(iterations=3)
  assert learner.train_step_numpy == 3
  assert np.all(np.isfinite(loss_values(loss_info)))
  assert int(agent._optimizer.iterations.numpy()) == 3
  assert any(np.abs(new.numpy() - old).max() > 0
             for old, new in zip(before, agent._network.trainable_variables))

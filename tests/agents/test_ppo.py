"""Tests for tfrl.agents.ppo.PpoAgent against independent numpy GAE and PPO losses.

Unrolls are batch-major [B, T+1] Trajectories matching `agent.collect_data_spec` for
CartPole; the behaviour logits and values in policy_info are PPO's old log-probs and
old values. Rows (B = 4):
  row 0: FIRST MID MID MID MID MID MID      no boundary
  row 1: MID MID LAST FIRST MID MID MID     terminated: discount[1] = 0
  row 2: MID MID MID MID LAST FIRST MID     truncated: discount stays 1
  row 3: MID MID MID MID MID MID MID        no boundary
"""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from tfrl import learner as learner_lib
from tfrl.agents import impala
from tfrl.agents import ppo
from tfrl.networks import actor_critic

import unrolls  # tests/agents/unrolls.py

FIRST, MID, LAST = int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST)
T = 6
GAMMA, LAMBDA = 0.9, 0.8
HIDDEN = (16,)

STEP_TYPES = [[FIRST, MID, MID, MID, MID, MID, MID],
              [MID, MID, LAST, FIRST, MID, MID, MID],
              [MID, MID, MID, MID, LAST, FIRST, MID],
              [MID, MID, MID, MID, MID, MID, MID]]
DISCOUNTS = [[1, 1, 1, 1, 1, 1, 1],
             [1, 0, 1, 1, 1, 1, 1],
             [1, 1, 1, 1, 1, 1, 1],
             [1, 1, 1, 1, 1, 1, 1]]
TERM_ROW, TERM_LAST = 1, 2
TRUNC_ROW, TRUNC_LAST = 2, 4


def make_unrolls(seed=0):
  return unrolls.make(STEP_TYPES, DISCOUNTS, seed)


tensors = unrolls.tensors


def replace(traj, **fields):
  return tf.nest.map_structure(np.copy, traj)._replace(**fields)


def make_agent(specs, optimizer=None, **kwargs):
  time_step_spec, action_spec = specs
  network = actor_critic.ActorCriticNetwork(time_step_spec.observation, action_spec, HIDDEN)
  kwargs.setdefault('gamma', GAMMA)
  kwargs.setdefault('lambda_', LAMBDA)
  return ppo.PpoAgent(time_step_spec, action_spec, network,
                      optimizer or tf.keras.optimizers.SGD(0.1),
                      learner_lib.new_train_step(), **kwargs)


# -- Numpy references ---------------------------------------------------------------

log_softmax = unrolls.log_softmax
action_log_prob = unrolls.action_log_prob


def gae_reference(traj, gamma=GAMMA, lambda_=LAMBDA):
  """GAE on the stored values, batch-major [B, T]: at LAST steps delta = 0 and the
  discount is 0; V(x_LAST) still bootstraps the step before (truncation)."""
  valid = (traj.step_type[:, :-1] != LAST).astype(np.float64)
  values = traj.policy_info['value'].astype(np.float64)
  rewards = traj.reward[:, :-1].astype(np.float64)
  discounts = gamma * traj.discount[:, :-1] * valid
  advantages = np.zeros_like(rewards)
  acc = np.zeros(rewards.shape[0])
  for t in reversed(range(rewards.shape[1])):
    delta = valid[:, t] * (rewards[:, t] + discounts[:, t] * values[:, t + 1] - values[:, t])
    acc = delta + lambda_ * discounts[:, t] * acc
    advantages[:, t] = acc
  return advantages, advantages + values[:, :-1], valid


def ppo_loss_reference(agent, traj, clip_ratio=0.2, value_clip=None, value_cost=0.5,
                       entropy_cost=0.0, normalize_advantages=True):
  advantages, targets, valid = gae_reference(traj)
  (params, values), _ = agent._network(tf.constant(traj.observation[:, :-1]))
  logits = params['logits']
  logits, values = logits.numpy().astype(np.float64), values.numpy().astype(np.float64)
  normalizer = valid.sum()
  if normalize_advantages:
    mean = (valid * advantages).sum() / normalizer
    std = np.sqrt((valid * (advantages - mean) ** 2).sum() / normalizer)
    advantages = (advantages - mean) / (std + 1e-8)
  actions = traj.action[:, :-1]
  log_ratio = (action_log_prob(logits, actions) -
               action_log_prob(traj.policy_info['logits'][:, :-1], actions))
  ratio = np.exp(log_ratio)
  surrogate = np.minimum(ratio * advantages,
                         np.clip(ratio, 1 - clip_ratio, 1 + clip_ratio) * advantages)
  policy_loss = -(valid * surrogate).sum() / normalizer
  old_values = traj.policy_info['value'][:, :-1].astype(np.float64)
  error = (values - targets) ** 2
  if value_clip is not None:
    clipped = old_values + np.clip(values - old_values, -value_clip, value_clip)
    error = np.maximum(error, (clipped - targets) ** 2)
  value_loss = 0.5 * (valid * error).sum() / normalizer
  log_probs = log_softmax(logits)
  entropy = (valid * -(np.exp(log_probs) * log_probs).sum(-1)).sum() / normalizer
  return {'policy_loss': policy_loss, 'value_loss': value_loss, 'entropy': entropy,
          'total': policy_loss + value_cost * value_loss - entropy_cost * entropy,
          'approx_kl': (valid * ((ratio - 1) - log_ratio)).sum() / normalizer,
          'clip_fraction': (valid * (np.abs(ratio - 1) > clip_ratio)).sum() / normalizer,
          'ratio': ratio, 'valid': valid, 'advantages': advantages}


# -- GAE preparation ----------------------------------------------------------------

def test_prepare_matches_numpy_gae(specs):
  agent = make_agent(specs)
  traj = make_unrolls()
  data = agent._prepare(tensors(traj))
  advantages, targets, valid = gae_reference(traj)
  np.testing.assert_allclose(data['advantage'].numpy().T, advantages, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(data['value_target'].numpy().T, targets, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(data['value_target'].numpy() - data['advantage'].numpy(),
                             traj.policy_info['value'][:, :-1].T, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(data['valid'].numpy().T, valid)
  np.testing.assert_allclose(
      data['old_log_prob'].numpy().T,
      action_log_prob(traj.policy_info['logits'][:, :-1], traj.action[:, :-1]), rtol=1e-5)
  np.testing.assert_array_equal(data['old_value'].numpy().T,
                                traj.policy_info['value'][:, :-1])
  np.testing.assert_array_equal(data['observation'].numpy(),
                                traj.observation[:, :-1].transpose(1, 0, 2))
  # Boundary steps have advantage 0.
  assert advantages[TERM_ROW, TERM_LAST] == 0 and advantages[TRUNC_ROW, TRUNC_LAST] == 0


def test_reward_clipping_clips_before_gae(specs):
  """'abs_one' gives the advantages of the rewards clipped to [-1, 1] (after the scale)."""
  traj = make_unrolls()
  large = replace(traj, reward=traj.reward * 7.0)
  clipped = make_agent(specs, reward_clipping='abs_one', reward_scale=0.5)._prepare(
      tensors(large))
  expected = make_agent(specs)._prepare(tensors(replace(
      traj, reward=np.clip(large.reward * 0.5, -1.0, 1.0))))
  np.testing.assert_allclose(clipped['advantage'].numpy(), expected['advantage'].numpy(),
                             rtol=1e-5, atol=1e-6)
  assert np.abs(large.reward * 0.5).max() > 1.0  # the clipping had work to do


def test_prepare_boundary_rule(specs):
  agent = make_agent(specs)
  traj = make_unrolls()
  base = agent._prepare(tensors(traj))['advantage'].numpy().T

  def advantages_with(**changes):
    return agent._prepare(tensors(replace(traj, **changes)))['advantage'].numpy().T

  # The reward of a LAST step (its LAST -> FIRST "transition") changes nothing.
  reward = traj.reward.copy()
  reward[TERM_ROW, TERM_LAST] += 50.0
  reward[TRUNC_ROW, TRUNC_LAST] += 50.0
  np.testing.assert_array_equal(advantages_with(reward=reward), base)

  def with_value(row, step, delta):
    value = traj.policy_info['value'].copy()
    value[row, step] += delta
    return advantages_with(policy_info={'logits': traj.policy_info['logits'],
                                        'value': value})

  # Terminated: the LAST step's stored value bootstraps nothing.
  np.testing.assert_array_equal(with_value(TERM_ROW, TERM_LAST, 5.0), base)
  # Truncated: it bootstraps the step before (and, through GAE, the earlier ones) ...
  changed = with_value(TRUNC_ROW, TRUNC_LAST, 5.0)
  np.testing.assert_allclose(changed[TRUNC_ROW, TRUNC_LAST - 1] - base[TRUNC_ROW, TRUNC_LAST - 1],
                             GAMMA * 5.0, rtol=1e-5)
  np.testing.assert_allclose(changed[TRUNC_ROW, 0] - base[TRUNC_ROW, 0],
                             GAMMA * 5.0 * (GAMMA * LAMBDA) ** (TRUNC_LAST - 1), rtol=1e-4)
  # ... but nothing from the next episode crosses the boundary.
  changed = with_value(TRUNC_ROW, TRUNC_LAST + 1, 5.0)
  np.testing.assert_array_equal(changed[TRUNC_ROW, :TRUNC_LAST + 1],
                                base[TRUNC_ROW, :TRUNC_LAST + 1])
  assert np.abs(changed[TRUNC_ROW, TRUNC_LAST + 1:] -
                base[TRUNC_ROW, TRUNC_LAST + 1:]).max() > 1.0


# -- Loss ---------------------------------------------------------------------------

@pytest.mark.parametrize('config', [
    {'value_clip': 0.2},
    {'normalize_advantages': False, 'value_clip': None, 'entropy_cost': 0.01,
     'clip_ratio': 0.1},
], ids=['value_clip', 'no_normalization_no_value_clip'])
def test_loss_matches_numpy(specs, config):
  agent = make_agent(specs, **config)
  traj = make_unrolls()
  ref = ppo_loss_reference(agent, traj, **config)
  # Random behaviour logits: some ratios are outside the clip range, some inside.
  clip_ratio = config.get('clip_ratio', 0.2)
  outside = np.abs(ref['ratio'] - 1) > clip_ratio
  assert outside[ref['valid'] > 0].any() and (~outside)[ref['valid'] > 0].any()
  loss_info = agent.loss(tensors(traj))
  extra = loss_info.extra
  for name in ('policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction'):
    np.testing.assert_allclose(getattr(extra, name).numpy(), ref[name], rtol=1e-4,
                               atol=1e-6, err_msg=name)
  np.testing.assert_allclose(loss_info.loss.numpy(), ref['total'], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('sign', [1.0, -1.0], ids=['positive', 'negative'])
def test_clipped_surrogate_has_no_gradient_beyond_the_clip(specs, sign):
  """Positive advantages with ratio > 1 + eps (negative: ratio < 1 - eps) are clipped:
  the policy loss is -mean(clip(ratio) * A) and its gradient is zero."""
  agent = make_agent(specs, normalize_advantages=False)
  traj = make_unrolls()
  # Stored values 0 and rewards of one sign: every valid advantage has that sign.
  rewards = sign * (1.0 + np.abs(traj.reward))
  (current, _), _ = agent._network(tf.constant(traj.observation))
  current = current['logits'].numpy()
  # Behaviour logits: the taken action unlikely (ratio >> 1) or likely (ratio << 1).
  taken = np.eye(2, dtype=np.float32)[traj.action]
  far = np.where(taken > 0, -3.0 * sign, 3.0 * sign).astype(np.float32)
  zero_values = np.zeros_like(traj.policy_info['value'])
  clipped = replace(traj, reward=rewards.astype(np.float32),
                    policy_info={'logits': far, 'value': zero_values})
  ref = ppo_loss_reference(agent, clipped, normalize_advantages=False)
  valid = ref['valid'] > 0
  assert np.all(sign * ref['advantages'][valid] > 0)
  if sign > 0:
    assert np.all(ref['ratio'][valid] > 1.2)
  else:
    assert np.all(ref['ratio'][valid] < 0.8)
  variables = agent._network.trainable_variables
  with tf.GradientTape() as tape:
    policy_loss = agent.loss(tensors(clipped)).extra.policy_loss
  expected = -(ref['valid'] * (1 + sign * 0.2) * ref['advantages']).sum() / valid.sum()
  np.testing.assert_allclose(policy_loss.numpy(), expected, rtol=1e-5)
  for gradient in tape.gradient(policy_loss, variables):
    assert gradient is None or not np.any(gradient.numpy())
  # Control: behaviour = current policy (ratio 1), the same advantages have a gradient.
  on_policy = replace(clipped, policy_info={'logits': current, 'value': zero_values})
  with tf.GradientTape() as tape:
    policy_loss = agent.loss(tensors(on_policy)).extra.policy_loss
  np.testing.assert_allclose(policy_loss.numpy(),
                             -(ref['valid'] * ref['advantages']).sum() / valid.sum(),
                             rtol=1e-5)
  norm = tf.linalg.global_norm(
      [g for g in tape.gradient(policy_loss, variables) if g is not None])
  assert float(norm) > 1e-3


# -- Training -----------------------------------------------------------------------

def test_train_applies_epochs_times_minibatches_steps(specs):
  time_step_spec, action_spec = specs
  train_step = learner_lib.new_train_step()
  agent = ppo.create_ppo_agent(time_step_spec, action_spec, train_step,
                               fc_layer_params=HIDDEN, num_epochs=3, num_minibatches=2)
  traj = make_unrolls()
  before = [v.numpy() for v in agent._network.trainable_variables]
  iterations = int(agent._optimizer.iterations.numpy())
  loss_info = agent.train(tensors(traj))
  assert int(agent._optimizer.iterations.numpy()) - iterations == 6
  assert int(train_step.numpy()) == 1
  assert isinstance(loss_info.extra, ppo.PpoLossInfo)
  assert np.all(np.isfinite([float(loss_info.loss)] + [float(x) for x in loss_info.extra]))
  assert all(np.abs(new.numpy() - old).max() > 0
             for old, new in zip(before, agent._network.trainable_variables))
  agent.train(tensors(traj))
  assert int(agent._optimizer.iterations.numpy()) - iterations == 12
  assert int(train_step.numpy()) == 2


def test_each_epoch_partitions_the_rows_into_minibatches(specs):
  agent = make_agent(specs, num_epochs=3, num_minibatches=2)
  traj = make_unrolls()
  seen = []
  minibatch_loss = agent._minibatch_loss

  def spy(batch):
    # Row identity: the first observation's first feature (distinct per row).
    first = batch['observation'].numpy()[0, :, 0]
    rows = [int(np.flatnonzero(traj.observation[:, 0, 0] == x)[0]) for x in first]
    # The rest of the minibatch comes from the same rows.
    np.testing.assert_array_equal(batch['valid'].numpy(),
                                  (traj.step_type[rows, :-1] != LAST).T)
    np.testing.assert_array_equal(batch['action'].numpy(), traj.action[rows, :-1].T)
    seen.append(sorted(rows))
    return minibatch_loss(batch)

  agent._minibatch_loss = spy
  agent.train(tensors(traj))
  assert len(seen) == 6
  for epoch in range(3):
    first, second = seen[2 * epoch], seen[2 * epoch + 1]
    assert len(first) == len(second) == 2
    assert sorted(first + second) == [0, 1, 2, 3]


def test_steps_shuffle_mixes_steps_of_different_unrolls(specs):
  """shuffle='steps': each epoch partitions the (unroll, t) steps into minibatches that
  mix unrolls; every step keeps the GAE of its whole unroll; the gradient step count
  is the same as with rows."""
  agent = make_agent(specs, num_epochs=3, num_minibatches=2, shuffle='steps')
  traj = make_unrolls()
  advantages, targets, valid = gae_reference(traj)  # on the whole unrolls
  # Step identity: the observation's first feature (distinct per step).
  features = traj.observation[:, :-1, 0]
  assert len(np.unique(features)) == features.size
  seen = []
  minibatch_loss = agent._minibatch_loss

  def spy(batch):
    observation = batch['observation'].numpy()
    assert observation.shape == (1, 2 * T, 4)  # 24 steps / 2: a [1, 12] "unroll"
    steps = [tuple(int(i) for i in np.argwhere(features == x)[0])
             for x in observation[0, :, 0]]
    rows, times = (np.array(i) for i in zip(*steps))
    # Everything else in the minibatch belongs to the same steps.
    np.testing.assert_array_equal(batch['action'].numpy()[0], traj.action[rows, times])
    np.testing.assert_array_equal(batch['valid'].numpy()[0], valid[rows, times])
    np.testing.assert_allclose(batch['advantage'].numpy()[0], advantages[rows, times],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch['value_target'].numpy()[0], targets[rows, times],
                               rtol=1e-5, atol=1e-6)
    seen.append(steps)
    return minibatch_loss(batch)

  agent._minibatch_loss = spy
  agent.train(tensors(traj))
  assert int(agent._optimizer.iterations.numpy()) == 3 * 2
  assert len(seen) == 6
  every_step = sorted((row, t) for row in range(4) for t in range(T))
  for epoch in range(3):
    assert sorted(seen[2 * epoch] + seen[2 * epoch + 1]) == every_step
  for steps in seen:
    assert len({row for row, _ in steps}) > 1  # steps of several unrolls
  # Unrolls are split across minibatches (with rows, each holds 0 or T of a row's steps).
  per_row = [sum(1 for r, _ in steps if r == row) for steps in seen for row in range(4)]
  assert any(count not in (0, T) for count in per_row)


def test_num_minibatches_must_divide_the_rows(specs):
  traj = tensors(make_unrolls())  # 4 rows of T = 6 steps
  agent = make_agent(specs, num_minibatches=3)
  with pytest.raises(ValueError, match=r'num_minibatches=3 must divide .*rows.*got 4'):
    agent.train(traj)
  assert int(agent._optimizer.iterations.numpy()) == 0
  # With shuffle='steps' the unit is a step: 3 divides 24 steps, 5 does not.
  agent = make_agent(specs, num_epochs=1, num_minibatches=3, shuffle='steps')
  agent.train(traj)
  assert int(agent._optimizer.iterations.numpy()) == 3
  agent = make_agent(specs, num_minibatches=5, shuffle='steps')
  with pytest.raises(ValueError, match=r'num_minibatches=5 must divide .*steps.*got 24'):
    agent.train(traj)


def test_num_minibatches_checked_when_rows_are_unknown_when_traced(specs):
  agent = make_agent(specs, num_minibatches=3)

  @tf.function(input_signature=[tf.TensorSpec([None, None])])
  def checked_rows(valid):
    return agent._checked_rows(valid)

  assert int(checked_rows(tf.zeros([T, 6]))) == 6
  with pytest.raises(tf.errors.InvalidArgumentError, match='num_minibatches=3'):
    checked_rows(tf.zeros([T, 4]))


def test_constructor_checks_its_arguments(specs):
  with pytest.raises(ValueError, match='num_minibatches'):
    make_agent(specs, num_minibatches=0)
  with pytest.raises(ValueError, match='num_epochs'):
    make_agent(specs, num_epochs=0)
  with pytest.raises(ValueError, match='shuffle'):
    make_agent(specs, shuffle='episodes')
  with pytest.raises(ValueError, match='reward_clipping'):
    make_agent(specs, reward_clipping='sign')


@pytest.mark.parametrize('shuffle', ['rows', 'steps'])
def test_single_minibatch_train_is_one_gradient_step(specs, shuffle):
  learning_rate = 0.1
  agent = make_agent(specs, optimizer=tf.keras.optimizers.SGD(learning_rate),
                     num_epochs=1, num_minibatches=1, gradient_clipping=None,
                     shuffle=shuffle)
  traj = make_unrolls()
  variables = agent._network.trainable_variables
  with tf.GradientTape() as tape:
    expected = agent.loss(tensors(traj))
  gradients = [g.numpy() for g in tape.gradient(expected.loss, variables)]
  before = [v.numpy() for v in variables]
  loss_info = agent.train(tensors(traj))
  np.testing.assert_allclose(loss_info.loss.numpy(), expected.loss.numpy(), rtol=1e-5)
  for old, new, gradient in zip(before, variables, gradients):
    np.testing.assert_allclose(new.numpy() - old, -learning_rate * gradient, rtol=1e-3,
                               atol=1e-7)


@pytest.mark.parametrize('shuffle', ['rows', 'steps'])
def test_trains_under_learner(specs, tmp_path, shuffle):
  time_step_spec, action_spec = specs
  train_step = learner_lib.new_train_step()
  agent = ppo.create_ppo_agent(time_step_spec, action_spec, train_step,
                               fc_layer_params=HIDDEN, num_epochs=2, num_minibatches=2,
                               shuffle=shuffle)
  traj = tensors(make_unrolls())
  before = [v.numpy() for v in agent._network.trainable_variables]
  learner = learner_lib.Learner(
      str(tmp_path), train_step, agent,
      experience_dataset_fn=lambda: tf.data.Dataset.from_tensors(
          {'experience': traj}).map(lambda x: (x, ())).repeat(),
      use_kwargs_in_agent_train=True, checkpoint_interval=0, summary_interval=0)
  loss_info = learner.run(iterations=3)
  assert learner.train_step_numpy == 3
  assert int(agent._optimizer.iterations.numpy()) == 3 * 2 * 2
  assert np.all(np.isfinite([float(loss_info.loss)] + [float(x) for x in loss_info.extra]))
  assert all(np.abs(new.numpy() - old).max() > 0
             for old, new in zip(before, agent._network.trainable_variables))


@pytest.mark.parametrize('create_agent', [ppo.create_ppo_agent, impala.create_impala_agent],
                         ids=['ppo', 'impala'])
def test_a_sample_that_never_comes_counts_no_train_step(specs, tmp_path, create_agent):
  """A dataset that ends (a starved trainer's sample timeout) must not advance the step:
  the agents' increment once ran before the sample was read (Learner._run_agent)."""
  time_step_spec, action_spec = specs
  train_step = learner_lib.new_train_step()
  agent = create_agent(time_step_spec, action_spec, train_step, fc_layer_params=HIDDEN)
  traj = tensors(make_unrolls())
  learner = learner_lib.Learner(
      str(tmp_path), train_step, agent,
      experience_dataset_fn=lambda: tf.data.Dataset.from_tensors(
          {'experience': traj}).map(lambda x: (x, ())).repeat(2),
      use_kwargs_in_agent_train=True, checkpoint_interval=0, summary_interval=0)
  for _ in range(5):  # the race showed on most calls
    with pytest.raises(tf.errors.OutOfRangeError):
      learner.run(iterations=3)
    assert learner.train_step_numpy == 2
    learner.reset_iterator()
    learner.run(iterations=2)
    assert learner.train_step_numpy == 4
    train_step.assign(0)
    learner.reset_iterator()

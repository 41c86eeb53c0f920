"""Continuous actions for the actor-critic agents: the tanh-Gaussian and clipped
Gaussian heads, IMPALA's V-trace ratios and CLEAR's KL on Gaussians, and PPO's ratios,
against float64 numpy.

Unrolls follow tests/agents/test_impala.py (three rows, a termination and a truncation)
with Pendulum's specs: observation float32 [3], action float32 [1] in [-2, 2]. The
behaviour info holds the Gaussian's loc and log_scale and the pre-squash sample u; the
action sent was 2 tanh(u).
"""
import numpy as np
import pytest
import tensorflow as tf

from tfrl import envs
from tfrl import learner as learner_lib
from tfrl import triggers
from tfrl.agents import impala
from tfrl.agents import ppo
from tfrl.networks import action_heads
from tfrl.networks import actor_critic

import test_impala  # tests/agents/test_impala.py

HALF_RANGE = 2.0


def gaussian_unrolls(seed=0):
  base = test_impala.make_unrolls(seed=seed)
  rng = np.random.RandomState(seed + 7)
  rows, length = base.step_type.shape
  loc = (0.5 * rng.randn(rows, length, 1)).astype(np.float32)
  log_scale = rng.uniform(-0.7, 0.5, (rows, length, 1)).astype(np.float32)
  u = (loc + np.exp(log_scale) * rng.randn(rows, length, 1)).astype(np.float32)
  u[0, 1] = 9.0  # saturated: tanh(u) rounds to 1 in float32, the log-prob must not
  return base._replace(
      observation=rng.randn(rows, length, 3).astype(np.float32),
      action=(HALF_RANGE * np.tanh(u)).astype(np.float32),
      policy_info={'loc': loc, 'log_scale': log_scale, 'raw_action': u,
                   'value': base.policy_info['value']})


def np_log_prob(loc, log_scale, u):
  """log density of a = 2 tanh(u), u ~ N(loc, exp(log_scale)), in float64."""
  loc, log_scale, u = (np.asarray(x, np.float64) for x in (loc, log_scale, u))
  gaussian = (-0.5 * ((u - loc) / np.exp(log_scale)) ** 2 - log_scale -
              0.5 * np.log(2 * np.pi)).sum(-1)
  # log |da/du| = log 2 + log(1 - tanh(u)^2) = log 2 + log 4 - 2 log(e^u + e^-u).
  log_det = (np.log(HALF_RANGE) + np.log(4.0) - 2.0 * np.logaddexp(u, -u)).sum(-1)
  return gaussian - log_det


def np_squashed_entropy(loc, log_scale):
  """Entropy of a = 2 tanh(u), u ~ N(loc, exp(log_scale)): the Gaussian's plus
  E[log |da/du|], the expectation by a fine Riemann sum over z in [-10, 10], float64."""
  z = np.linspace(-10.0, 10.0, 20001)
  density = np.exp(-0.5 * z ** 2) / np.sqrt(2 * np.pi) * (z[1] - z[0])
  u = loc[..., None] + np.exp(log_scale)[..., None] * z
  log_det = np.log(HALF_RANGE) + np.log(4.0) - 2.0 * np.logaddexp(u, -u)
  return (log_scale + 0.5 * np.log(2 * np.pi * np.e) + (log_det * density).sum(-1)).sum(-1)


def np_gaussian_kl(loc_p, log_scale_p, loc_q, log_scale_q):
  loc_p, log_scale_p, loc_q, log_scale_q = (np.asarray(x, np.float64) for x in (
      loc_p, log_scale_p, loc_q, log_scale_q))
  return (log_scale_q - log_scale_p + (np.exp(2 * log_scale_p) + (loc_p - loc_q) ** 2) /
          (2 * np.exp(2 * log_scale_q)) - 0.5).sum(-1)


def network_params(agent, traj):
  (params, values), _ = agent._network(tf.constant(traj.observation))  # pylint: disable=protected-access
  return ({k: v.numpy().astype(np.float64) for k, v in params.items()},
          values.numpy().astype(np.float64))


def test_tanh_gaussian_head_sends_bounded_actions_and_scores_them(pendulum_specs):
  time_step_spec, action_spec = pendulum_specs
  network = actor_critic.ActorCriticNetwork(time_step_spec.observation, action_spec, (8,))
  agent = ppo.PpoAgent(time_step_spec, action_spec, network, tf.keras.optimizers.Adam(),
                       learner_lib.new_train_step())
  env = envs.make('Pendulum-v1', num_envs=64, seed=0)
  step = agent.collect_policy.action(env.reset())
  env.close()
  action, info = step.action.numpy(), {k: v.numpy() for k, v in step.info.items()}
  assert action.shape == (64, 1) and np.all(np.abs(action) <= HALF_RANGE)
  np.testing.assert_allclose(action, HALF_RANGE * np.tanh(info['raw_action']), rtol=1e-5,
                             atol=1e-6)
  head = network.head
  log_prob = head.log_prob(action_heads.params_of(info, head), action, info).numpy()
  np.testing.assert_allclose(log_prob, np_log_prob(info['loc'], info['log_scale'],
                                                   info['raw_action']), rtol=1e-4, atol=1e-4)
  # The greedy policy sends the squashed mean.
  greedy = triggers.greedy(agent).action(
      envs.make('Pendulum-v1', num_envs=4, seed=1).reset())
  np.testing.assert_allclose(greedy.action, HALF_RANGE * np.tanh(greedy.info['loc']),
                             rtol=1e-5, atol=1e-6)


def test_clipped_gaussian_head_sends_clipped_samples_and_scores_the_sample(pendulum_specs):
  """SB3's way: the env gets clip(u), the loss scores log N(u) (no tanh term), and the
  greedy action is the clipped mean; a mean past the bound sends the bound."""
  time_step_spec, action_spec = pendulum_specs
  agent = ppo.create_ppo_agent(time_step_spec, action_spec, learner_lib.new_train_step(),
                               fc_layer_params=(8,), continuous_head='clipped')
  head = agent._network.head  # pylint: disable=protected-access
  assert isinstance(head, action_heads.ClippedGaussianHead)
  env = envs.make('Pendulum-v1', num_envs=64, seed=0)
  time_step = env.reset()
  env.close()
  agent.collect_policy.action(time_step)  # builds the head's layers
  head._loc.bias.assign([3.0])  # pylint: disable=protected-access  # a mean past the bound
  step = agent.collect_policy.action(time_step)
  action, info = step.action.numpy(), {k: v.numpy() for k, v in step.info.items()}
  u = info['raw_action']
  assert action.shape == (64, 1) and np.all(np.abs(action) <= HALF_RANGE)
  np.testing.assert_array_equal(action, np.clip(u, -HALF_RANGE, HALF_RANGE))
  assert (u > HALF_RANGE).any() and (u < HALF_RANGE).any()  # both sides of the bound
  log_prob = head.log_prob(action_heads.params_of(info, head), action, info).numpy()
  gaussian = (-0.5 * ((u - info['loc']) / np.exp(info['log_scale'])) ** 2 -
              info['log_scale'] - 0.5 * np.log(2 * np.pi)).sum(-1)
  np.testing.assert_allclose(log_prob, gaussian, rtol=1e-5, atol=1e-5)
  greedy = triggers.greedy(agent).action(time_step)
  assert np.all(greedy.info['loc'] > HALF_RANGE)
  np.testing.assert_array_equal(greedy.action, np.full((64, 1), HALF_RANGE, np.float32))


def test_an_unknown_continuous_head_is_named_in_the_error(pendulum_specs):
  time_step_spec, action_spec = pendulum_specs
  with pytest.raises(ValueError, match="continuous_head must be one of.*'squashed'"):
    ppo.create_ppo_agent(time_step_spec, action_spec, learner_lib.new_train_step(),
                         continuous_head='squashed')


def test_impala_on_gaussian_actions_matches_numpy_vtrace(pendulum_specs):
  # Unclipped importance ratios (rho_bar = 100), so every ratio shows in the loss.
  agent = test_impala.make_agent(pendulum_specs, clip_rho_threshold=100.0,
                                 clip_pg_rho_threshold=100.0)
  traj = gaussian_unrolls()
  params, values = network_params(agent, traj)
  info = traj.policy_info
  u = info['raw_action'][:, :-1]
  target = np_log_prob(params['loc'][:, :-1], params['log_scale'][:, :-1], u)
  behaviour = np_log_prob(info['loc'][:, :-1], info['log_scale'][:, :-1], u)
  assert np.all(np.isfinite(behaviour))
  ref = test_impala.vtrace_reference(traj, None, values, rho_bar=100.0, pg_rho_bar=100.0,
                                     log_probs=(target, behaviour))
  rhos = ref['rhos'][ref['valid'] > 0]
  assert rhos.min() < 0.5 and rhos.max() > 2.0  # ratios on both sides of 1
  valid = ref['valid']
  normalizer = valid.sum()
  entropy = np_squashed_entropy(params['loc'][:, :-1], params['log_scale'][:, :-1])
  expected = {
      'policy_loss': -(valid * target * ref['pg_advantages']).sum() / normalizer,
      'baseline_loss': 0.5 * (valid * (ref['vs'] - values[:, :-1]) ** 2).sum() / normalizer,
      'entropy_loss': -(valid * entropy).sum() / normalizer}
  expected['total'] = (expected['policy_loss'] + 0.5 * expected['baseline_loss'] +
                       0.01 * expected['entropy_loss'])
  test_impala.assert_loss_matches(agent.loss(test_impala.tensors(traj)), expected)


def test_clear_policy_cloning_on_gaussians_is_their_kl(pendulum_specs):
  agent = test_impala.make_agent(pendulum_specs, policy_cloning_cost=1.0)
  traj = gaussian_unrolls(seed=1)
  params, _ = network_params(agent, traj)
  mask = np.array([0.0, 1.0, 1.0], np.float32)
  loss_info = agent.loss(test_impala.tensors(traj), replay_mask=tf.constant(mask))
  info = traj.policy_info
  kl = np_gaussian_kl(info['loc'][:, :-1], info['log_scale'][:, :-1],
                      params['loc'][:, :-1], params['log_scale'][:, :-1])
  valid = (traj.step_type[:, :-1] != test_impala.LAST).astype(np.float64)
  expected = (valid * mask[:, None] * kl).sum() / valid.sum()
  np.testing.assert_allclose(loss_info.extra.policy_cloning_loss, expected, rtol=1e-4)


def test_ppo_ratios_on_gaussian_actions_are_one_before_training(pendulum_specs):
  """Acting and scoring agree: unrolls the policy itself collected have ratio 1 (up to
  float32), so the first epoch's clip fraction is zero and its KL estimate is ~0."""
  time_step_spec, action_spec = pendulum_specs
  network = actor_critic.ActorCriticNetwork(time_step_spec.observation, action_spec, (8,))
  agent = ppo.PpoAgent(time_step_spec, action_spec, network, tf.keras.optimizers.SGD(0.0),
                       learner_lib.new_train_step(), num_epochs=1, value_clip=None)
  traj = gaussian_unrolls(seed=2)
  params, _ = network_params(agent, traj)
  info = dict(traj.policy_info, loc=params['loc'].astype(np.float32),
              log_scale=params['log_scale'].astype(np.float32))
  loss_info = agent.train(test_impala.tensors(traj._replace(policy_info=info)))
  assert float(loss_info.extra.clip_fraction) == 0.0
  assert abs(float(loss_info.extra.approx_kl)) < 1e-6


def test_create_impala_and_ppo_agents_train_on_pendulum(pendulum_specs):
  time_step_spec, action_spec = pendulum_specs
  traj = test_impala.tensors(gaussian_unrolls())
  for create in (impala.create_impala_agent, ppo.create_ppo_agent):
    agent = create(time_step_spec, action_spec, learner_lib.new_train_step())
    before = [v.numpy() for v in agent.trainable_variables]
    loss_info = agent.train(traj)
    assert np.isfinite(float(loss_info.loss))
    assert any(not np.allclose(b, a.numpy())
               for b, a in zip(before, agent.trainable_variables))


def test_builders_set_the_starting_log_scale_and_the_activation(pendulum_specs):
  """RL-Zoo's MuJoCo PPO: log_std_init -2 (a nearly deterministic first policy), ReLU."""
  time_step_spec, action_spec = pendulum_specs
  observation = tf.zeros([64] + time_step_spec.observation.shape.as_list())
  for create in (impala.create_impala_agent, ppo.create_ppo_agent):
    agent = create(time_step_spec, action_spec, learner_lib.new_train_step(),
                   initial_log_scale=-2.0, activation='relu')
    (params, _), _ = agent._network(observation)
    np.testing.assert_allclose(params[action_heads.LOG_SCALE].numpy(), -2.0)
    dense = [layer for layer in agent._network.submodules
             if isinstance(layer, tf.keras.layers.Dense) and layer.units == 64]
    assert dense and all(layer.activation is tf.keras.activations.relu for layer in dense)


def test_builders_set_adams_epsilon_and_the_initializer(pendulum_specs):
  """RL-Zoo's HalfCheetah PPO settings as SB3 runs them: Adam with eps 1e-5, layers
  started as PyTorch's (ortho_init=False); Keras' 1e-7 and orthogonal by default."""
  time_step_spec, action_spec = pendulum_specs
  for create in (impala.create_impala_agent, ppo.create_ppo_agent):
    default = create(time_step_spec, action_spec, learner_lib.new_train_step())
    sb3 = create(time_step_spec, action_spec, learner_lib.new_train_step(),
                 adam_epsilon=1e-5, initializer='fan_in_uniform')
    assert default._optimizer.epsilon == pytest.approx(1e-7)
    assert sb3._optimizer.epsilon == pytest.approx(1e-5)
    biases = lambda agent: [v.numpy() for v in agent._network.trainable_variables
                            if v.name.endswith('bias:0')]
    assert not any(b.any() for b in biases(default))
    assert biases(sb3) and all(b.any() for b in biases(sb3))

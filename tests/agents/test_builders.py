"""Tests for the tf-agents builders `create_dqn_agent` and `create_sac_agent`.

Each builder returns an initialized agent: its collect policy acts on a batched time
step straight from a `tfrl.envs` environment, and one `train` call on a small random
[B, 2] transition batch gives a finite loss and advances the train step.
"""
import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.agents.sac import sac_agent
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from tfrl import envs
from tfrl import learner as learner_lib
from tfrl.agents import dqn
from tfrl.agents import sac
from tfrl.networks import critics

FIRST, MID, LAST = int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST)
BATCH = 8


@pytest.fixture(autouse=True)
def _seed():
  tf.keras.utils.set_random_seed(0)


@pytest.fixture(scope='module')
def cartpole():
  env = envs.make('CartPole-v1', num_envs=1, seed=0)
  yield env
  env.close()


@pytest.fixture(scope='module')
def pendulum():
  env = envs.make('Pendulum-v1', num_envs=1, seed=0)
  yield env
  env.close()


def as_tensors(time_step):
  return tf.nest.map_structure(tf.convert_to_tensor, time_step)


def random_transitions(observation_shape, action_fn, seed=0, rows=BATCH):
  """[rows, 2] transitions (FIRST/MID -> MID/LAST) with random values."""
  rng = np.random.RandomState(seed)
  step_type = np.stack([np.where(rng.rand(rows) < 0.3, FIRST, MID),
                        np.where(rng.rand(rows) < 0.3, LAST, MID)], 1).astype(np.int32)
  next_step_type = np.stack([step_type[:, 1], np.full(rows, FIRST)], 1).astype(np.int32)
  discount = np.where(step_type == LAST, 0.0, 1.0).astype(np.float32)
  return tf.nest.map_structure(tf.constant, trajectory.Trajectory(
      step_type=step_type,
      observation=rng.randn(rows, 2, *observation_shape).astype(np.float32),
      action=action_fn(rng, (rows, 2)),
      policy_info=(),
      next_step_type=next_step_type,
      reward=rng.randn(rows, 2).astype(np.float32),
      discount=discount))


def assert_matches_spec(spec, batch):
  tf.nest.assert_same_structure(spec, batch)
  for s, value in zip(tf.nest.flatten(spec), tf.nest.flatten(batch)):
    assert value.dtype == s.dtype, s
    assert value.shape[2:] == s.shape, s


# -- DQN ----------------------------------------------------------------------------

def test_dqn_builder_acts_and_trains(cartpole):
  train_step = learner_lib.new_train_step()
  agent = dqn.create_dqn_agent(cartpole.time_step_spec(), cartpole.action_spec(),
                               train_step, fc_layer_params=(16,))
  assert isinstance(agent, dqn_agent.DdqnAgent)
  time_step = as_tensors(cartpole.reset())
  action_step = agent.collect_policy.action(time_step)
  assert action_step.action.shape == (1,)
  assert action_step.action.dtype == tf.int64
  assert 0 <= int(action_step.action[0]) <= 1
  next_step = cartpole.step(action_step.action.numpy())
  assert next_step.observation.shape == (1, 4)

  experience = random_transitions(
      (4,), lambda rng, shape: rng.randint(0, 2, shape).astype(np.int64))
  assert_matches_spec(agent.collect_data_spec, experience)
  variables = [v.numpy() for v in agent._q_network.trainable_variables]
  loss_info = agent.train(experience)
  assert np.isfinite(loss_info.loss.numpy())
  assert int(train_step.numpy()) == 1
  assert any(np.abs(new.numpy() - old).max() > 0
             for old, new in zip(variables, agent._q_network.trainable_variables))


def test_dqn_builder_options(cartpole):
  train_step = learner_lib.new_train_step()
  agent = dqn.create_dqn_agent(cartpole.time_step_spec(), cartpole.action_spec(),
                               train_step, fc_layer_params=(16,), double_q=False,
                               epsilon_start=0.0, epsilon_end=0.0)
  # Plain DQN (not Double DQN): tfrl's DqnAgent is tf-agents' with tfrl's interface.
  assert type(agent) is dqn.DqnAgent  # pylint: disable=unidiomatic-typecheck
  assert isinstance(agent, dqn_agent.DqnAgent)
  assert not isinstance(agent, dqn_agent.DdqnAgent)
  # With epsilon 0 the collect policy is greedy in the Q-network.
  observations = np.random.RandomState(1).randn(16, 4).astype(np.float32)
  time_step = ts.restart(tf.constant(observations), batch_size=16)
  q_values, _ = agent._q_network(tf.constant(observations))
  np.testing.assert_array_equal(agent.collect_policy.action(time_step).action.numpy(),
                                np.argmax(q_values.numpy(), -1))
  np.testing.assert_array_equal(agent.policy.action(time_step).action.numpy(),
                                np.argmax(q_values.numpy(), -1))


@pytest.mark.parametrize('clip', ['global', 'per_variable'])
def test_dqn_global_gradient_clipping_clips_the_norm_of_all_gradients_together(cartpole,
                                                                                clip):
  """Adam's first step is lr * g / (|g| + eps / sqrt(1 - beta_2)): linear in gradients
  far below eps, so it shows the clipped gradient that reached the optimizer."""
  limit, learning_rate = 1e-9, 10.0  # steps of ~1e-3: well above float32 rounding
  train_step = learner_lib.new_train_step()
  agent = dqn.create_dqn_agent(
      cartpole.time_step_spec(), cartpole.action_spec(), train_step,
      fc_layer_params=(16,), learning_rate=learning_rate,
      global_gradient_clipping=limit if clip == 'global' else None,
      gradient_clipping=limit if clip == 'per_variable' else None)
  experience = random_transitions(
      (4,), lambda rng, shape: rng.randint(0, 2, shape).astype(np.int64))
  variables = agent._q_network.trainable_weights
  with tf.GradientTape() as tape:
    loss = agent._loss(experience, td_errors_loss_fn=agent._td_errors_loss_fn,
                       gamma=agent._gamma, reward_scale_factor=1.0, training=True).loss
  gradients = [g.numpy() for g in tape.gradient(loss, variables)]
  before = [v.numpy() for v in variables]
  agent.train(experience)
  if clip == 'global':  # SB3's clip_grad_norm_ over all parameters
    scale = limit / np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in gradients))
    clipped = [g * scale for g in gradients]
  else:  # tf-agents: each variable's gradient to the limit on its own
    clipped = [g * limit / np.linalg.norm(g) for g in gradients]
  epsilon = 1e-7 / np.sqrt(1 - 0.999)  # Keras Adam's defaults
  for old, v, c in zip(before, variables, clipped):
    np.testing.assert_allclose(old - v.numpy(), learning_rate * c / (np.abs(c) + epsilon),
                               rtol=2e-3, atol=5e-8)


def test_dqn_refuses_both_kinds_of_gradient_clipping(cartpole):
  with pytest.raises(ValueError, match='not both'):
    dqn.create_dqn_agent(cartpole.time_step_spec(), cartpole.action_spec(),
                         learner_lib.new_train_step(), gradient_clipping=1.0,
                         global_gradient_clipping=1.0)


# -- SAC ----------------------------------------------------------------------------

def make_sac(pendulum, train_step):
  return sac.create_sac_agent(pendulum.time_step_spec(), pendulum.action_spec(), train_step,
                              actor_fc_layer_params=(16, 16),
                              critic_joint_fc_layer_params=(16, 16))


def sac_transitions(seed=0):
  return random_transitions(
      (3,), lambda rng, shape: rng.uniform(-2, 2, shape + (1,)).astype(np.float32), seed)


def test_sac_builder_acts_and_trains(pendulum):
  train_step = learner_lib.new_train_step()
  agent = make_sac(pendulum, train_step)
  assert isinstance(agent, sac_agent.SacAgent)
  time_step = as_tensors(pendulum.reset())
  assert time_step.observation.shape == (1, 3)
  for policy in (agent.collect_policy, agent.policy):
    action = policy.action(time_step).action
    assert action.shape == (1, 1)
    assert action.dtype == tf.float32
    assert np.all(np.abs(action.numpy()) <= 2.0)
  next_step = pendulum.step(agent.collect_policy.action(time_step).action.numpy())
  assert next_step.observation.shape == (1, 3)

  experience = sac_transitions()
  assert_matches_spec(agent.collect_data_spec, experience)
  critic = [v.numpy() for v in agent._critic_network_1.trainable_variables]
  loss_info = agent.train(experience)
  assert np.isfinite(loss_info.loss.numpy())
  assert np.isfinite(loss_info.extra.critic_loss.numpy())
  assert np.isfinite(loss_info.extra.actor_loss.numpy())
  assert int(train_step.numpy()) == 1
  assert any(np.abs(new.numpy() - old).max() > 0
             for old, new in zip(critic, agent._critic_network_1.trainable_variables))


def test_sac_zero_weights_give_zero_loss(pendulum):
  train_step = learner_lib.new_train_step()
  agent = make_sac(pendulum, train_step)
  experience = sac_transitions(seed=1)
  # Control: with unit weights the critic loss is positive.
  assert float(agent.loss(experience, weights=tf.ones([BATCH])).extra.critic_loss) > 0
  critic = [v.numpy() for v in agent._critic_network_1.trainable_variables]
  actor = [v.numpy() for v in agent._actor_network.trainable_variables]
  loss_info = agent.train(experience, weights=tf.zeros([BATCH]))
  assert float(loss_info.extra.critic_loss) == 0.0
  assert float(loss_info.extra.actor_loss) == 0.0
  assert float(loss_info.loss) == 0.0
  assert int(train_step.numpy()) == 1
  # Zero gradients: Adam leaves the networks where they were.
  for old, new in zip(critic, agent._critic_network_1.trainable_variables):
    np.testing.assert_array_equal(new.numpy(), old)
  for old, new in zip(actor, agent._actor_network.trainable_variables):
    np.testing.assert_array_equal(new.numpy(), old)


def test_sac_with_rlpd_layer_norm_critic_matches_a_numpy_reference_and_trains(pendulum):
  train_step = learner_lib.new_train_step()
  agent = sac.create_sac_agent(pendulum.time_step_spec(), pendulum.action_spec(),
                               train_step, actor_fc_layer_params=(16, 16),
                               critic_joint_fc_layer_params=(16, 8),
                               critic_layer_norm=True)
  critic = agent._critic_network_1
  assert isinstance(critic, critics.LayerNormCritic)
  experience = sac_transitions(seed=2)
  observation, action = experience.observation[:, 0], experience.action[:, 0]
  q, _ = critic((observation, action))
  # Reference: Dense -> LayerNorm (biased variance, epsilon 1e-3) -> ReLU, then linear.
  weights = [v.numpy() for v in critic.trainable_variables]
  x = np.concatenate([observation, action], axis=1).astype(np.float64)
  for kernel, bias, gamma, beta in (weights[0:4], weights[4:8]):
    h = x @ kernel + bias
    h = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + 1e-3)
    x = np.maximum(h * gamma + beta, 0)
  np.testing.assert_allclose(q.numpy(), (x @ weights[8] + weights[9])[:, 0], rtol=1e-4,
                             atol=1e-5)
  # The agent's copies (twin critic, targets) are layer-normalized too, and it trains.
  assert isinstance(agent._target_critic_network_2, critics.LayerNormCritic)
  before = [v.numpy() for v in critic.trainable_variables]
  assert np.isfinite(agent.train(experience).loss.numpy())
  assert any(np.abs(new.numpy() - old).max() > 0
             for old, new in zip(before, critic.trainable_variables))


def box_specs(dims):
  """(time step spec, action spec) of 3-D observations and `dims`-D Box actions."""
  observation = tensor_spec.TensorSpec((3,), tf.float32)
  action = tensor_spec.BoundedTensorSpec((dims,), tf.float32, -1.0, 1.0)
  return ts.time_step_spec(observation), action


@pytest.mark.parametrize('dims', [6, 1])
def test_sac_target_entropy_defaults_to_minus_the_action_dimensions(dims):
  # SAC's paper and SB3's 'auto': -dim(A), not tf-agents' -dim(A)/2.
  agent = sac.create_sac_agent(*box_specs(dims), learner_lib.new_train_step(),
                               actor_fc_layer_params=(8,), critic_joint_fc_layer_params=(8,))
  assert agent._target_entropy == -float(dims)  # pylint: disable=protected-access


def test_sac_keeps_an_explicit_target_entropy_and_one_bound_in_gin():
  small = dict(actor_fc_layer_params=(8,), critic_joint_fc_layer_params=(8,))
  agent = sac.create_sac_agent(*box_specs(6), learner_lib.new_train_step(),
                               target_entropy=-3.0, **small)
  assert agent._target_entropy == -3.0  # pylint: disable=protected-access
  gin.bind_parameter('create_sac_agent.target_entropy', -2.5)
  agent = sac.create_sac_agent(*box_specs(6), learner_lib.new_train_step(), **small)
  assert agent._target_entropy == -2.5  # pylint: disable=protected-access

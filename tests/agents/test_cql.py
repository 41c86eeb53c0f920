"""CQL's conservative term on the DQN agent, against a numpy reference."""
import numpy as np
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl.agents import dqn
from test_bc import transitions  # tests/agents/test_bc.py


def test_cql_adds_alpha_times_the_weighted_logsumexp_gap():
  rng = np.random.default_rng(0)
  observation_spec = tensor_spec.BoundedTensorSpec((3,), tf.float32, -1, 1)
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
  alpha = 0.7
  agent = dqn.create_dqn_agent(ts.time_step_spec(observation_spec), action_spec,
                               tf.Variable(0, dtype=tf.int64), fc_layer_params=(16,),
                               cql_alpha=alpha)
  observations = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
  actions = rng.integers(0, 4, 8)
  weights = np.array([1, 0.5, 1, 1, 2, 1, 0, 1], np.float32)
  first = np.array([1, 1, 2, 1, 1, 0, 1, 1], np.int32)  # row 2 starts on a boundary
  experience = transitions(observations, actions, first)
  experience = tf.nest.map_structure(tf.convert_to_tensor, experience._replace(
      reward=rng.normal(size=(8, 2)).astype(np.float32)))

  total = agent._loss(experience, weights=weights).loss.numpy()  # pylint: disable=protected-access
  td_only = dqn_agent.DdqnAgent._loss(agent, experience, weights=weights).loss.numpy()  # pylint: disable=protected-access

  q = agent._q_network(observations)[0].numpy()  # pylint: disable=protected-access
  logsumexp = np.log(np.sum(np.exp(q), axis=1))
  gap = (logsumexp - q[np.arange(8), actions]) * (first != 2)
  np.testing.assert_allclose(total - td_only, alpha * np.sum(gap * weights) / 8, rtol=1e-4)
  assert total - td_only > 0  # logsumexp bounds every action's value from above


def test_without_alpha_the_loss_is_dqns():
  observation_spec = tensor_spec.BoundedTensorSpec((3,), tf.float32, -1, 1)
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
  agent = dqn.create_dqn_agent(ts.time_step_spec(observation_spec), action_spec,
                               tf.Variable(0, dtype=tf.int64), fc_layer_params=(16,))
  rng = np.random.default_rng(1)
  experience = tf.nest.map_structure(tf.convert_to_tensor, transitions(
      rng.uniform(-1, 1, (4, 3)).astype(np.float32), rng.integers(0, 4, 4),
      np.ones(4, np.int32)))
  np.testing.assert_allclose(
      agent._loss(experience).loss.numpy(),  # pylint: disable=protected-access
      dqn_agent.DdqnAgent._loss(agent, experience).loss.numpy())  # pylint: disable=protected-access

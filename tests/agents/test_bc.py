"""Behaviour cloning's loss against a numpy reference, for both kinds of action."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from tfrl.agents import bc


def transitions(observations, actions, first_step_types):
  """[B, 2] transition rows as the transition layout stores them."""
  b = observations.shape[0]
  twice = lambda x: np.stack([x, x], axis=1)
  return trajectory.Trajectory(
      step_type=np.stack([first_step_types, np.ones(b, np.int32)], axis=1),
      observation=twice(observations), action=twice(actions), policy_info=(),
      next_step_type=np.ones((b, 2), np.int32), reward=np.zeros((b, 2), np.float32),
      discount=np.ones((b, 2), np.float32))


@pytest.mark.parametrize('discrete', [True, False])
def test_loss_is_the_weighted_mean_of_the_rows_loss(discrete):
  rng = np.random.default_rng(0)
  observation_spec = tensor_spec.BoundedTensorSpec((3,), tf.float32, -1, 1)
  if discrete:
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 2)
    actions = rng.integers(0, 3, 8)
  else:
    action_spec = tensor_spec.BoundedTensorSpec((2,), tf.float32, -2, 2)
    actions = rng.uniform(-2, 2, (8, 2)).astype(np.float32)
  agent = bc.create_bc_agent(ts.time_step_spec(observation_spec), action_spec,
                             tf.Variable(0, dtype=tf.int64), fc_layer_params=(16,))
  observations = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
  weights = np.array([1, 1, 0, 1, 1, 1, 0, 1], np.float32)  # boundary rows weigh 0
  experience = transitions(observations, actions, np.where(weights > 0, 1, 2))

  loss = agent.loss(experience, weights=weights).loss.numpy()

  output = agent._network(observations)[0].numpy()  # pylint: disable=protected-access
  if discrete:
    logp = output - np.log(np.sum(np.exp(output), axis=1, keepdims=True))
    per_row = -logp[np.arange(8), actions]
  else:
    per_row = np.sum((output - actions) ** 2, axis=1)
  np.testing.assert_allclose(loss, np.sum(per_row * weights) / 8, rtol=1e-5)


def test_training_fits_the_actions_and_counts_steps():
  observation_spec = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1, 1)
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1)
  train_step = tf.Variable(0, dtype=tf.int64)
  agent = bc.create_bc_agent(ts.time_step_spec(observation_spec), action_spec, train_step,
                             fc_layer_params=(16,), learning_rate=1e-2)
  observations = np.random.default_rng(1).uniform(-1, 1, (64, 2)).astype(np.float32)
  actions = (observations[:, 0] > 0).astype(np.int64)  # a rule the clone must learn
  experience = transitions(observations, actions, np.ones(64, np.int32))
  for _ in range(200):
    agent.train(experience, weights=np.ones(64, np.float32))
  assert int(train_step.numpy()) == 200
  greedy = agent.policy.action(ts.restart(observations, batch_size=64)).action.numpy()
  assert np.mean(greedy == actions) > 0.95


def test_continuous_actions_need_vector_observations():
  image = tensor_spec.BoundedTensorSpec((8, 8, 3), tf.uint8, 0, 255)
  action_spec = tensor_spec.BoundedTensorSpec((1,), tf.float32, -1, 1)
  with pytest.raises(ValueError, match='vector observations'):
    bc.create_bc_agent(ts.time_step_spec(image), action_spec, tf.Variable(0, dtype=tf.int64))

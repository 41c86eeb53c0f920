"""Fixtures shared by the agent tests."""
import pytest
import tensorflow as tf

from tfrl import envs


@pytest.fixture(autouse=True)
def _seed():
  tf.keras.utils.set_random_seed(0)


def _specs(env_id):
  env = envs.make(env_id, num_envs=1)
  try:
    return env.time_step_spec(), env.action_spec()
  finally:
    env.close()


@pytest.fixture(scope='module')
def specs():
  """CartPole's (time_step_spec, action_spec)."""
  return _specs('CartPole-v1')


@pytest.fixture(scope='module')
def pendulum_specs():
  """Pendulum's (time_step_spec, action_spec): continuous actions in [-2, 2]."""
  return _specs('Pendulum-v1')

"""Fixtures shared by the agent tests."""
import pytest
import tensorflow as tf

from tfrl import envs


@pytest.fixture(autouse=True)
def _seed():
  tf.keras.utils.set_random_seed(0)


@pytest.fixture(scope='module')
def specs():
  """CartPole's (time_step_spec, action_spec)."""
  env = envs.make('CartPole-v1', num_envs=1)
  try:
    return env.time_step_spec(), env.action_spec()
  finally:
    env.close()

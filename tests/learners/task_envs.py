"""A second CartPole task for task-sequence tests ('task_envs:long_pole_cartpole')."""
import gymnasium as gym


def long_pole_cartpole(**kwargs) -> gym.Env:
  """CartPole with a pole twice as long: the same specs, other dynamics."""
  env = gym.make('CartPole-v1', **kwargs)
  env.unwrapped.length *= 2.0
  env.unwrapped.polemass_length = env.unwrapped.masspole * env.unwrapped.length
  return env

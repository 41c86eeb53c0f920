"""An environment that raises mid-episode, for the fault-injection tests.

Importing this module registers 'tfrl_test/CartPoleThatRaises-v0': CartPole-v1 whose
every copy raises `RuntimeError` at its 30th step. A program loads it with the gin
binding `import faulty_env` (tests/learners on PYTHONPATH).
"""
import gymnasium as gym

ENV_ID = 'tfrl_test/CartPoleThatRaises-v0'
RAISE_AT_STEP = 30


class CartPoleThatRaises(gym.Env):
  """CartPole-v1 that raises at its RAISE_AT_STEP-th step (a broken environment)."""

  metadata = {'render_modes': []}

  def __init__(self):
    self._env = gym.make('CartPole-v1')
    self.observation_space = self._env.observation_space
    self.action_space = self._env.action_space
    self._steps = 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return self._env.reset(seed=seed, options=options)

  def step(self, action):
    self._steps += 1
    if self._steps >= RAISE_AT_STEP:
      raise RuntimeError(f'CartPoleThatRaises broke at step {self._steps}')
    return self._env.step(action)


if ENV_ID not in gym.registry:
  gym.register(ENV_ID, entry_point=CartPoleThatRaises)

"""Environments that raise or hang mid-episode, for the fault-injection tests.

Importing this module registers 'tfrl_test/CartPoleThatRaises-v0': CartPole-v1 whose
every copy raises `RuntimeError` at its 30th step, and 'tfrl_test/CartPoleThatHangs-v0',
whose step() blocks for good after `hang_at_step` steps (env kwarg, or the env var
TFRL_TEST_HANG_AT_STEP; default 400), like a simulator that deadlocked. A program loads it with the gin
binding `import faulty_env` (tests/learners on PYTHONPATH).
"""
import os
import threading

import gymnasium as gym

ENV_ID = 'tfrl_test/CartPoleThatRaises-v0'
RAISE_AT_STEP = 30
HANG_ENV_ID = 'tfrl_test/CartPoleThatHangs-v0'


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


class CartPoleThatHangs(CartPoleThatRaises):
  """CartPole-v1 whose step() blocks for ever from its `hang_at_step`-th step."""

  def __init__(self, hang_at_step=None):
    super().__init__()
    self._hang_at = int(hang_at_step if hang_at_step is not None
                        else os.environ.get('TFRL_TEST_HANG_AT_STEP', 400))

  def step(self, action):
    self._steps += 1
    if self._steps >= self._hang_at:
      threading.Event().wait()  # a deadlock: nothing ever sets it
    return self._env.step(action)


if HANG_ENV_ID not in gym.registry:
  gym.register(HANG_ENV_ID, entry_point=CartPoleThatHangs)
if ENV_ID not in gym.registry:
  gym.register(ENV_ID, entry_point=CartPoleThatRaises)

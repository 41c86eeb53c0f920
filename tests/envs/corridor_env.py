"""An environment no registry knows: what a user brings in their own module.

`Corridor`: a walk along LENGTH cells, observed as a one-hot position; action 1 steps
right, 0 steps left; reaching the last cell ends the episode with reward 1, every other
step costs STEP_COST; episodes are cut at MAX_STEPS. The best return is
1 - (LENGTH - 2) * STEP_COST. `make_corridor` is its 'module:function' factory.
"""
import gymnasium as gym
import numpy as np

LENGTH = 6
STEP_COST = 0.01
MAX_STEPS = 30
BEST_RETURN = 1 - (LENGTH - 2) * STEP_COST


class Corridor(gym.Env):
  """The walk (module docstring); not registered with gymnasium."""

  def __init__(self, length: int = LENGTH):
    self.length = length
    self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), np.float32)
    self.action_space = gym.spaces.Discrete(2)
    self._position, self._steps = 0, 0

  def _observation(self):
    observation = np.zeros(self.length, np.float32)
    observation[self._position] = 1.0
    return observation

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._position, self._steps = 0, 0
    return self._observation(), {}

  def step(self, action):
    self._steps += 1
    self._position = int(np.clip(self._position + (1 if int(action) == 1 else -1), 0,
                                 self.length - 1))
    reached = self._position == self.length - 1
    reward = 1.0 if reached else -STEP_COST
    return self._observation(), reward, reached, self._steps >= MAX_STEPS, {}


def make_corridor(**kwargs) -> gym.Env:
  return Corridor(**kwargs)

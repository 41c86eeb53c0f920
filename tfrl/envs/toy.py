"""Small pixel environments that train in seconds: pixels end to end without Atari.

Importing `tfrl.envs` registers them with gymnasium:

- 'tfrl/PixelCatch-v0': "catch" (after bsuite's, drawn as pixels). A ball starts in a
  random column of the top row and falls one row per step; a paddle on the bottom row
  moves left, stays or moves right (actions 0, 1, 2). When the ball reaches the bottom
  row the episode ends with reward +1 if the paddle is under it, else -1 (and 0 on
  every other step). The observation is a uint8 image [rows * cell_size,
  columns * cell_size, 1]: ball and paddle 255, background 0. A random policy
  returns about -0.5 on the default 10 x 5 grid; the optimal one returns 1.
- 'tfrl/PixelCatchDict-v0': the same game with a Dict observation: 'image' (the ball
  only) and 'paddle' (float32 [1], the paddle's column scaled to [0, 1]), so a policy
  needs both keys.

Constructor keywords (through `gymnasium.make` or `tfrl.envs.make`): rows, columns,
cell_size (pixels per grid cell, default 2: a 20 x 10 image; 8 gives 80 x 40, which
the Nature CNN's 36-pixel minimum accepts).
"""
from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np

NAMESPACE = 'tfrl/'  # gymnasium's namespace of tfrl's ids
PIXEL_CATCH = 'tfrl/PixelCatch-v0'
PIXEL_CATCH_DICT = 'tfrl/PixelCatchDict-v0'

LEFT, STAY, RIGHT = 0, 1, 2


class PixelCatch(gym.Env):
  """Catch on a grid, seen as a uint8 image (see the module docstring)."""

  metadata = {'render_modes': ['rgb_array']}

  def __init__(self, rows: int = 10, columns: int = 5, cell_size: int = 2,
               dict_observation: bool = False, render_mode: Optional[str] = None):
    """Args:
      rows: grid rows; an episode lasts rows - 1 steps.
      columns: grid columns (the ball's and the paddle's).
      cell_size: pixels per grid cell, along both axes.
      dict_observation: observe {'image': ball only, 'paddle': column in [0, 1]}
        instead of one image with both.
      render_mode: None or 'rgb_array' (the image, as RGB).

    Raises:
      ValueError: fewer than 2 rows, 1 column or 1 pixel per cell.
    """
    if rows < 2 or columns < 1 or cell_size < 1:
      raise ValueError(f'PixelCatch needs rows >= 2, columns >= 1 and cell_size >= 1, got '
                       f'rows={rows}, columns={columns}, cell_size={cell_size}.')
    self._rows, self._columns, self._cell = rows, columns, cell_size
    self._dict = dict_observation
    self.render_mode = render_mode
    image = gym.spaces.Box(0, 255, (rows * cell_size, columns * cell_size, 1), np.uint8)
    if dict_observation:
      self.observation_space = gym.spaces.Dict({
          'image': image,
          'paddle': gym.spaces.Box(0.0, 1.0, (1,), np.float32)})
    else:
      self.observation_space = image
    self.action_space = gym.spaces.Discrete(3)
    self._ball_row = self._ball_column = self._paddle = 0

  def _image(self, with_paddle: bool) -> np.ndarray:
    grid = np.zeros((self._rows, self._columns), np.uint8)
    grid[self._ball_row, self._ball_column] = 255
    if with_paddle:
      grid[-1, self._paddle] = 255
    # Each grid cell becomes a cell_size x cell_size block of pixels.
    pixels = np.kron(grid, np.ones((self._cell, self._cell), np.uint8))
    return pixels[:, :, None]

  def _observation(self) -> Any:
    if not self._dict:
      return self._image(with_paddle=True)
    paddle = self._paddle / max(self._columns - 1, 1)
    return {'image': self._image(with_paddle=False),
            'paddle': np.array([paddle], np.float32)}

  def reset(self, *, seed: Optional[int] = None, options: Optional[Dict] = None
            ) -> Tuple[Any, Dict]:
    super().reset(seed=seed)
    self._ball_row = 0
    self._ball_column = int(self.np_random.integers(self._columns))
    self._paddle = self._columns // 2
    return self._observation(), {}

  def step(self, action) -> Tuple[Any, float, bool, bool, Dict]:
    move = int(action) - STAY  # -1, 0 or +1
    self._paddle = int(np.clip(self._paddle + move, 0, self._columns - 1))
    self._ball_row += 1
    terminated = self._ball_row == self._rows - 1
    reward = 0.0
    if terminated:
      reward = 1.0 if self._paddle == self._ball_column else -1.0
    return self._observation(), reward, terminated, False, {}

  def render(self) -> Optional[np.ndarray]:
    if self.render_mode != 'rgb_array':
      return None
    return np.repeat(self._image(with_paddle=True), 3, axis=-1)


def register() -> None:
  """Registers the toy envs with gymnasium (idempotent; `tfrl.envs` calls it when an id
  names one; call it before `gymnasium.make` of one)."""
  if PIXEL_CATCH not in gym.registry:
    gym.register(PIXEL_CATCH, entry_point='tfrl.envs.toy:PixelCatch')
  if PIXEL_CATCH_DICT not in gym.registry:
    gym.register(PIXEL_CATCH_DICT, entry_point='tfrl.envs.toy:PixelCatch',
                 kwargs={'dict_observation': True})

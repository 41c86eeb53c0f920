"""Checks each sub-environment's observations against its declared shapes.

A vector env copies every sub-env's observation into one preallocated batch, so an
observation whose shape changed mid-episode otherwise fails there as numpy's "could not
broadcast input array from shape (5,) into shape (4,)", naming no env. The check runs in
each sub-env (in a worker process too), where the env id and its index are known.
No TensorFlow here: worker processes import this module.
"""
import itertools
from typing import Optional

import gymnasium as gym
import numpy as np


class ObservationShapeError(ValueError):
  """An environment returned an observation of another shape than it declared."""


def _mismatch(space: gym.Space, observation, path: str = ''):
  """(path, expected shape, got shape) of the first Box leaf whose shape differs."""
  if isinstance(space, gym.spaces.Dict):
    for key, sub in space.spaces.items():
      found = _mismatch(sub, observation.get(key) if hasattr(observation, 'get') else None,
                        f'{path}/{key}' if path else key)
      if found:
        return found
    return None
  if isinstance(space, gym.spaces.Tuple):
    for i, sub in enumerate(space.spaces):
      found = _mismatch(sub, observation[i], f'{path}/{i}' if path else str(i))
      if found:
        return found
    return None
  if isinstance(space, gym.spaces.Box):
    shape = np.shape(observation)
    if tuple(shape) != tuple(space.shape):
      return path, tuple(space.shape), tuple(shape)
  return None


class _ShapeCheck(gym.Wrapper):
  """Raises ObservationShapeError when `reset` or `step` returns a mis-shaped
  observation (Box leaves, nested in Dict and Tuple spaces)."""

  def __init__(self, env: gym.Env, env_id: str, index: Optional[int]):
    super().__init__(env)
    self._env_id, self._index = env_id, index
    self._steps = 0  # steps since the last reset, for the message

  def _check(self, observation, when: str) -> None:
    found = _mismatch(self.observation_space, observation)
    if found:
      path, expected, got = found
      where = f'sub-env {self._index}' if self._index is not None else 'a sub-env'
      leaf = f' observation[{path!r}]' if path else ' observation'
      raise ObservationShapeError(
          f'Env {self._env_id!r} ({where}) returned an{leaf} of shape {got} {when}; '
          f'its observation space declares {expected}')

  def reset(self, **kwargs):
    observation, info = self.env.reset(**kwargs)
    self._steps = 0
    self._check(observation, 'at reset')
    return observation, info

  def step(self, action):
    observation, reward, terminated, truncated, info = self.env.step(action)
    self._steps += 1
    self._check(observation, f'at step {self._steps} of its episode')
    return observation, reward, terminated, truncated, info


class ShapeCheckWrappers:
  """A `gym.make_vec` wrapper that adds the check to each sub-env it is called on,
  numbering them from `first_index` in the order they are made (None: no index)."""

  def __init__(self, env_id: str, first_index: Optional[int] = 0):
    self._env_id = env_id
    self._indices = itertools.count(first_index) if first_index is not None else None

  def __call__(self, env: gym.Env) -> gym.Env:
    index = next(self._indices) if self._indices is not None else None
    return _ShapeCheck(env, self._env_id, index)

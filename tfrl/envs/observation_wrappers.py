"""Observation wrappers `tfrl.envs.make` applies to each sub-environment: keep some
entries of a flat Box (`observation_indices`), some keys of a Dict (`observation_keys`),
or stack the last frames (`frame_stack`)."""
from typing import Sequence

import gymnasium as gym
import numpy as np


def keep_observation_entries(env: gym.Env, indices: Sequence[int]) -> gym.Env:
  """Wraps `env` so its flat Box observation keeps only `indices`, in that order.

  Raises:
    ValueError: the observation is not a flat Box, or an index is out of range.
  """
  space = env.observation_space
  indices = [int(i) for i in indices]
  if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
    raise ValueError(f'observation_indices needs a flat Box observation, got {space}.')
  if not indices or min(indices) < -space.shape[0] or max(indices) >= space.shape[0]:
    raise ValueError(f'observation_indices {indices} do not index an observation of '
                     f'{space.shape[0]} entries.')
  kept = gym.spaces.Box(space.low[indices], space.high[indices], dtype=space.dtype)
  return gym.wrappers.TransformObservation(
      env, lambda observation: np.asarray(observation)[indices], kept)


def keep_observation_keys(env: gym.Env, keys: Sequence[str]) -> gym.Env:
  """Wraps `env` so its Dict observation keeps only `keys`.

  Raises:
    ValueError: the observation is not a Dict, or a key is not one of its keys.
  """
  space = env.observation_space
  if not isinstance(space, gym.spaces.Dict):
    raise ValueError(f'observation_keys needs a Dict observation, got {space}.')
  missing = [key for key in keys if key not in space.spaces]
  if missing or not keys:
    raise ValueError(f'observation_keys {list(keys)} are not keys of the observation; '
                     f'it has {list(space.spaces)}.')
  return gym.wrappers.FilterObservation(env, list(keys))


def stack_frames(env: gym.Env, num_frames: int) -> gym.Env:
  """Wraps `env` so it observes its last `num_frames` observations.

  gymnasium's FrameStackObservation stacks on a new leading axis ([k, H, W, C]; after a
  reset the stack is filled with the first observation); image observations are then
  moved channel-last, [H, W, k * C] (frame-major: frame i's channels are i * C to
  (i + 1) * C - 1, the newest frame last), the layout CNNs take. The dtype is kept:
  uint8 frames stay uint8, a quarter of float32's bytes in every buffer on the way.

  Args:
    env: an env with a Box observation.
    num_frames: frames per observation, >= 1.

  Returns:
    The wrapped env.

  Raises:
    ValueError: the observation is not a Box.
  """
  space = env.observation_space
  if not isinstance(space, gym.spaces.Box):
    raise ValueError(f'frame_stack needs a Box observation, got {space}.')
  stacked = gym.wrappers.FrameStackObservation(env, num_frames)
  if len(space.shape) not in (2, 3):
    return stacked  # vectors: [k, ...] as stacked, for an MLP that flattens anyway

  def channel_last(observation):
    # [k, H, W(, C)] -> [H, W, k(, C)] -> [H, W, k * C]: one copy, contiguous.
    moved = np.moveaxis(np.asarray(observation), 0, 2)
    return np.ascontiguousarray(moved.reshape(moved.shape[:2] + (-1,)))

  stacked_space = stacked.observation_space
  channel_last_space = gym.spaces.Box(channel_last(stacked_space.low),
                                      channel_last(stacked_space.high), dtype=space.dtype)
  return gym.wrappers.TransformObservation(stacked, channel_last, channel_last_space)

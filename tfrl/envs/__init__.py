"""gymnasium environments as batched tf-agents TimeStep environments.

    env = tfrl.envs.make('CartPole-v1', num_envs=64, seed=0)
    time_step = env.reset()          # TimeStep with arrays of shape [64, ...]
    time_step = env.step(actions)    # actions: [64] ints
"""
import difflib
from typing import Optional, Sequence

import gymnasium as gym
import numpy as np

from tfrl.envs.batched_env import BatchedEnv, NonFiniteEnvError, batched_spec
from tfrl.envs.specs import space_to_spec

__all__ = ['make', 'BatchedEnv', 'space_to_spec', 'batched_spec', 'UnknownEnvironmentError',
           'NonFiniteEnvError']


class UnknownEnvironmentError(ValueError):
  """Raised for an environment id that gymnasium has not registered."""


def _check_registered(env_id: str) -> None:
  if env_id in gym.registry:
    return
  close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=5, cutoff=0.5)
  hint = f' Close registered ids: {", ".join(close)}.' if close else (
      ' No registered id is close; see gymnasium.pprint_registry().')
  raise UnknownEnvironmentError(
      f'Unknown environment id {env_id!r}.{hint} (Ids of other packages need their '
      'import first, e.g. `import ale_py`.)')


def make(env_id: str,
         num_envs: int = 1,
         seed: Optional[int] = None,
         asynchronous: bool = False,
         vectorization_mode: Optional[str] = None,
         observation_indices: Optional[Sequence[int]] = None,
         **kwargs) -> BatchedEnv:
  """Makes a batched environment of `num_envs` copies of a registered gymnasium env.

  Args:
    env_id: a registered gymnasium id, e.g. 'CartPole-v1'.
    num_envs: how many sub-environments step together.
    seed: when given, the environment is reset once with it (sub-env i gets seed + i)
      so that the first `reset()` without a seed continues a reproducible stream.
    asynchronous: run sub-environments in worker processes
      (`gymnasium.vector.AsyncVectorEnv`), worth it for costly environments.
    vectorization_mode: overrides `asynchronous`: 'sync', 'async' or
      'vector_entry_point' (an environment's own vectorized implementation).
    observation_indices: keep only these entries of a flat Box observation, in this
      order (e.g. (0, 2): CartPole's cart position and pole angle, without the
      velocities, a partially observed task that needs memory).
    **kwargs: passed to the environment's constructor (e.g. `render_mode`).

  Returns:
    A `BatchedEnv`.

  Raises:
    UnknownEnvironmentError: if `env_id` is not registered (lists close ids).
    ValueError: if `num_envs` < 1, or observation_indices that do not index the
      environment's flat Box observation.
  """
  if num_envs < 1:
    raise ValueError(f'num_envs must be >= 1, got {num_envs}.')
  _check_registered(env_id)
  mode = vectorization_mode or ('async' if asynchronous else 'sync')
  wrappers = []
  if observation_indices is not None:
    wrappers.append(lambda env: keep_observation_entries(env, observation_indices))
  vector_env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode,
                            wrappers=wrappers, **kwargs)
  env = BatchedEnv(vector_env, env_id=env_id)
  if seed is not None:
    env.reset(seed=seed)
    # Later unseeded resets continue from here; also seed action-space sampling.
    vector_env.action_space.seed(seed)
  return env


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

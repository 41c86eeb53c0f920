"""A gymnasium vector environment seen as a stream of batched tf-agents TimeSteps.

gymnasium 1.x vector environments reset finished sub-environments on the *next* call to
`step` (AutoresetMode.NEXT_STEP): that call ignores the action it is given and returns
the first observation of the new episode. `BatchedEnv` turns exactly that call into a
FIRST time step, so the transition from a LAST to the following FIRST (a "boundary")
carries no experience: writers skip it (`Trajectory.is_boundary()`).

Ends of episodes follow the tf-agents convention learners rely on:
  - terminated (a true terminal state): LAST with discount 0;
  - truncated (a time limit): LAST with discount 1, so learners bootstrap from it.
"""
from typing import Any, Optional, Sequence, Union

import gymnasium as gym
import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl.envs import atari_wrappers
from tfrl.envs import specs as specs_lib
from tfrl.envs import worker_env

_FIRST = np.int32(ts.StepType.FIRST)
_MID = np.int32(ts.StepType.MID)
_LAST = np.int32(ts.StepType.LAST)
_NO_ACTION = object()  # no step started


class NonFiniteEnvError(ValueError):
  """An environment returned a NaN or infinite reward or float observation."""


def _first_bad_value(values: np.ndarray) -> str:
  """The first non-finite value in `values`, as text ('nan', 'inf' or '-inf')."""
  return str(values.flat[np.flatnonzero(~np.isfinite(values))[0]])


def _leaf_paths(nest, prefix: str = '') -> list:
  """'/'-joined key paths of the leaves of `nest`, in `tf.nest.flatten` order."""
  if not tf.nest.is_nested(nest):
    return [prefix]
  if isinstance(nest, dict):
    items = sorted(nest.items())  # tf.nest flattens dicts in sorted key order.
  elif hasattr(nest, '_fields'):
    items = zip(nest._fields, nest)
  else:
    items = enumerate(nest)
  return [path for key, value in items
          for path in _leaf_paths(value, f'{prefix}/{key}' if prefix else str(key))]


class BatchedEnv:
  """Batched `TimeStep` interface over a `gymnasium.vector.VectorEnv`.

  Every array returned has a leading dimension of `num_envs`. Specs describe one
  environment (no batch dimension), as tf-agents policies expect.

  Rewards and float observations are checked on every step and reset: a NaN or inf
  raises `NonFiniteEnvError` at its source, rather than surfacing later as a NaN loss
  far from the step that caused it. Integer observations (e.g. uint8 pixels) cannot
  hold either and are not checked.

  Made with game_scores (tfrl.envs.make's Atari options), `game_ends` holds after
  each step the games that ended at it, with their raw scores and lengths: a game can
  span several episodes (lives), and its rewards may be clipped in the time steps.
  """

  def __init__(self, vector_env: gym.vector.VectorEnv, env_id: Optional[str] = None,
               game_scores: bool = False):
    """Wraps `vector_env`.

    Args:
      vector_env: a gymnasium vector env using next-step autoreset (the default).
      env_id: the id it was made from, for messages.
      game_scores: its sub-envs report whole games' scores in their infos
        (`tfrl.envs.atari_wrappers.GameScore`): read them into `game_ends`.

    Raises:
      ValueError: if the vector env uses another autoreset mode.
    """
    mode = vector_env.metadata.get('autoreset_mode', gym.vector.AutoresetMode.NEXT_STEP)
    if mode != gym.vector.AutoresetMode.NEXT_STEP:
      raise ValueError(
          f'BatchedEnv needs a vector env with autoreset_mode=NEXT_STEP, got {mode}: other '
          'modes hide or overwrite the last observation of an episode.')
    self._env = vector_env
    self.env_id = env_id
    self.num_envs = int(vector_env.num_envs)
    self._observation_spec = specs_lib.space_to_spec(
        vector_env.single_observation_space, 'observation')
    self._action_spec = specs_lib.space_to_spec(vector_env.single_action_space, 'action')
    self._time_step_spec = ts.time_step_spec(
        self._observation_spec, tf.TensorSpec((), tf.float32, name='reward'))
    self._flat_obs_dtypes = [s.dtype.as_numpy_dtype
                             for s in tf.nest.flatten(self._observation_spec)]
    # Only float leaves can hold NaN or inf; integer ones (e.g. uint8 pixels, often the
    # largest) are never checked. (index, name) of each float leaf, for messages.
    paths = _leaf_paths(self._observation_spec)
    self._float_obs_leaves = [
        (i, f'observation[{path!r}]' if path else 'observation')
        for i, (path, dtype) in enumerate(zip(paths, self._flat_obs_dtypes))
        if np.issubdtype(dtype, np.floating)]
    # Vector steps since creation (resets excluded), for messages.
    self._vector_steps = 0
    # True for sub-envs whose last step ended an episode: their next step is a reset.
    self._episode_ended = np.zeros(self.num_envs, dtype=bool)
    self._zeros = np.zeros(self.num_envs, dtype=np.float32)
    self._ones = np.ones(self.num_envs, dtype=np.float32)
    self._pending_action = _NO_ACTION  # step_async's action until step_wait
    self._game_scores = game_scores
    # The games that ended at the last step (None: episodes are the games).
    self.game_ends: Optional[atari_wrappers.GameEnds] = None

  @property
  def vector_env(self) -> gym.vector.VectorEnv:
    """The wrapped gymnasium vector environment."""
    return self._env

  def observation_spec(self):
    return self._observation_spec

  def action_spec(self):
    return self._action_spec

  def time_step_spec(self) -> ts.TimeStep:
    return self._time_step_spec

  def _observation(self, obs, when: str) -> Any:
    flat = tf.nest.flatten(obs)
    flat = [np.asarray(x, dtype=d) for x, d in zip(flat, self._flat_obs_dtypes)]
    for index, name in self._float_obs_leaves:
      if not np.isfinite(flat[index]).all():  # One cheap check per leaf per step.
        self._raise_non_finite(name, flat[index], when)
    return tf.nest.pack_sequence_as(self._observation_spec, flat)

  def _raise_non_finite(self, what: str, values: np.ndarray, when: str) -> None:
    """Raises NonFiniteEnvError for `values` ([num_envs, ...]) naming where."""
    per_env = np.isfinite(values).reshape(self.num_envs, -1).all(axis=1)
    bad_envs = np.flatnonzero(~per_env)
    which = (f'sub-env {bad_envs[0]}' if bad_envs.size == 1 else
             'sub-envs ' + ', '.join(str(i) for i in bad_envs))
    env = f'Env {self.env_id!r}' if self.env_id else 'The environment'
    raise NonFiniteEnvError(
        f'{env} returned a non-finite {what} ({_first_bad_value(values)}) in {which} '
        f'{when}; check the environment (tfrl stops here rather than train on it).')

  def reset(self, seed: Optional[Union[int, Sequence[int]]] = None) -> ts.TimeStep:
    """Resets every sub-environment (after finishing a step `step_async` started).

    Args:
      seed: an int (sub-env i gets seed + i), a list with one seed per env, or None.

    Returns:
      A batched TimeStep whose step types are all FIRST.

    Raises:
      NonFiniteEnvError: a float observation holds NaN or inf.
    """
    if self._pending_action is not _NO_ACTION:
      self.step_wait()  # finish the step first (a worker answers every command)
    obs, _ = self._env.reset(seed=seed)
    self._episode_ended[:] = False
    return ts.TimeStep(
        step_type=np.full(self.num_envs, _FIRST, dtype=np.int32),
        reward=self._zeros.copy(),
        discount=self._ones.copy(),
        observation=self._observation(
            obs, f'at reset (after vector step {self._vector_steps})'))

  def step(self, action) -> ts.TimeStep:
    """Steps every sub-environment with a batch of actions.

    Sub-environments whose previous step was LAST ignore their action and return the
    FIRST step of a new episode (reward 0, discount 1).

    Args:
      action: a nest of arrays with leading dimension `num_envs`, matching `action_spec`.

    Returns:
      The batched TimeStep that follows.

    Raises:
      NonFiniteEnvError: the reward or a float observation holds NaN or inf.
    """
    self.step_async(action)
    return self.step_wait()

  def step_async(self, action) -> None:
    """Starts a step (see `step`); `step_wait` returns its TimeStep. Envs stepped in
    other processes (`tfrl.envs.make(num_workers=...)`, gymnasium's async vector env)
    step meanwhile; in-process ones step in `step_wait`."""
    if self._pending_action is not _NO_ACTION:
      raise RuntimeError('step_async called twice without step_wait in between.')
    if hasattr(self._env, 'step_async'):
      self._env.step_async(action)
      self._pending_action = None
    else:
      self._pending_action = action

  def step_wait(self) -> ts.TimeStep:
    """The TimeStep of the step `step_async` started (see `step`)."""
    action, self._pending_action = self._pending_action, _NO_ACTION
    if action is _NO_ACTION:
      raise RuntimeError('step_wait called without step_async.')
    if action is None:
      obs, reward, terminated, truncated, infos = self._env.step_wait()
    else:
      obs, reward, terminated, truncated, infos = self._env.step(action)
    if self._game_scores:
      self.game_ends = atari_wrappers.game_ends(infos, self.num_envs)
    self._vector_steps += 1
    first = self._episode_ended
    ended = np.logical_or(terminated, truncated)
    step_type = np.where(first, _FIRST, np.where(ended, _LAST, _MID)).astype(np.int32)
    # Checked as trained on: the reward of an autoreset (FIRST) step is dropped anyway.
    reward = np.where(first, 0.0, reward).astype(np.float32)
    when = f'at vector step {self._vector_steps}'
    if not np.isfinite(reward).all():
      self._raise_non_finite('reward', reward, when)
    discount = np.where(np.logical_and(terminated, ~first), 0.0, 1.0).astype(np.float32)
    self._episode_ended = np.logical_and(ended, ~first)
    return ts.TimeStep(step_type=step_type, reward=reward, discount=discount,
                       observation=self._observation(obs, when))

  def render(self):
    """Returns the frames of the sub-environments (needs `render_mode='rgb_array'`)."""
    return self._env.render()

  def close(self, timeout_s: Optional[float] = None):
    """Closes the envs; with workers (`make(num_workers=...)`), those still running
    after `timeout_s` (default 10 s) are killed."""
    workers = isinstance(getattr(self._env, 'unwrapped', self._env),
                         worker_env.WorkerVectorEnv)
    if timeout_s is not None and workers:
      self._env.close(timeout_s=timeout_s)
    else:
      self._env.close()

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.close()


def batched_spec(spec, batch_size: Optional[int]):
  """Returns `spec` (a nest) with a leading batch dimension added."""
  return tensor_spec.add_outer_dims_nest(spec, (batch_size,))

"""Sub-environments stepped in worker processes, a few groups of them per process.

gymnasium's AsyncVectorEnv runs one process per sub-environment: right for a handful of
costly envs, ruinous for 64 CartPoles (64 processes on 2 cores). `WorkerVectorEnv`
splits the envs over `num_workers` processes instead, each stepping its share as a
synchronous gymnasium vector env, so the stepping runs beside the policy and the
Reverb writer rather than between them: `tfrl.actors.Actor` hands the actions over
(`step_async`), writes the previous step while the workers step, then collects the
results (`step_wait`).

Each worker builds its envs from a picklable factory (workers are spawned, not forked:
forking a process that runs TensorFlow's threads is unsafe) and answers on a pipe. Its
sub-env i gets seed + offset + i, so the envs are those a synchronous vector env of all
of them would hold, seeded alike. An error in an env ends the job with that env's
traceback; every wait for a worker has a timeout that names it.
"""
import contextlib
import multiprocessing
import os
import sys
import time
import traceback
from typing import Any, Callable, List, Optional, Sequence, Union

import gymnasium as gym
import numpy as np

from tfrl import NO_TENSORFLOW_VARIABLE
from tfrl.envs import atari_wrappers

VectorEnvFactory = Callable[[int], gym.vector.VectorEnv]  # num_envs -> vector env
DEFAULT_TIMEOUT_S = 120.0


class WorkerError(RuntimeError):
  """A worker's environment raised (the message holds its traceback), or a worker
  died or did not answer in time."""


class EnvStepTimeoutError(WorkerError):
  """An env step took longer than its step timeout (a hung simulator)."""


def _worker(factory: VectorEnvFactory, num_envs: int, connection) -> None:
  """A worker's loop: build the envs, then answer commands until 'close'."""
  try:
    env = factory(num_envs)
    connection.send(('ok', (env.single_observation_space, env.single_action_space,
                            dict(env.metadata))))
  except Exception:  # pylint: disable=broad-except
    connection.send(('error', traceback.format_exc()))
    return
  try:
    while True:
      command, payload = connection.recv()
      if command == 'step':
        observation, reward, terminated, truncated, info = env.step(payload)
        # Of the infos, only whole games' scores travel (what BatchedEnv reads).
        games = {k: info[k] for k in atari_wrappers.GAME_INFO_KEYS if k in info}
        connection.send(('ok', (observation, reward, terminated, truncated, games)))
      elif command == 'reset':
        observation, _ = env.reset(seed=payload)
        connection.send(('ok', observation))
      elif command == 'close':
        break
  except (EOFError, KeyboardInterrupt):  # the parent went away, or Ctrl-C
    pass
  except Exception:  # pylint: disable=broad-except
    connection.send(('error', traceback.format_exc()))
  finally:
    env.close()


def _concatenate(parts: List[Any]) -> Any:
  """Joins the workers' batched results (nests of arrays) along the env axis."""
  first = parts[0]
  if len(parts) == 1:
    return first
  if isinstance(first, dict):
    return {key: _concatenate([p[key] for p in parts]) for key in first}
  if isinstance(first, tuple):
    return tuple(_concatenate([p[i] for p in parts]) for i in range(len(first)))
  return np.concatenate(parts, axis=0)


def _concatenate_infos(parts: List[dict], sizes: Sequence[int]) -> dict:
  """Joins the workers' infos (arrays over their envs); a key a worker lacks is zeros
  (False for gymnasium's '_key' masks) over its envs."""
  keys = {key: part[key] for part in parts for key in part}
  return {key: np.concatenate([
      part[key] if key in part else np.zeros(size, np.asarray(value).dtype)
      for part, size in zip(parts, sizes)]) for key, value in keys.items()}


def _split(actions: Any, sizes: Sequence[int]) -> List[Any]:
  """The workers' shares of a batch of actions (a nest of arrays)."""
  bounds = np.cumsum([0] + list(sizes))
  if isinstance(actions, dict):
    shares = {k: _split(v, sizes) for k, v in actions.items()}
    return [{k: shares[k][w] for k in actions} for w in range(len(sizes))]
  if isinstance(actions, tuple):
    shares = [_split(a, sizes) for a in actions]
    return [tuple(s[w] for s in shares) for w in range(len(sizes))]
  actions = np.asarray(actions)
  return [actions[bounds[w]:bounds[w + 1]] for w in range(len(sizes))]


_main_module_needed_by_workers = True


def main_module_defines_no_envs() -> None:
  """Declares that this process's `__main__` defines nothing an env worker needs.

  A spawned process imports its parent's main module first (a user's script may define
  the env class its workers build). tfrl's programs (`learners/processes/program.py`)
  define no env and import TensorFlow and the agents: seconds and hundreds of MB per
  worker. After this call, workers started here skip the main module.
  """
  global _main_module_needed_by_workers
  _main_module_needed_by_workers = False


@contextlib.contextmanager
def _main_module_hidden():
  """Within: multiprocessing's spawn finds no main module to import in the child (it
  reads `__main__.__spec__` and `__file__` as it starts each process)."""
  main = sys.modules.get('__main__')
  if _main_module_needed_by_workers or main is None:
    yield
    return
  saved = {name: main.__dict__[name] for name in ('__spec__', '__file__')
           if name in main.__dict__}
  main.__spec__ = None
  main.__dict__.pop('__file__', None)
  try:
    yield
  finally:
    main.__dict__.update(saved)


@contextlib.contextmanager
def spawned_without_tensorflow():
  """Within: processes started here (spawned) do not load TensorFlow.

  A spawned process inherits the environment: this tells its `import tfrl` to skip
  TensorFlow (seconds and hundreds of MB per process, for nothing an env uses); and a
  tfrl program's main module, which imports it, is not imported there
  (`main_module_defines_no_envs`).
  """
  previous = os.environ.get(NO_TENSORFLOW_VARIABLE)
  os.environ[NO_TENSORFLOW_VARIABLE] = '1'
  try:
    with _main_module_hidden():
      yield
  finally:
    if previous is None:
      del os.environ[NO_TENSORFLOW_VARIABLE]
    else:
      os.environ[NO_TENSORFLOW_VARIABLE] = previous


class WorkerVectorEnv(gym.vector.VectorEnv):
  """`num_envs` sub-environments in `num_workers` processes (see the module docstring).

  Next-step autoreset, like the synchronous vector env each worker runs; of `step`'s
  infos only whole games' scores (`tfrl.envs.atari_wrappers.GAME_INFO_KEYS`, which
  BatchedEnv reads) come back.
  """

  def __init__(self, factory: VectorEnvFactory, num_envs: int, num_workers: int = 1,
               timeout_s: float = DEFAULT_TIMEOUT_S, step_timeout_s: float = 0.0,
               env_id: str = ''):
    """Starts the workers and waits for their envs.

    Args:
      factory: builds a synchronous vector env of n sub-environments (picklable).
      num_envs: sub-environments in all.
      num_workers: processes; each gets num_envs // num_workers envs (the first ones
        one more where it does not divide).
      timeout_s: the longest any wait for a worker may take.
      step_timeout_s: the longest a step may take (0: timeout_s); past it the workers
        are killed and `step` raises EnvStepTimeoutError.
      env_id: the env's id, for that error.

    Raises:
      ValueError: num_workers below 1 or above num_envs.
      WorkerError: a worker could not build its envs (the message holds why).
    """
    if not 1 <= num_workers <= num_envs:
      raise ValueError(f'num_workers must be between 1 and num_envs ({num_envs}), got '
                       f'{num_workers}.')
    self.num_envs = num_envs
    self._timeout_s = timeout_s
    self._step_timeout_s, self._env_id = step_timeout_s, env_id
    base, extra = divmod(num_envs, num_workers)
    self._sizes = [base + (w < extra) for w in range(num_workers)]
    context = multiprocessing.get_context('spawn')
    self._connections, self._processes = [], []
    with spawned_without_tensorflow():
      for size in self._sizes:
        parent, child = context.Pipe()
        process = context.Process(target=_worker, args=(factory, size, child),
                                  daemon=True, name='tfrl-env-worker')
        process.start()
        child.close()
        self._connections.append(parent)
        self._processes.append(process)
    self._waiting = False
    try:
      spaces = self._receive_all('building its environments')
    except WorkerError:
      self.close()
      raise
    self.single_observation_space, self.single_action_space, self.metadata = spaces[0]
    self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                          num_envs)
    self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

  def _receive_all(self, doing: str) -> List[Any]:
    results = []
    stepping = doing == 'stepping' and self._step_timeout_s > 0
    for index, connection in enumerate(self._connections):
      if stepping and not connection.poll(self._step_timeout_s):
        # A blocked step never returns: kill the workers so nothing is left behind.
        for process in self._processes:
          process.kill()
          process.join(timeout=5)
        raise EnvStepTimeoutError(
            f'{self._env_id or "env"}: a step of env worker {index} took longer than the '
            f'env step timeout ({self._step_timeout_s:g} s); its workers were killed.')
      if not connection.poll(self._timeout_s):
        alive = self._processes[index].is_alive()
        raise WorkerError(
            f'Env worker {index} ({"alive" if alive else "dead, exit code "}'
            f'{"" if alive else self._processes[index].exitcode}) did not answer within '
            f'{self._timeout_s:.0f} s while {doing}.')
      try:
        status, payload = connection.recv()
      except EOFError as e:
        raise WorkerError(f'Env worker {index} died while {doing} (exit code '
                          f'{self._processes[index].exitcode}).') from e
      if status == 'error':
        raise WorkerError(f'Env worker {index} failed while {doing}:\n{payload}')
      results.append(payload)
    return results

  def reset(self, *, seed: Optional[Union[int, Sequence[int]]] = None,
            options: Optional[dict] = None):
    """Resets every sub-environment; an int seed gives sub-env i seed + i."""
    del options
    if isinstance(seed, int):
      seed = [seed + i for i in range(self.num_envs)]
    offsets = np.cumsum([0] + self._sizes)
    for w, connection in enumerate(self._connections):
      connection.send(('reset', None if seed is None else
                       list(seed[offsets[w]:offsets[w + 1]])))
    return _concatenate(self._receive_all('resetting')), {}

  def step_async(self, actions) -> None:
    """Sends each worker its share of `actions`; `step_wait` returns the results."""
    for connection, share in zip(self._connections, _split(actions, self._sizes)):
      connection.send(('step', share))
    self._waiting = True

  def step_wait(self):
    """(observation, reward, terminated, truncated, infos) of the step `step_async`
    sent; infos hold only whole games' scores."""
    self._waiting = False
    results = self._receive_all('stepping')
    observation = _concatenate([r[0] for r in results])
    reward, terminated, truncated = (np.concatenate([r[i] for r in results])
                                     for i in (1, 2, 3))
    return (observation, reward, terminated, truncated,
            _concatenate_infos([r[4] for r in results], self._sizes))

  def step(self, actions):
    self.step_async(actions)
    return self.step_wait()

  def close_extras(self, timeout_s: float = 10.0, **kwargs) -> None:
    """Asks every worker to close its envs and exit; kills those still running after
    `timeout_s` in all (a stopping program has seconds, and a worker holds nothing that
    must be saved)."""
    del kwargs
    for connection in self._connections:
      try:
        connection.send(('close', None))
      except (BrokenPipeError, OSError):
        pass
    deadline = time.monotonic() + timeout_s
    for process in self._processes:
      process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in self._processes:
      if process.is_alive():
        process.kill()
        process.join(timeout=5)
    for connection in self._connections:
      connection.close()

"""A step timeout for environments stepped in this process.

A Python env blocked inside step() (a deadlocked simulator) cannot be interrupted from
another thread. `TimedVectorEnv` therefore arms a timer around every step; when a step
outlasts `step_timeout_s` the timer calls `on_timeout` with an EnvStepTimeoutError.
The default, `exit_on_timeout`, prints the error on one line and ends the process with
STEP_TIMEOUT_EXIT_STATUS (`tfrl.exit_statuses.EXIT_STALLED`): nothing later in the
program could run anyway while the step holds its thread. Envs in worker processes
(tfrl.envs.worker_env) are timed out on the pipe wait instead, and raise.
"""
import os
import sys
import threading
import time
from typing import Callable, Optional

import gymnasium as gym

from tfrl import exit_statuses
from tfrl.envs.worker_env import EnvStepTimeoutError

STEP_TIMEOUT_EXIT_STATUS = exit_statuses.EXIT_STALLED


def exit_on_timeout(error: EnvStepTimeoutError) -> None:
  """Prints `error` as one line on stderr and ends the process (status 5)."""
  sys.stderr.write(f'error: EnvStepTimeoutError: {error}\n')
  sys.stderr.flush()
  os._exit(STEP_TIMEOUT_EXIT_STATUS)  # pylint: disable=protected-access


class TimedVectorEnv(gym.vector.VectorWrapper):
  """Calls `on_timeout` when a step of the wrapped vector env outlasts the timeout."""

  def __init__(self, env: gym.vector.VectorEnv, env_id: str, step_timeout_s: float,
               on_timeout: Optional[Callable[[EnvStepTimeoutError], None]] = None):
    """Args:
      env: the in-process vector env.
      env_id: its id, for the error.
      step_timeout_s: the longest a step may take (> 0).
      on_timeout: called from the timer thread with the error; default
        `exit_on_timeout`.

    Raises:
      ValueError: step_timeout_s not above 0.
    """
    if not step_timeout_s > 0:
      raise ValueError(f'step_timeout_s must be > 0, got {step_timeout_s!r}.')
    super().__init__(env)
    self._env_id, self._timeout_s = env_id, step_timeout_s
    self._on_timeout = on_timeout or exit_on_timeout
    # One watcher thread for the env's life, not a timer per step: a thread start costs
    # about as much as a whole CartPole vector step. A step only writes its start time.
    self._step_started: Optional[float] = None
    self._closed = threading.Event()
    self._watcher = threading.Thread(target=self._watch, name=f'step watchdog {env_id}',
                                     daemon=True)
    self._watcher.start()

  def _watch(self) -> None:
    poll_s = min(1.0, self._timeout_s / 4)
    while not self._closed.wait(poll_s):
      started = self._step_started
      if started is not None and time.monotonic() - started > self._timeout_s:
        self._expired()
        return

  def _expired(self) -> None:
    self._on_timeout(EnvStepTimeoutError(
        f'{self._env_id}: an env step took longer than the env step timeout '
        f'({self._timeout_s:g} s) in this process.'))

  def step(self, actions):
    self._step_started = time.monotonic()
    try:
      return self.env.step(actions)
    finally:
      self._step_started = None

  def close(self, **kwargs):
    self._closed.set()
    return self.env.close(**kwargs)


class TimedAsyncVectorEnv(TimedVectorEnv):
  """`TimedVectorEnv` for a vector env that steps asynchronously (step_async /
  step_wait: gymnasium's AsyncVectorEnv, EnvPool). The timer runs during the wait
  only: what the caller does between send and wait (a Reverb writer that a rate
  limiter holds back) is not the env's time."""

  def step_async(self, actions) -> None:
    self.env.step_async(actions)

  def step_wait(self, **kwargs):
    self._step_started = time.monotonic()
    try:
      return self.env.step_wait(**kwargs)
    finally:
      self._step_started = None


def timed_vector_env(env: gym.vector.VectorEnv, env_id: str, step_timeout_s: float,
                     on_timeout: Optional[Callable[[EnvStepTimeoutError], None]] = None
                    ) -> TimedVectorEnv:
  """`env` under a step timeout (see `TimedVectorEnv`), keeping its asynchronous
  stepping where it has one.

  Raises:
    ValueError: step_timeout_s not above 0.
  """
  timed = TimedAsyncVectorEnv if hasattr(env, 'step_async') else TimedVectorEnv
  return timed(env, env_id, step_timeout_s, on_timeout)

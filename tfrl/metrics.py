"""Episode and throughput metrics computed on batched steps, vectorized over envs, and
the summary writers tfrl's components write them with."""
import collections
import contextlib
import time
from typing import Any, Dict, Iterator, Optional
import weakref

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

_FIRST = ts.StepType.FIRST
_LAST = ts.StepType.LAST


_SUMMARY_WRITERS = weakref.WeakSet()


def create_summary_writer(logdir: str, **kwargs) -> tf.summary.SummaryWriter:
  """`tf.summary.create_file_writer(logdir, **kwargs)`, remembered so that
  `flush_summary_writers` reaches it: a program that ends with `os._exit` (see
  learners/processes/process.py) skips the destructors that would otherwise flush
  what is still buffered."""
  writer = tf.summary.create_file_writer(logdir, **kwargs)
  _SUMMARY_WRITERS.add(writer)
  return writer


def flush_summary_writers() -> None:
  """Flushes every writer `create_summary_writer` made that is still alive."""
  for writer in list(_SUMMARY_WRITERS):
    writer.flush()


def format_return(value: float) -> str:
  """A return for progress lines: 0.1 resolution where returns are large (CartPole's
  475.4), three decimals below 10 (MiniGrid's 0.961, which '%.1f' would print as 1.0
  and a log reader would take for a target of 0.9 reached where 0.85 was)."""
  return f'{value:.3f}' if abs(value) < 10 else f'{value:.1f}'


class EpisodeStats:
  """Running returns and lengths for N envs; averages over the last `window` episodes."""

  def __init__(self, num_envs: int, window: int = 100):
    """Args:
      num_envs: the batch size of the steps to come.
      window: how many finished episodes the averages cover.
    """
    self._returns = np.zeros(num_envs, dtype=np.float64)
    self._lengths = np.zeros(num_envs, dtype=np.int64)
    self._finished_returns = collections.deque(maxlen=window)
    self._finished_lengths = collections.deque(maxlen=window)
    self.env_steps = 0
    self.episodes = 0

  def update(self, time_step: ts.TimeStep, next_time_step: ts.TimeStep,
             game_ends: Optional[Any] = None) -> None:
    """Accounts for one batched transition; boundary (LAST -> FIRST) steps are free.

    Args:
      time_step, next_time_step: the transition.
      game_ends: the env's `BatchedEnv.game_ends` for this step, where it reports
        whole games (Atari with life losses or clipped rewards): the episodes counted
        are then those games, with their raw returns, not the time steps' episodes.
    """
    real = next_time_step.step_type != _FIRST
    self._returns += np.where(real, next_time_step.reward, 0.0)
    self._lengths += real
    self.env_steps += int(np.count_nonzero(real))
    ended = np.flatnonzero(next_time_step.step_type == _LAST)
    returns, lengths = self._returns[ended], self._lengths[ended]
    self._returns[ended] = 0.0
    self._lengths[ended] = 0
    if game_ends is not None:
      ended = np.flatnonzero(game_ends.ended)
      returns, lengths = game_ends.returns[ended], game_ends.lengths[ended]
    if ended.size:
      self._finished_returns.extend(returns.tolist())
      self._finished_lengths.extend(lengths.tolist())
      self.episodes += int(ended.size)

  def reset_running(self) -> None:
    """Drops the returns and lengths of the episodes in progress.

    For when the envs were reset mid-episode (e.g. an actor reconnecting): those
    episodes never end, and without this their partial sums would be added to the first
    episode reported after the reset. Finished episodes and step counts are kept.
    """
    self._returns[:] = 0.0
    self._lengths[:] = 0

  def average_return(self) -> float:
    """Mean return of the last finished episodes (NaN before the first ends)."""
    return float(np.mean(self._finished_returns)) if self._finished_returns else float('nan')

  def average_length(self) -> float:
    return float(np.mean(self._finished_lengths)) if self._finished_lengths else float('nan')

  def result(self) -> Dict[str, float]:
    return {
        'AverageReturn': self.average_return(),
        'AverageEpisodeLength': self.average_length(),
        'EnvironmentSteps': float(self.env_steps),
        'NumberOfEpisodes': float(self.episodes),
    }


class Throughput:
  """Counts per second: tfrl's one rate helper (env steps/s, train steps/s).

  Two views of the same counter: `rate(count)` over the wall-clock interval since the
  previous call, and `active_rate(count)` over the seconds spent inside `with
  throughput.timing():` blocks (e.g. a loop's collection phase alone).
  """

  def __init__(self):
    self._last_time = time.perf_counter()
    self._last_count = 0
    self.active_seconds = 0.0

  def rate(self, count: float) -> float:
    """Returns (count - previous count) / elapsed seconds, and starts a new interval."""
    now = time.perf_counter()
    elapsed = max(now - self._last_time, 1e-9)
    value = (count - self._last_count) / elapsed
    self._last_time, self._last_count = now, count
    return value

  @contextlib.contextmanager
  def timing(self) -> Iterator[None]:
    """Adds the seconds spent inside the block to `active_seconds`."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self.active_seconds += time.perf_counter() - start

  def active_rate(self, count: float) -> float:
    """count / the seconds spent inside `timing()` blocks (NaN before any)."""
    return count / self.active_seconds if self.active_seconds else float('nan')

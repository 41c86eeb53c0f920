"""The launcher's status line: a job's progress read from its Reverb server."""
import math
from typing import Callable, Dict, List, Optional, Tuple

import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import reverb

from tfrl import metrics
from tfrl import replay
from tfrl.layouts import base as layouts


class StatusReader:
  """Reads alive/exit code per process, env steps/s, train steps/s and the last eval
  return; the rates are per second since the previous status that had the counter."""

  def __init__(self, layout: 'layouts.Layout', offline: bool = False):
    """Args:
      layout: the job's data layout (which table counts env steps, and how many each
        item holds).
      offline: the job collects nothing (its table's inserts are a dataset's rows):
        env steps stay 0.
    """
    self._layout = layout
    self._offline = offline
    # Rates between status lines; a counter the server cannot tell now is skipped.
    self._env_steps_rate, self._train_steps_rate = metrics.Throughput(), metrics.Throughput()
    self._counted = {'env_steps': False, 'train_step': False}

  def read(self, address: str, processes: Dict[str, object],
           eval_results: Callable[[], List[dict]]) -> dict:
    """The status of the job whose server is at `address`.

    Args:
      address: 'host:port' of the job's Reverb server.
      processes: name -> its process (`poll()` gives its exit status, or None).
      eval_results: returns the evaluator's results so far.

    Returns:
      dict with processes (name -> 'alive' or 'exited(<status>)'), env_steps,
      train_step (None where the server cannot tell now), env_steps_per_s,
      train_steps_per_s (NaN the first time), last_eval_return and, with tasks,
      last_task_returns (task name -> its return in that evaluation).
    """
    env_steps, train_step = self._counters(address)
    status = {'processes': {name: ('alive' if p.poll() is None else f'exited({p.poll()})')
                            for name, p in processes.items()},
              'env_steps': env_steps, 'train_step': train_step,
              'env_steps_per_s': self._rate('env_steps', env_steps, self._env_steps_rate),
              'train_steps_per_s': self._rate('train_step', train_step,
                                              self._train_steps_rate)}
    results = eval_results()
    status['last_eval_return'] = results[-1]['return'] if results else float('nan')
    # With Experiment.tasks (the return is their mean): each task's, by name.
    status['last_task_returns'] = results[-1].get('task_returns', {}) if results else {}
    return status

  def _rate(self, name: str, count: Optional[int], throughput: metrics.Throughput
            ) -> float:
    """count/s since the last status that had this count (NaN the first time)."""
    if count is None:
      return float('nan')
    rate = throughput.rate(count)
    first, self._counted[name] = not self._counted[name], True
    return float('nan') if first else rate

  def _counters(self, address: str) -> Tuple[Optional[int], Optional[int]]:
    """(env steps, train step) from the server; None for what it cannot tell now."""
    try:
      info = replay.wait_for_server(address, timeout_s=2)
      items = int(info[self._layout.experience_table].rate_limiter_info
                  .insert_stats.completed)
      train_step = None
      if info[replay.VARIABLES_TABLE].current_size:  # else sampling would wait for a push
        sample = replay.call_with_timeout(
            lambda: next(reverb.Client(address).sample(
                replay.VARIABLES_TABLE, num_samples=1, emit_timesteps=False,
                unpack_as_table_signature=True)),
            2.0, f'a sample of the variables table at {address}')
        train_step = int(sample.data['train_step'])
      env_steps = 0 if self._offline else items * self._layout.env_steps_per_item
      return env_steps, train_step
    except replay.ReplayServerUnreachableError:
      return None, None  # server busy or restarting: the next status will tell


def format_status(status: dict) -> str:
  """One status line from `StatusReader.read`'s dict."""
  alive = ' '.join(f'{name}:{state}' for name, state in status['processes'].items())
  rate = lambda value: f' ({value:.0f}/s)' if math.isfinite(value) else ''
  # What is not known yet (no rate before two readings, no train step before the first
  # push, no evaluation) is left out, not printed as nan or None.
  fields = [f'env steps {status["env_steps"]}{rate(status["env_steps_per_s"])}']
  if status['train_step'] is not None:
    fields.append(f'train step {status["train_step"]}{rate(status["train_steps_per_s"])}')
  if math.isfinite(status['last_eval_return']):
    fields.append(f'last eval return {metrics.format_return(status["last_eval_return"])}')
    fields.extend(f'{name} {metrics.format_return(value)}'
                  for name, value in status.get('last_task_returns', {}).items())
  return f'[{alive}] ' + ' | '.join(fields)

"""A tqdm progress bar for a training job: the CLI's on a terminal, a notebook's widget.

It advances with every iteration (train steps, or seconds when the job has a
wall-clock budget) and shows the ETA, env steps per second and the last evaluation's
return. While it is open, tfrl's progress lines are printed above it (`tqdm.write`)
instead of through it.
"""
import math
import sys
from typing import Any, Dict, Optional

from tfrl import logs
from tfrl import metrics


class ProgressBar:
  """`update(row)` takes train_eval's progress rows (its `on_progress`)."""

  def __init__(self, total_steps: int, start_step: int = 0,
               budget_seconds: Optional[float] = None, desc: str = 'training',
               file=None):
    """Args:
      total_steps: the job's last train step.
      start_step: the step it starts from (a resumed job's).
      budget_seconds: a wall-clock budget: the bar then counts seconds of it.
      desc: the bar's label.
      file: where the bar goes (default: stderr, or a widget in a notebook).
    """
    from tqdm import auto as tqdm_auto  # pylint: disable=g-import-not-at-top
    self._by_time = budget_seconds is not None
    total = budget_seconds if self._by_time else total_steps
    self._bar = tqdm_auto.tqdm(
        total=total, initial=0 if self._by_time else start_step, desc=desc,
        unit='s' if self._by_time else 'step', dynamic_ncols=True, file=file,
        bar_format=('{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s '
                    '[{elapsed}<{remaining}{postfix}]') if self._by_time else None)
    self._last_eval = float('nan')
    logs.set_line_writer(lambda line: self._bar.write(line, file=file or sys.stderr))

  def advance(self, train_step: int, seconds: float) -> None:
    """Moves the bar to `train_step` (or `seconds` of the budget)."""
    position = min(seconds, self._bar.total) if self._by_time else train_step
    if position > self._bar.n:
      self._bar.update(position - self._bar.n)

  def update(self, row: Dict[str, Any]) -> None:
    """A progress row: moves the bar and refreshes env steps/s and the eval return."""
    if row.get('eval_return') is not None:
      self._last_eval = row['eval_return']
    self.advance(row['train_step'], row['seconds'])
    rate = row['env_steps_per_s']
    parts = [f"env steps {row['env_steps']:,}" +
             (f' ({rate:,.0f}/s)' if math.isfinite(rate) else '')]
    if math.isfinite(self._last_eval):  # none before the first evaluation
      parts.append(f'eval return {metrics.format_return(self._last_eval)}')
    self._bar.set_postfix_str(' | '.join(parts), refresh=True)

  def close(self) -> None:
    logs.set_line_writer(None)
    self._bar.close()

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.close()

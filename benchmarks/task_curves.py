"""Per-task learning curves: what task_sequence.py and multi_task.py draw from their runs'
evaluations (each row's 'env_steps' and 'task_returns'), one panel per task, and what a
task sequence's curves say each task reached while it was the one trained."""
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

COLORS = ('tab:blue', 'tab:orange', 'tab:green', 'tab:red')


def plot(runs: Mapping[str, List[List[Dict[str, Any]]]], names: Sequence[str], path: str,
         switches: Sequence[int] = (),
         thresholds: Optional[Mapping[str, float]] = None) -> None:
  """Draws each task's return against env steps to `path` (a PNG).

  Args:
    runs: label (an algorithm, a way of running) -> its runs, each a list of
      evaluation rows; one colour per label, every run drawn faintly.
    names: the tasks, one panel each.
    path: the PNG to write (its directory is created).
    switches: env steps where a sequence changed task, drawn dashed.
    thresholds: task name -> a target return, drawn dotted.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.5), sharey=True)
  axes = np.atleast_1d(axes)
  for axis, name in zip(axes, names):
    for color, (label, label_runs) in zip(COLORS, runs.items()):
      for i, history in enumerate(label_runs):
        axis.plot([row['env_steps'] for row in history],
                  [row['task_returns'][name] for row in history], color=color,
                  alpha=0.6, label=label if i == 0 else None)
    for step in switches:
      axis.axvline(step, color='grey', linestyle='--', linewidth=0.8)
    if thresholds and name in thresholds:
      axis.axhline(thresholds[name], color='black', linestyle=':', linewidth=0.8)
    axis.set_title(name, fontsize=9)
    axis.set_xlabel('env steps')
  axes[0].set_ylabel('eval return')
  axes[0].legend()
  figure.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  figure.savefig(path, dpi=90)
  print(f'Curves: {path}')


def learned_returns(run: Mapping[str, Any]) -> Dict[str, float]:
  """Each task's best return at the evaluations inside its own first phase.

  Args:
    run: a task sequence's tasks.json: 'switches' ([env steps, task name] where each
      phase starts) and 'history' (evaluation rows).

  Returns:
    Task name -> its best return while it was trained; NaN where no evaluation fell
    inside its phase.
  """
  switches = [(int(step), name) for step, name in run['switches']]
  ends = [step for step, _ in switches[1:]] + [float('inf')]
  learned = {}
  for (start, name), end in zip(switches, ends):
    inside = [row['task_returns'][name] for row in run['history']
              if start < row['env_steps'] <= end]
    learned.setdefault(name, max(inside) if inside else float('nan'))
  return learned

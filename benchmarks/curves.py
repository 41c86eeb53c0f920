"""Learning-curve PNGs for the benchmarks: evaluation return against env steps and
against wall-clock seconds, one line per seed, tfrl and its peer side by side."""
from typing import Dict, List, Optional, Sequence

# (env steps, seconds, eval return) per evaluation of one run.
Curve = Sequence[Sequence[float]]

_COLORS = {'tfrl': 'tab:blue', 'SB3': 'tab:orange'}


def plot(path: str, title: str, curves: Dict[str, List[Curve]],
         threshold: Optional[float] = None, y_label: str = 'eval return') -> str:
  """Writes one PNG with two panels (return vs env steps, return vs seconds).

  Args:
    path: the PNG to write.
    title: the figure's title (the task, the configs compared).
    curves: side ('tfrl', 'SB3') -> one curve per seed.
    threshold: drawn as a dashed line when given.
    y_label: what the returns are (an evaluation's, or the training episodes').

  Returns:
    `path`.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axes = plt.subplots(1, 2, figsize=(11, 4))
  for axis, column, label in ((axes[0], 0, 'env steps'), (axes[1], 1, 'seconds')):
    for side, runs in curves.items():
      for seed, curve in enumerate(runs):
        if not curve:
          continue
        xs = [point[column] for point in curve]
        ys = [point[2] for point in curve]
        axis.plot(xs, ys, color=_COLORS.get(side), alpha=0.8, marker='.',
                  label=side if seed == 0 else None)
    if threshold is not None:
      axis.axhline(threshold, color='gray', linestyle='--', linewidth=1, label='threshold')
    axis.set_xlabel(label)
    axis.set_ylabel(y_label)
    axis.grid(alpha=0.3)
    axis.legend()
  figure.suptitle(title)
  figure.tight_layout()
  figure.savefig(path, dpi=90)
  plt.close(figure)
  return path

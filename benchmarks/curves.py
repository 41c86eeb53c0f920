"""Learning-curve PNGs for the benchmarks: per task, the return against env steps and
against wall-clock seconds in two panels side by side; per side (tfrl, its peer) the
central value over seeds (median or IQM) with its bootstrap confidence band shaded, and
each seed's own curve faint beneath.

Seeds evaluate at different env steps and, above all, at different seconds, so each
side's curves are put on one grid first (`on_grid`): each seed's returns interpolated
linearly between its evaluations, and held at its last evaluation once the run has
ended (a run that reached its target stops there; one that ran out of budget keeps its
final return). The grid spans from the latest first evaluation of the side's seeds (so
every seed has a value everywhere) to the latest last one.
"""
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import stats  # benchmarks/stats.py

# (env steps, seconds, eval return) per evaluation of one run.
Curve = Sequence[Sequence[float]]

_COLORS = {'tfrl': 'tab:blue', 'SB3': 'tab:orange'}
GRID_POINTS = 100


def on_grid(curves: List[Curve], column: int,
            points: int = GRID_POINTS) -> Optional[Tuple[np.ndarray, np.ndarray]]:
  """The seeds' returns on one grid of env steps (column 0) or seconds (column 1).

  Args:
    curves: one curve per seed; empty curves, and points whose return is NaN, are
      left out.
    column: 0 (env steps) or 1 (seconds): the x axis.
    points: the grid's size.

  Returns:
    (grid of shape [points], returns of shape [seeds, points]); None where no seed
    has a point.
  """
  # A point without a return (a progress line before any training episode ended has
  # none: NaN) is left out; a curve left with no point is left out whole.
  curves = [curve[np.isfinite(curve[:, 2])] for curve in
            (np.asarray(c, dtype=float).reshape(-1, 3) for c in curves)]
  curves = [curve for curve in curves if len(curve)]
  if not curves:
    return None
  start = max(curve[0, column] for curve in curves)
  end = max(curve[-1, column] for curve in curves)
  grid = np.linspace(start, end, points)
  # np.interp holds the last value past a curve's end (its `right` default).
  return grid, np.stack([np.interp(grid, curve[:, column], curve[:, 2])
                         for curve in curves])


def _save(figure, title: str, path: str) -> None:
  """Titles `figure`, lays it out and writes it to `path`."""
  figure.suptitle(title)
  figure.tight_layout()
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  figure.savefig(path, dpi=90)


def plot(path: str, title: str, curves: Dict[str, List[Curve]],
         threshold: Optional[float] = None, y_label: str = 'eval return',
         statistic: str = stats.STATISTIC, confidence: float = stats.CONFIDENCE,
         resamples: int = stats.RESAMPLES, seed: int = stats.SEED,
         step_label: str = 'env steps', threshold_label: str = 'threshold') -> str:
  """Writes one PNG with two panels: the return against env steps, and against seconds.

  Args:
    path: the PNG to write.
    title: the figure's title (the task, the configs compared).
    curves: side ('tfrl', 'SB3') -> one curve per seed.
    threshold: drawn as a dashed line when given.
    y_label: what the returns are (an evaluation's, or the training episodes').
    statistic: the central value over seeds, 'median' or 'iqm' (stats.py).
    confidence, resamples, seed: the band's bootstrap (stats.bootstrap).
    step_label: what the curves' first column counts (env steps; an offline run's
      gradient steps).
    threshold_label: the threshold's legend entry.

  Returns:
    `path`.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
  try:
    central = stats.NAMES.get(statistic, statistic)
    for axis, column, label in ((axes[0], 0, step_label), (axes[1], 1, 'seconds')):
      for index, (side, runs) in enumerate(curves.items()):
        gridded = on_grid(runs, column)
        if gridded is None:
          continue
        grid, returns = gridded
        color = _COLORS.get(side, f'C{index % 10}')  # one colour per side, every panel
        for curve in runs:
          if len(curve):
            axis.plot([p[column] for p in curve], [p[2] for p in curve], color=color,
                      alpha=0.25, linewidth=0.7)
        point, low, high = stats.bootstrap(returns, statistic, confidence, resamples,
                                           seed)
        axis.plot(grid, point, color=color, linewidth=2,
                  label=f'{side}: {central} of {len(returns)} seeds')
        axis.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0,
                          label=f'{side}: {confidence:.0%} CI')
      if threshold is not None:
        axis.axhline(threshold, color='gray', linestyle='--', linewidth=1,
                     label=threshold_label)
      axis.set_xlabel(label)
      axis.set_ylabel(y_label)
      axis.grid(alpha=0.3)
      axis.legend(fontsize='small')
    _save(figure, title, path)
  finally:
    plt.close(figure)
  return path


def plot_profiles(path: str, title: str, panels: Sequence[Dict[str, object]],
                  confidence: float = stats.CONFIDENCE, resamples: int = stats.RESAMPLES,
                  seed: int = stats.SEED, points: int = 200) -> str:
  """Writes one PNG of performance profiles (rliable's score distributions), a panel per
  measure: for each side, the fraction of its runs whose value is better than x, with
  its bootstrap band (stats.performance_profile).

  Args:
    path: the PNG to write.
    title: the figure's title.
    panels: per measure, {'label': its name, 'higher_is_better': its direction,
      'sides': side -> one value per run}; a run that never reached a target counts as
      infinite (never within any x).
    confidence, resamples, seed: the bands' bootstrap.
    points: thresholds per panel, evenly spaced over the finite values.

  Returns:
    `path`.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
  try:
    for axis, panel in zip(axes[0], panels):
      higher = panel['higher_is_better']
      finite = [v for values in panel['sides'].values() for v in values if np.isfinite(v)]
      if not finite:
        continue
      low_end, high_end = min(finite), max(finite)
      margin = 0.05 * (high_end - low_end or abs(high_end) or 1.0)
      grid = np.linspace(low_end - margin, high_end + margin, points)
      for index, (side, values) in enumerate(panel['sides'].items()):
        color = _COLORS.get(side, f'C{index % 10}')
        # Lower is better: the fraction of runs below x, as the profile of -values.
        sign = 1.0 if higher else -1.0
        profile = stats.performance_profile(sign * np.asarray(values, dtype=float),
                                            sign * grid, confidence, resamples, seed)
        axis.plot(grid, profile.fraction, color=color, linewidth=2, drawstyle='steps-post',
                  label=f'{side}: {len(values)} runs')
        axis.fill_between(grid, profile.low, profile.high, color=color, alpha=0.2,
                          linewidth=0, step='post', label=f'{side}: {confidence:.0%} CI')
      axis.set_xlabel(panel['label'])
      axis.set_ylabel('fraction of runs ' + ('above x' if higher else 'within x'))
      axis.set_ylim(-0.03, 1.03)
      axis.grid(alpha=0.3)
      axis.legend(fontsize='small')
    _save(figure, title, path)
  finally:
    plt.close(figure)
  return path

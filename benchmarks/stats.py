"""Statistics over seeds for the benchmarks: median and IQM with bootstrap intervals.

Follows Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice" (the
rliable library), with numpy only:

- IQM, the interquartile mean: the mean of the runs left after cutting
  `int(0.25 * n)` from each end of the sorted values (scipy.stats.trim_mean with
  proportiontocut 0.25, which rliable calls). So with 3 seeds nothing is cut (the IQM is
  the mean); with 4 or 5 seeds one run is cut from each end.
- Intervals: percentile bootstrap. Each resample draws n seeds with replacement from
  the n measured; the interval is the central `confidence` share of the statistic over
  `resamples` resamples (rliable: StratifiedBootstrap, method 'percentile'; one task is
  one stratum, so stratified and plain resampling coincide here). The generator is
  seeded, so a table re-drawn from the same runs gives the same intervals.
- Comparisons of tfrl with a peer (`compare`): the ratio or the difference of the two
  sides' statistics, each side resampled on its own (rliable's
  StratifiedIndependentBootstrap). The seeds do not pair runs (seed 0 of tfrl and seed 0
  of SB3 share no random stream), so the two samples are independent.
- Curves: one resample of seeds serves every point of a curve (rliable's sample
  efficiency curves resample runs the same way).
- Resamples: 10,000 by default (rliable's default is 50,000; with 3-10 seeds the
  interval's ends move by well under a percent between the two).

Infinite values are allowed (a seed that never reached a target takes infinitely long)
and order last; NaN is rejected.
"""
import dataclasses
from typing import Callable, Dict, Sequence

import numpy as np

# The default central value: rliable's recommendation, and with 5 seeds its interval
# is informative where the median's is not: a resample's median is the smallest seed's
# value with probability 5.8% (> 2.5%), so the median's 95% interval is the seeds'
# whole range; the IQM needs 4 of 5 draws of that seed (0.7%). With 3 seeds both are
# the range (the IQM is then the mean).
STATISTIC = 'iqm'
CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0


def median(values: np.ndarray, axis: int = 0) -> np.ndarray:
  """The median along `axis` (the mean of the two middle values for an even count).

  Args:
    values: the measurements, seeds along `axis`.
    axis: the seeds' axis.

  Returns:
    `values`' median along `axis`; infinite where more than half are infinite.
  """
  with np.errstate(invalid='ignore'):  # inf + inf inside np.median is inf, not a NaN
    return np.median(values, axis=axis)


def iqm(values: np.ndarray, axis: int = 0) -> np.ndarray:
  """The interquartile mean along `axis`: `int(0.25 * n)` values cut from each end.

  Args:
    values: the measurements, seeds along `axis`.
    axis: the seeds' axis.

  Returns:
    The mean of the middle values along `axis`.
  """
  values = np.sort(np.asarray(values, dtype=float), axis=axis)
  n = values.shape[axis]
  cut = int(0.25 * n)
  with np.errstate(invalid='ignore'):
    return np.mean(np.take(values, np.arange(cut, n - cut), axis=axis), axis=axis)


STATISTICS: Dict[str, Callable[..., np.ndarray]] = {'median': median, 'iqm': iqm}
NAMES = {'median': 'median', 'iqm': 'IQM'}  # as tables and legends write them


@dataclasses.dataclass(frozen=True)
class Interval:
  """A statistic over seeds and its bootstrap confidence interval."""
  point: float
  low: float
  high: float

  def as_dict(self) -> Dict[str, float]:
    """{'point', 'low', 'high'}."""
    return dataclasses.asdict(self)


def _statistic(name: str) -> Callable[..., np.ndarray]:
  if name not in STATISTICS:
    raise ValueError(f'Unknown statistic {name!r}; choose from {sorted(STATISTICS)}.')
  return STATISTICS[name]


def _values(values) -> np.ndarray:
  values = np.asarray(values, dtype=float)
  if values.ndim == 0 or values.shape[0] == 0:
    raise ValueError('No values: the bootstrap needs at least one seed.')
  if np.isnan(values).any():
    raise ValueError('A value is NaN; leave a missing seed out instead.')
  return values


def quantile(sorted_values: np.ndarray, q: float) -> np.ndarray:
  """The q-quantile along axis 0 of values sorted on it, interpolated linearly between
  order statistics (numpy's default method), without NaN from infinities: where the
  two neighbours are equal (both infinite too) it is that value.

  Args:
    sorted_values: sorted along axis 0.
    q: in [0, 1].

  Returns:
    The quantile, of shape `sorted_values.shape[1:]`.
  """
  n = sorted_values.shape[0]
  position = q * (n - 1)
  lo, hi = int(np.floor(position)), int(np.ceil(position))
  below, above = sorted_values[lo], sorted_values[hi]
  with np.errstate(invalid='ignore'):
    between = below + (position - lo) * (above - below)
  return np.where(below == above, below, between)


def _resampled(values: np.ndarray, statistic: Callable[..., np.ndarray], resamples: int,
               rng: np.random.Generator) -> np.ndarray:
  """The statistic of `resamples` resamples of `values`' seeds (axis 0), stacked on
  axis 0."""
  picks = rng.integers(0, values.shape[0], size=(resamples, values.shape[0]))
  return statistic(values[picks], axis=1)


def _interval(point, replicates: np.ndarray, confidence: float):
  replicates = np.sort(replicates, axis=0)
  tail = (1.0 - confidence) / 2
  return point, quantile(replicates, tail), quantile(replicates, 1.0 - tail)


def _check(confidence: float, resamples: int) -> None:
  if not 0.0 < confidence < 1.0:
    raise ValueError(f'confidence must be in (0, 1); got {confidence}.')
  if resamples < 1:
    raise ValueError(f'resamples must be at least 1; got {resamples}.')


def bootstrap(values: Sequence[float], statistic: str = STATISTIC,
              confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
              seed: int = SEED):
  """A statistic over seeds (axis 0) and its percentile bootstrap interval.

  Args:
    values: one measurement per seed, or an array with seeds on axis 0 (a learning
      curve per seed on a shared grid: one interval per grid point).
    statistic: 'iqm' or 'median'.
    confidence: the interval's coverage.
    resamples: bootstrap resamples.
    seed: the resampling generator's seed.

  Returns:
    (point, low, high): arrays of shape `values.shape[1:]` (floats for one value per
    seed).

  Raises:
    ValueError: no values, a NaN among them, an unknown statistic, or a confidence
      outside (0, 1).
  """
  values, function = _values(values), _statistic(statistic)
  _check(confidence, resamples)
  replicates = _resampled(values, function, resamples, np.random.default_rng(seed))
  return _interval(function(values, axis=0), replicates, confidence)


def interval(values: Sequence[float], statistic: str = STATISTIC,
             confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
             seed: int = SEED) -> Interval:
  """`bootstrap` of one measurement per seed, as an Interval (see `bootstrap`)."""
  point, low, high = bootstrap(values, statistic, confidence, resamples, seed)
  return Interval(float(point), float(low), float(high))


def compare(values: Sequence[float], baseline: Sequence[float], how: str,
            statistic: str = STATISTIC, confidence: float = CONFIDENCE,
            resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
  """How `values`' statistic compares with `baseline`'s, with a bootstrap interval.

  Each side's seeds are resampled on their own (independent samples); replicate i is
  the comparison of the two sides' i-th resampled statistics.

  Args:
    values: one measurement per seed (tfrl's).
    baseline: one measurement per seed (the peer's); the counts may differ.
    how: 'ratio' (values / baseline: times and env steps to a target) or 'difference'
      (values - baseline: returns, which may be negative).
    statistic, confidence, resamples, seed: as `bootstrap`.

  Returns:
    The comparison of the two statistics and its interval. A ratio of two infinite
    statistics is undefined: where any replicate is, the interval is NaN.

  Raises:
    ValueError: as `bootstrap`, or an unknown `how`.
  """
  if how not in ('ratio', 'difference'):
    raise ValueError(f"Unknown comparison {how!r}; choose 'ratio' or 'difference'.")
  values, baseline, function = _values(values), _values(baseline), _statistic(statistic)
  _check(confidence, resamples)
  rng = np.random.default_rng(seed)
  ours, theirs = (_resampled(v, function, resamples, rng) for v in (values, baseline))
  point_ours, point_theirs = function(values, axis=0), function(baseline, axis=0)
  with np.errstate(invalid='ignore', divide='ignore'):
    if how == 'ratio':
      point, replicates = point_ours / point_theirs, ours / theirs
    else:
      point, replicates = point_ours - point_theirs, ours - theirs
  if np.isnan(replicates).any():
    return Interval(float(point), float('nan'), float('nan'))
  return Interval(*(float(x) for x in _interval(point, replicates, confidence)))

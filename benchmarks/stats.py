"""Statistics over seeds for the benchmarks: median and IQM with bootstrap intervals,
and performance profiles.

The definitions and the intervals are rliable's (Agarwal et al. 2021, "Deep RL at the
Edge of the Statistical Precipice"; `pip install -e '.[benchmarks]'`, which `dev`
includes). tests/benchmarks/test_stats.py checks that `bootstrap` and `interval` return
what `rliable.library.get_interval_estimates` returns for the same values, seed and
resamples, to the last bit. Both draw rliable's resamples themselves, all at once,
instead of calling it: its bootstrap (arch's) computes each resample in a Python loop,
about 3.5 CPU-seconds per 10,000-resample IQM interval on a 2-core machine against a few
milliseconds here, and results_pages.py draws about 200 intervals on every run.

- IQM, the interquartile mean: scipy.stats.trim_mean with proportiontocut 0.25 along
  the seeds' axis, the function rliable.metrics.aggregate_iqm calls: `int(0.25 * n)`
  runs cut from each end of the sorted values. So with 3 seeds nothing is cut (the IQM
  is the mean); with 4 or 5 seeds one run is cut from each end.
- Median: numpy's over the seeds. rliable.metrics.aggregate_median is the median over
  tasks of each task's mean over runs: of one task's seeds it is their mean, so it is
  not used; the median's intervals are still rliable's bootstrap of this median.
- Intervals: rliable's stratified bootstrap with method 'percentile', one task (one
  column of its runs x tasks matrix), so stratified and plain resampling coincide: each
  resample draws n seeds with replacement from the n measured, and the interval's ends
  are numpy's percentiles at 100 * (1 - confidence) / 2 and 100 * (1 + confidence) / 2
  of the resamples' statistics (arch's percentile method, which rliable returns).
  rliable's StratifiedBootstrap draws those seeds with numpy's global legacy generator
  (`np.random.choice`; its `random_state` argument does not reach these draws), so after
  `np.random.seed(seed)` its resamples are the rows of
  `np.random.RandomState(seed).randint(0, n, (resamples, n))`: the rows drawn here,
  from a generator of their own (the global one is left alone). The legacy generator's
  stream is frozen by numpy's compatibility policy, so a table re-drawn from the same
  runs gives the same intervals.
- Curves (seeds on axis 0, grid points on axis 1): one resample of seeds serves every
  point, so a band is that of whole runs' curves. rliable does not resample curves this
  way (given runs x tasks x points, its StratifiedBootstrap draws the runs anew for each
  point): each point's interval here is rliable's for that point's column alone (to
  the last bit up to 13 seeds; from 14 on, the IQM keeps 8 or more values, which numpy
  sums in another order across a curve than along one column, so to rounding).
- Comparisons of tfrl with a peer (`compare`): tfrl's own, since rliable has no ratio
  or difference of two statistics. As in rliable's StratifiedIndependentBootstrap each
  side is resampled on its own: the seeds do not pair runs (seed 0 of tfrl and seed 0
  of SB3 share no random stream), so the two samples are independent.
- Performance profiles (`performance_profile`): rliable's
  `create_performance_profile`, called.
- Resamples: 10,000 by default (rliable's default is 50,000; with 3-10 seeds the
  interval's ends move by well under a percent between the two).

Infinite values are allowed (a seed that never reached a target takes infinitely long)
and order last: a median or IQM that keeps one is infinite, and an interval's end
interpolated towards an infinite resample is infinite. numpy's percentiles turn some of
those into NaN (inf - inf); there the end is `quantile`'s, which orders infinities last.
NaN values are refused.
"""
import dataclasses
from typing import Callable, Dict, Sequence

import numpy as np
import scipy.stats

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
  """The interquartile mean along `axis`: `int(0.25 * n)` values cut from each end
  (scipy.stats.trim_mean, as rliable.metrics.aggregate_iqm).

  Args:
    values: the measurements, seeds along `axis`.
    axis: the seeds' axis.

  Returns:
    The mean of the middle values along `axis`; infinite where one of them is.
  """
  with np.errstate(invalid='ignore'):  # -inf and inf among the middle values: NaN
    return scipy.stats.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


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


def resampled_seeds(num_seeds: int, resamples: int, seed: int) -> np.ndarray:
  """The seed indices of each bootstrap resample: rliable's draws.

  rliable's StratifiedBootstrap draws a resample's runs with `np.random.choice(n,
  (n, 1))` from numpy's global legacy generator, one resample after another; after
  `np.random.seed(seed)` those are the rows returned here (checked against rliable in
  tests/benchmarks/test_stats.py). The global generator is not touched.

  Args:
    num_seeds: n, the seeds measured.
    resamples: how many resamples.
    seed: the generator's seed (rliable's `np.random.seed`).

  Returns:
    Indices into the seeds, of shape (resamples, num_seeds).
  """
  return np.random.RandomState(seed).randint(0, num_seeds, size=(resamples, num_seeds))


def _percentiles(replicates: np.ndarray, confidence: float):
  """The percentile bootstrap interval's ends along axis 0, as rliable returns them.

  arch's percentile method (rliable's get_interval_estimates with method='percentile')
  takes numpy's percentiles at these two points, so the same floats give the same ends.
  Where numpy's interpolation meets an infinity it can make NaN (inf - inf); those ends
  are `quantile`'s. A NaN replicate (a statistic of -inf and inf) makes its ends NaN.
  """
  tail = (1.0 - confidence) / 2
  points = (100 * tail, 100 * (1.0 - tail))
  with np.errstate(invalid='ignore'):
    ends = np.percentile(replicates, points, axis=0)
  undefined = np.isnan(replicates).any(axis=0)
  if np.isnan(ends).any() and not np.all(undefined):
    ordered = np.sort(replicates, axis=0)
    for i, point in enumerate(points):
      ends[i] = np.where(np.isnan(ends[i]) & ~undefined, quantile(ordered, point / 100),
                         ends[i])
  return ends[0], ends[1]


def _check(confidence: float, resamples: int) -> None:
  if not 0.0 < confidence < 1.0:
    raise ValueError(f'confidence must be in (0, 1); got {confidence}.')
  if resamples < 1:
    raise ValueError(f'resamples must be at least 1; got {resamples}.')


def bootstrap(values: Sequence[float], statistic: str = STATISTIC,
              confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
              seed: int = SEED):
  """A statistic over seeds (axis 0) and its percentile bootstrap interval (rliable's).

  Args:
    values: one measurement per seed, or an array with seeds on axis 0 (a learning
      curve per seed on a shared grid: one interval per grid point, every point
      from the same resamples of seeds).
    statistic: 'iqm' or 'median'.
    confidence: the interval's coverage.
    resamples: bootstrap resamples.
    seed: the resampling generator's seed.

  Returns:
    (point, low, high): arrays of shape `values.shape[1:]` (floats for one value per
    seed).

  Raises:
    ValueError: no values, a NaN among them, an unknown statistic, a confidence
      outside (0, 1), or fewer than one resample.
  """
  values, function = _values(values), _statistic(statistic)
  _check(confidence, resamples)
  replicates = function(values[resampled_seeds(values.shape[0], resamples, seed)], axis=1)
  point = function(values, axis=0)
  low, high = _percentiles(replicates, confidence)
  return point, low, high


def interval(values: Sequence[float], statistic: str = STATISTIC,
             confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
             seed: int = SEED) -> Interval:
  """`bootstrap` of one measurement per seed, as an Interval.

  Args:
    values: one measurement per seed.
    statistic, confidence, resamples, seed: as `bootstrap`.

  Returns:
    The statistic and its interval.

  Raises:
    ValueError: as `bootstrap`.
  """
  point, low, high = bootstrap(values, statistic, confidence, resamples, seed)
  return Interval(float(point), float(low), float(high))


def compare(values: Sequence[float], baseline: Sequence[float], how: str,
            statistic: str = STATISTIC, confidence: float = CONFIDENCE,
            resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
  """How `values`' statistic compares with `baseline`'s, with a bootstrap interval.

  Each side's seeds are resampled on their own (independent samples) from one
  generator, `values`' first; replicate i is the comparison of the two sides' i-th
  resampled statistics. rliable has no ratio or difference of two statistics: this is
  tfrl's own.

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
  ours, theirs = (
      function(v[rng.integers(0, v.shape[0], size=(resamples, v.shape[0]))], axis=1)
      for v in (values, baseline))
  point_ours, point_theirs = function(values, axis=0), function(baseline, axis=0)
  with np.errstate(invalid='ignore', divide='ignore'):
    if how == 'ratio':
      point, replicates = point_ours / point_theirs, ours / theirs
    else:
      point, replicates = point_ours - point_theirs, ours - theirs
  if np.isnan(replicates).any():
    return Interval(float(point), float('nan'), float('nan'))
  low, high = _percentiles(replicates, confidence)
  return Interval(float(point), float(low), float(high))


@dataclasses.dataclass(frozen=True)
class Profile:
  """A performance profile: at each threshold, the fraction of runs above it and that
  fraction's bootstrap confidence interval (arrays of the thresholds' length)."""
  thresholds: np.ndarray
  fraction: np.ndarray
  low: np.ndarray
  high: np.ndarray


def performance_profile(values: Sequence[float], thresholds: Sequence[float],
                        confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                        seed: int = SEED) -> Profile:
  """rliable's performance profile of runs (its score distribution): the fraction of
  runs whose value is above each threshold, with percentile bootstrap intervals.

  One measurement per run: the fractions of rliable's draws (`resampled_seeds`) at
  once, to the last bit what rliable.library.create_performance_profile returns
  (tests/benchmarks/test_stats.py) in milliseconds instead of its Python loop's tens of
  seconds per 10,000 resamples. Runs x tasks: rliable's own function, which draws from
  numpy's global generator and takes no seed, so that generator is seeded with `seed`
  for the call and given back its state afterwards.

  Args:
    values: one measurement per run (seed), or runs x tasks of scores on one scale
      (normalized returns, say: the fraction is then over every run of every task). An
      infinite value is above every threshold.
    thresholds: where to evaluate the profile.
    confidence: the intervals' coverage.
    resamples: bootstrap resamples.
    seed: the resampling generator's seed.

  Returns:
    The profile at `thresholds`.

  Raises:
    ValueError: no values, a NaN among them, no thresholds, a confidence outside
      (0, 1), or fewer than one resample.
  """
  values = _values(values)
  thresholds = np.asarray(thresholds, dtype=float).reshape(-1)
  if thresholds.size == 0:
    raise ValueError('No thresholds: a profile needs at least one.')
  _check(confidence, resamples)
  if values.ndim == 1:
    def above(runs: np.ndarray) -> np.ndarray:  # runs [..., n] -> [..., thresholds]
      return (runs[..., None] > thresholds).mean(axis=-2)

    low, high = _percentiles(above(values[resampled_seeds(values.shape[0], resamples,
                                                          seed)]), confidence)
    return Profile(thresholds, above(values), low, high)
  # rliable brings arch, pandas and statsmodels: imported only where profiles are drawn.
  from rliable import library  # pylint: disable=g-import-not-at-top
  scores = values.reshape(values.shape[0], -1)  # runs x tasks, as rliable takes them
  state = np.random.get_state()
  np.random.seed(seed)
  try:
    fractions, intervals = library.create_performance_profile(
        {'runs': scores}, thresholds, reps=resamples,
        confidence_interval_size=confidence)
  finally:
    np.random.set_state(state)
  return Profile(thresholds, np.asarray(fractions['runs'], dtype=float),
                 np.asarray(intervals['runs'][0], dtype=float),
                 np.asarray(intervals['runs'][1], dtype=float))

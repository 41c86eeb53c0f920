"""benchmarks/stats.py: median, IQM and their bootstrap intervals against hand-computed
values, numpy, scipy and rliable (called directly with the same seed and resamples), the
bootstrap's known properties, and rliable's performance profiles."""
import itertools
import math

import numpy as np
import pytest
import scipy.stats
from rliable import library as rliable_library
from rliable import metrics as rliable_metrics

import stats  # benchmarks/stats.py (tests/benchmarks/conftest.py)


@pytest.mark.parametrize('values, expected', [
    ([1, 2, 3, 4, 100], 3.0),            # n=5: one cut from each end, mean of 2, 3, 4
    ([1, 2, 3, 4, 5, 6, 7, 8], 4.5),     # n=8: two cut from each end, mean of 3-6
    ([0, 0, 1, 100], 0.5),               # n=4: one cut from each end
    ([1, 2, 9], 4.0),                    # n=3: int(0.75) = 0 cut, the mean (as rliable)
    ([7], 7.0),
])
def test_iqm_hand_computed(values, expected):
  assert stats.iqm(np.array(values, dtype=float)) == pytest.approx(expected)
  # Order does not matter.
  assert stats.iqm(np.array(values[::-1], dtype=float)) == pytest.approx(expected)


def test_iqm_of_a_symmetric_set_is_its_centre():
  values = np.array([1.0, 4.0, 5.0, 6.0, 9.0, 2.0, 8.0, -100.0, 110.0])  # about 5
  assert stats.iqm(values) == pytest.approx(5.0)
  assert stats.median(values) == pytest.approx(5.0)


def test_statistics_along_the_seed_axis_match_numpy():
  values = np.random.default_rng(3).normal(size=(8, 4))
  np.testing.assert_allclose(stats.median(values), np.median(values, axis=0))
  trimmed = np.sort(values, axis=0)[2:6]
  np.testing.assert_allclose(stats.iqm(values), trimmed.mean(axis=0))


def test_two_seeds_median_interval_is_their_range():
  # Resamples of {a, b}: (a, a), (a, b), (b, a), (b, b), each 1/4; the 2.5% and 97.5%
  # quantiles of their medians fall inside the a and b blocks.
  for statistic in ('median', 'iqm'):  # the IQM of 2 is their mean
    assert stats.bootstrap([3.0, 8.0], statistic) == (5.5, 3.0, 8.0)


def test_three_seeds_median_bootstrap_distribution_hand_computed():
  # Medians of the 27 resamples of {1, 2, 10}: 1 with probability 7/27, 2 with 13/27,
  # 10 with 7/27 (exact, checked by enumeration below).
  medians = [sorted(r)[1] for r in itertools.product([1, 2, 10], repeat=3)]
  assert [medians.count(v) for v in (1, 2, 10)] == [7, 13, 7]
  assert stats.interval([1, 2, 10], 'median') == stats.Interval(2.0, 1.0, 10.0)
  # 40% interval: quantiles 0.3 and 0.7 both inside the block of 2 (7/27 = 0.26 below
  # it, 20/27 = 0.74 at or below it).
  forty = stats.interval([1, 2, 10], 'median', confidence=0.4)
  assert forty == stats.Interval(2.0, 2.0, 2.0)


def test_five_seeds_median_interval_is_their_range_the_iqms_is_not():
  # A resample's median is the smallest seed with probability P(>= 3 of 5 draws) = 5.8%,
  # its IQM (mean of the middle 3) only with P(>= 4 of 5) = 0.7%: stats.STATISTIC.
  values = [1.0, 2.0, 3.0, 4.0, 5.0]
  assert stats.interval(values, 'median') == stats.Interval(3.0, 1.0, 5.0)
  iqm = stats.interval(values, 'iqm')
  assert iqm.point == 3.0 and 1.0 < iqm.low < 2.0 and 4.0 < iqm.high < 5.0
  assert stats.STATISTIC == 'iqm'


def test_identical_seeds_give_a_zero_width_interval():
  for statistic in ('median', 'iqm'):
    assert stats.interval([4.0] * 5, statistic) == stats.Interval(4.0, 4.0, 4.0)
  five, three = [4.0] * 5, [4.0] * 3
  assert stats.compare(five, three, 'ratio') == stats.Interval(1.0, 1.0, 1.0)
  assert stats.compare(five, three, 'difference') == stats.Interval(0.0, 0.0, 0.0)


@pytest.mark.parametrize('statistic', ['median', 'iqm'])
def test_interval_contains_the_point_estimate(statistic):
  rng = np.random.default_rng(0)
  for n in (3, 5, 10):
    for _ in range(10):
      values = rng.lognormal(mean=3.0, sigma=0.7, size=n)
      result = stats.interval(values, statistic, resamples=2000)
      assert result.low <= result.point <= result.high
      assert result.low >= values.min() and result.high <= values.max()


@pytest.mark.parametrize('statistic', ['median', 'iqm'])
def test_interval_narrows_with_more_seeds(statistic):
  rng = np.random.default_rng(1)
  widths = []
  for n in (5, 20, 80):
    result = stats.interval(rng.normal(10.0, 2.0, size=n), statistic, resamples=4000)
    widths.append(result.high - result.low)
  assert widths[0] > widths[1] > widths[2] > 0


def test_comparison_hand_computed():
  # tfrl constant 10; the peer's median over {1, 2, 3} resamples to 1 or 3 with 7/27
  # each, so its 95% interval is [1, 3].
  assert stats.compare([10.0] * 3, [1.0, 2.0, 3.0], 'difference',
                       'median') == stats.Interval(8.0, 7.0, 9.0)
  ratio = stats.compare([10.0] * 3, [1.0, 2.0, 3.0], 'ratio', 'median')
  assert (ratio.point, ratio.low, ratio.high) == pytest.approx((5.0, 10 / 3, 10.0))


def test_comparison_resamples_each_side_on_its_own():
  # Paired resampling would pick the same seed indices on both sides: with these
  # values their difference would always be 0. Independent resampling spreads it.
  result = stats.compare([1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0],
                         'difference')
  assert result.point == 0.0 and result.low < -1.0 and result.high > 1.0


def test_infinite_values_order_last():
  # Two of three seeds solved: the median is finite; its interval's top is not.
  result = stats.interval([10.0, 20.0, math.inf], 'median')
  assert (result.point, result.low, result.high) == (20.0, 10.0, math.inf)
  assert stats.interval([10.0, math.inf, math.inf], 'median').point == math.inf
  # The IQM of 3 seeds trims nothing: one unsolved seed makes it infinite; of 5 seeds
  # the largest is trimmed.
  assert stats.interval([10.0, 20.0, math.inf], 'iqm').point == math.inf
  assert stats.interval([10.0, 20.0, 30.0, 40.0, math.inf], 'iqm').point == 30.0
  assert stats.compare([1.0, 2.0], [math.inf, math.inf], 'ratio').point == 0.0
  both = stats.compare([math.inf] * 3, [math.inf] * 3, 'ratio')  # inf / inf: undefined
  assert math.isnan(both.point) and math.isnan(both.low) and math.isnan(both.high)


def test_quantile_matches_numpy_and_survives_infinities():
  values = np.sort(np.random.default_rng(2).normal(size=(11, 3)), axis=0)
  for q in (0.0, 0.025, 0.3, 0.5, 0.975, 1.0):
    np.testing.assert_allclose(stats.quantile(values, q), np.quantile(values, q, axis=0))
  infinite = np.array([1.0, 2.0, math.inf, math.inf])
  assert stats.quantile(infinite, 0.9) == math.inf  # numpy gives NaN here
  assert stats.quantile(infinite, 0.5) == math.inf


def test_a_curve_per_seed_gets_one_interval_per_point():
  curves = np.random.default_rng(4).normal(size=(5, 7))
  point, low, high = stats.bootstrap(curves, 'iqm', resamples=500, seed=9)
  assert point.shape == low.shape == high.shape == (7,)
  for j in range(7):  # the same resampled seeds for every point
    assert stats.bootstrap(curves[:, j], 'iqm', resamples=500, seed=9) == (
        point[j], low[j], high[j])


def test_fixed_seed_reproduces_and_another_seed_differs():
  values = np.random.default_rng(5).normal(size=6)
  assert stats.interval(values, seed=7) == stats.interval(values, seed=7)
  assert stats.interval(values, resamples=50, seed=7) != stats.interval(
      values, resamples=50, seed=8)


@pytest.mark.parametrize('call, message', [
    (lambda: stats.interval([1.0, float('nan')]), 'NaN'),
    (lambda: stats.interval([]), 'No values'),
    (lambda: stats.interval([1.0], 'mean'), 'Unknown statistic'),
    (lambda: stats.interval([1.0], confidence=1.0), 'confidence'),
    (lambda: stats.interval([1.0], resamples=0), 'resamples'),
    (lambda: stats.compare([1.0], [1.0], 'sum'), 'Unknown comparison'),
])
def test_errors_name_the_problem(call, message):
  with pytest.raises(ValueError, match=message):
    call()


# -- rliable, called directly --------------------------------------------------------

def _rliable_iqm(scores):
  return np.array([rliable_metrics.aggregate_iqm(scores)])


def _rliable_median(scores):
  # rliable's aggregate_median is the median of the tasks' means (see below): the median
  # over one task's runs is given to its bootstrap as the function.
  return np.median(scores, axis=0)


RLIABLE_FUNCTIONS = {'iqm': _rliable_iqm, 'median': _rliable_median}


def _seeded(seed, call):
  """`call()` with numpy's global generator seeded (rliable draws from it), the
  generator's state given back afterwards."""
  state = np.random.get_state()
  np.random.seed(seed)
  try:
    return call()
  finally:
    np.random.set_state(state)


def _rliable_interval(scores, statistic, resamples, seed, confidence=stats.CONFIDENCE):
  """rliable's point estimate and percentile interval of `scores` (runs x tasks ...)."""
  points, intervals = _seeded(seed, lambda: rliable_library.get_interval_estimates(
      {'x': scores}, RLIABLE_FUNCTIONS[statistic], method='percentile', reps=resamples,
      confidence_interval_size=confidence))
  return points['x'], intervals['x']


@pytest.mark.parametrize('values', [
    [1.0, 2.0, 9.0], [1.0, 2.0, 3.0, 4.0, 100.0], [0.0, 0.0, 1.0, 100.0],
    [3.5, -1.25, 8.0, 2.0, 2.0, 7.75, -4.0, 0.5], [7.0],
    list(np.random.default_rng(6).lognormal(3.0, 0.7, size=10)),
])
def test_iqm_is_scipys_trim_mean_and_rliables_aggregate_iqm(values):
  values = np.array(values)
  assert stats.iqm(values) == scipy.stats.trim_mean(values, 0.25)
  assert stats.iqm(values) == rliable_metrics.aggregate_iqm(values[:, None])


def test_rliables_aggregate_median_of_one_task_is_its_runs_mean():
  # Why stats.median is numpy's: rliable's is the median over tasks of each task's mean.
  values = np.array([1.0, 2.0, 9.0])
  assert rliable_metrics.aggregate_median(values[:, None]) == 4.0
  assert stats.median(values) == 2.0


@pytest.mark.parametrize('statistic', ['iqm', 'median'])
@pytest.mark.parametrize('values, seed', [
    ([118.0, 96.5, 240.25], 0),
    ([1.0, 2.0, 3.0, 4.0, 5.0], 3),
    (list(np.random.default_rng(7).lognormal(3.0, 0.7, size=10)), 11),
])
def test_intervals_are_rliables(statistic, values, seed):
  values = np.array(values)
  # rliable's bootstrap takes about a millisecond a resample: few of them here.
  point, (low, high) = _rliable_interval(values[:, None], statistic, 500, seed)
  ours = stats.interval(values, statistic, resamples=500, seed=seed)
  assert ours == stats.Interval(float(point[0]), float(low[0]), float(high[0]))
  sixty = stats.interval(values, statistic, confidence=0.6, resamples=500, seed=seed)
  point, (low, high) = _rliable_interval(values[:, None], statistic, 500, seed, 0.6)
  assert sixty == stats.Interval(float(point[0]), float(low[0]), float(high[0]))


def test_the_default_interval_is_rliables_at_the_modules_seed_and_resamples():
  values = np.array([118.0, 96.5, 240.25, 130.0, 101.5])  # five seeds, as the pages
  point, (low, high) = _rliable_interval(values[:, None], stats.STATISTIC,
                                         stats.RESAMPLES, stats.SEED)
  assert stats.interval(values) == stats.Interval(float(point[0]), float(low[0]),
                                                  float(high[0]))


def test_the_draws_are_rliables_and_leave_the_global_generator_alone():
  drawn = []

  def record(scores):
    drawn.append(scores[:, 0].copy())
    return np.array([0.0])

  seeds = np.arange(4.0)
  _seeded(5, lambda: rliable_library.get_interval_estimates(
      {'x': seeds[:, None]}, record, reps=50))
  # Before the 50 resamples, rliable and arch each evaluate the unresampled runs.
  np.testing.assert_array_equal(np.array(drawn[-50:]),
                                stats.resampled_seeds(4, 50, seed=5).astype(float))
  state = np.random.get_state()
  stats.interval([1.0, 2.0, 5.0])
  after = np.random.get_state()
  assert state[0] == after[0] and np.array_equal(state[1], after[1])
  assert state[2:] == after[2:]


def test_each_point_of_a_curve_is_rliables_interval_of_that_point_alone():
  curves = np.random.default_rng(8).normal(size=(5, 4))
  point, low, high = stats.bootstrap(curves, 'iqm', resamples=300, seed=2)
  for j in range(4):
    p, (lo, hi) = _rliable_interval(curves[:, j:j + 1], 'iqm', 300, 2)
    assert (point[j], low[j], high[j]) == (p[0], lo[0], hi[0])


def test_rliable_would_draw_each_point_of_a_curve_anew():
  # Four identical points: one resample of seeds for the whole curve gives them one
  # interval; rliable's bootstrap of runs x tasks x points draws runs for each point.
  curves = np.repeat(np.array([[1.0], [2.0], [4.0], [8.0], [16.0]]), 4, axis=1)
  _, low, high = stats.bootstrap(curves, 'iqm', resamples=500, seed=1)
  assert len(set(low)) == 1 and len(set(high)) == 1
  _, intervals = _seeded(1, lambda: rliable_library.get_interval_estimates(
      {'x': curves[:, None, :]}, lambda scores: stats.iqm(scores[:, 0, :]), reps=500))
  assert len(set(intervals['x'][0])) > 1 or len(set(intervals['x'][1])) > 1


def test_infinities_where_rliables_percentiles_make_nan():
  # Two of three seeds solved: the median's top end lies between two infinite
  # resamples, where numpy's interpolation (and so rliable's interval) gives NaN.
  values = np.array([10.0, 20.0, math.inf])
  with np.errstate(invalid='ignore'):
    point, (low, high) = _rliable_interval(values[:, None], 'median', 500, 0)
  assert (point[0], low[0]) == (20.0, 10.0) and math.isnan(high[0])
  assert stats.interval(values, 'median', resamples=500) == stats.Interval(
      20.0, 10.0, math.inf)
  # Five seeds, one unsolved: the IQM trims it (rliable's point too); a resample that
  # draws it twice keeps one, so the top end is infinite.
  values = np.array([10.0, 20.0, 30.0, 40.0, math.inf])
  assert rliable_metrics.aggregate_iqm(values[:, None]) == stats.iqm(values) == 30.0
  assert stats.interval(values, 'iqm').high == math.inf
  # A curve whose last point no seed reached: infinite there, finite before.
  curves = np.array([[5.0, math.inf], [6.0, math.inf], [7.0, math.inf]])
  point, low, high = stats.bootstrap(curves, 'median', resamples=500)
  assert point[1] == low[1] == high[1] == math.inf
  assert np.isfinite([point[0], low[0], high[0]]).all()


# -- Performance profiles --------------------------------------------------------------

def test_performance_profile_is_rliables():
  returns = np.array([480.0, 500.0, 500.0, 312.5, 455.0, 500.0, 120.0, 499.0])
  thresholds = [100.0, 300.0, 450.0, 490.0, 500.0]
  profile = stats.performance_profile(returns, thresholds, resamples=500, seed=4)
  fractions, intervals = _seeded(4, lambda: rliable_library.create_performance_profile(
      {'x': returns[:, None]}, thresholds, reps=500))
  np.testing.assert_array_equal(profile.thresholds, thresholds)
  np.testing.assert_array_equal(profile.fraction, fractions['x'])
  np.testing.assert_array_equal(profile.low, intervals['x'][0])
  np.testing.assert_array_equal(profile.high, intervals['x'][1])
  # Strictly above: 3 of the 8 runs returned 500.
  np.testing.assert_array_equal(profile.fraction, [1.0, 7 / 8, 6 / 8, 4 / 8, 0.0])
  assert (profile.low <= profile.fraction).all() and (profile.fraction <= profile.high).all()


def test_performance_profile_seeds_rliable_and_gives_the_generator_back():
  np.random.seed(123)
  state = np.random.get_state()
  values = [1.0, 2.0, 3.0, 4.0, 5.0, math.inf]  # a run that never reached: above all
  first = stats.performance_profile(values, [0.5, 2.5, 1e9], resamples=300, seed=2)
  after = np.random.get_state()
  assert np.array_equal(state[1], after[1]) and state[2:] == after[2:]
  again = stats.performance_profile(values, [0.5, 2.5, 1e9], resamples=300, seed=2)
  np.testing.assert_array_equal(first.low, again.low)
  np.testing.assert_array_equal(first.high, again.high)
  np.testing.assert_array_equal(first.fraction, [1.0, 4 / 6, 1 / 6])


@pytest.mark.parametrize('call, message', [
    (lambda: stats.performance_profile([1.0, float('nan')], [0.0]), 'NaN'),
    (lambda: stats.performance_profile([], [0.0]), 'No values'),
    (lambda: stats.performance_profile([1.0], []), 'No thresholds'),
    (lambda: stats.performance_profile([1.0], [0.0], confidence=0.0), 'confidence'),
])
def test_performance_profile_errors_name_the_problem(call, message):
  with pytest.raises(ValueError, match=message):
    call()

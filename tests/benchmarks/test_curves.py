"""benchmarks/curves.py: seeds' curves put on one grid, and the two-panel PNG with the
central value's band."""
import numpy as np
import pytest

import curves  # benchmarks/curves.py (tests/benchmarks/conftest.py)
import stats  # benchmarks/stats.py

# (env steps, seconds, return) per evaluation.
SEED_0 = [(0, 0.5, 0.0), (100, 1.5, 10.0), (200, 2.5, 30.0)]
SEED_1 = [(50, 1.0, 5.0), (150, 3.0, 25.0)]  # ends first: held at 25 after 150 steps


def test_on_grid_interpolates_and_holds_the_last_evaluation():
  grid, returns = curves.on_grid([SEED_0, SEED_1, []], column=0, points=4)
  # From the latest first evaluation (50) to the latest last one (200).
  np.testing.assert_allclose(grid, [50.0, 100.0, 150.0, 200.0])
  np.testing.assert_allclose(returns, [[5.0, 10.0, 20.0, 30.0],
                                       [5.0, 15.0, 25.0, 25.0]])
  grid, returns = curves.on_grid([SEED_0, SEED_1], column=1, points=3)  # seconds
  np.testing.assert_allclose(grid, [1.0, 2.0, 3.0])
  np.testing.assert_allclose(returns, [[5.0, 20.0, 30.0], [5.0, 15.0, 25.0]])
  assert curves.on_grid([[], []], column=0) is None


def test_on_grid_leaves_out_points_without_a_return():
  # A progress line before any training game ended reports no return (NaN).
  early = [(10, 0.2, float('nan'))] + SEED_1
  grid, returns = curves.on_grid([SEED_0, early, [(5, 0.1, float('nan'))]], column=0,
                                 points=4)
  np.testing.assert_allclose(grid, [50.0, 100.0, 150.0, 200.0])
  np.testing.assert_allclose(returns, [[5.0, 10.0, 20.0, 30.0],
                                       [5.0, 15.0, 25.0, 25.0]])


def test_plot_draws_both_panels_with_the_central_value_and_its_band(tmp_path,
                                                                    monkeypatch):
  drawn = []
  bootstrap = stats.bootstrap

  def recording(values, *args):
    drawn.append((np.array(values), args))
    return bootstrap(values, *args)

  monkeypatch.setattr(stats, 'bootstrap', recording)
  path = curves.plot(str(tmp_path / 'task.png'), 'task',
                     {'tfrl': [SEED_0, SEED_1], 'SB3': [SEED_1, SEED_1, []]},
                     threshold=20.0, statistic='iqm', resamples=300, seed=3)
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  # One band per side per panel (env steps, then seconds), on each side's seeds.
  assert [values.shape[0] for values, _ in drawn] == [2, 2, 2, 2]
  assert all(args == ('iqm', stats.CONFIDENCE, 300, 3) for _, args in drawn)
  np.testing.assert_allclose(drawn[0][0], curves.on_grid([SEED_0, SEED_1], 0)[1])
  np.testing.assert_allclose(drawn[3][0], curves.on_grid([SEED_1, SEED_1], 1)[1])


def test_plot_with_an_unknown_statistic_fails():
  with pytest.raises(ValueError, match='Unknown statistic'):
    curves.plot('/nonexistent/x.png', 't', {'tfrl': [SEED_0]}, statistic='mean')

"""benchmarks/hybrid.py: the env steps at which a curve first reaches a return."""
import math

import hybrid  # benchmarks/hybrid.py (tests/benchmarks/conftest.py)


def test_env_steps_to_a_return_interpolate_the_first_crossing():
  curve = [(5_000, 10.0, 1_000.0), (10_000, 20.0, 3_000.0), (15_000, 30.0, 2_000.0),
           (20_000, 40.0, 5_000.0)]
  assert hybrid.steps_to(curve, 2_000.0) == 7_500.0  # halfway from 1,000 to 3,000
  assert hybrid.steps_to(curve, 3_000.0) == 10_000.0
  # The first crossing counts, not a later one after a dip.
  assert hybrid.steps_to(curve, 2_500.0) == 8_750.0
  assert hybrid.steps_to(curve, 4_000.0) == 15_000.0 + 5_000.0 * 2 / 3
  assert hybrid.steps_to(curve, 500.0) == 5_000.0  # the first evaluation is above it
  assert hybrid.steps_to(curve, 6_000.0) == math.inf
  assert hybrid.steps_to([], 0.0) == math.inf

"""The criterion benchmarks/pbt_lunarlander.py judges a population by: it reaches the
target within the budget B where at least half of its starting points, each trained
alone with the same seed and budget, do not.

No flags and no TensorFlow here: the benchmark and benchmarks/results_pages.py both
judge the recorded summaries with it.
"""
from typing import Any, Mapping, Optional


def criterion(population: Mapping[str, Any],
              alone: Mapping[str, Optional[Mapping[str, Any]]]) -> str:
  """Whether a population met the criterion.

  Args:
    population: the population's summary ('reached': whether a member reached and
      confirmed the target within B).
    alone: member -> its starting point's run alone ('reached'), or None where that run
      has not been made.

  Returns:
    'MET', 'NOT MET', or 'undecided (N starting points not run)' where the runs made so
    far cannot tell.
  """
  done = [run for run in alone.values() if run is not None]
  solo = sum(bool(run['reached']) for run in done)
  if not population['reached'] or solo > len(alone) / 2:
    return 'NOT MET'
  if len(done) - solo >= len(alone) / 2:
    return 'MET'
  return f'undecided ({len(alone) - len(done)} starting points not run)'

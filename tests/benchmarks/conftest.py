"""The benchmark helpers are scripts' modules (benchmarks/ is no package): import them
as the scripts do, from benchmarks/ on sys.path."""
import os
import sys

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'benchmarks')
if BENCHMARKS not in sys.path:
  sys.path.insert(0, BENCHMARKS)

"""tfrl: TensorFlow 2 reinforcement learning with Reverb replay, at scale.

Its parts: `tfrl.envs` (vectorized envs, workers, wrappers), `tfrl.replay` (Reverb
tables and servers), `tfrl.layouts` (how experience is written and read),
`tfrl.actors`, `tfrl.learner` / `tfrl.triggers` / `tfrl.export`, `tfrl.agents` and
`tfrl.datasets`; the programs in `learners/` wire them together. What each imports:
docs/architecture.md (no import cycles: tests/test_import_cycles.py).
"""
import os as _os

from tfrl import logs as _logs

# Set in processes that run no TensorFlow: env workers (tfrl.envs.worker_env) and the
# Ray actors that start a job's programs (learners/processes/ray_backend.py).
NO_TENSORFLOW_VARIABLE = 'TFRL_NO_TENSORFLOW'

__version__ = '0.1.0'

# TensorFlow, tf-agents and Reverb, imported now without their start-up noise (CUDA
# factory "errors" on a CPU machine, gym's notice): every tfrl module needs them, bar
# the processes that run no TensorFlow.
if not _os.environ.get(NO_TENSORFLOW_VARIABLE):
  _logs.import_tensorflow_quietly()


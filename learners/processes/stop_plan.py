"""The stop grace period, split between the ordered stop's stages.

A scheduler (Kubernetes: terminationGracePeriodSeconds, 30 s by default; Slurm, systemd)
sends SIGTERM and kills what is left after a grace period. The launcher's ordered stop
(evaluator, trainer, collectors, server) must fit inside it, so each stage gets a share,
most of it the trainer's (final checkpoint and exports). Each program learns its share
from STOP_GRACE_ENV and keeps its own grace (process.run_until_signal) a little inside
it, so it can still say why it gave up before the launcher kills it.
"""
import os
from typing import Dict

DEFAULT_STOP_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds
STOP_GRACE_ENV = 'TFRL_STOP_GRACE_S'  # a program's share, in seconds
# Shares of the total per stage, in stop order. The trainer's final save dominates.
_SHARES = {'eval': 0.15, 'train': 0.5, 'collect': 0.15, 'reverb_server': 0.2}
# A program's own grace within its share: the rest lets it log and exit before a kill.
_OWN_FRACTION = 0.8


def stage(name: str) -> str:
  """The stage a program belongs to ('collect_3' -> 'collect')."""
  return 'collect' if name.startswith('collect') else name


def shares(total_s: float) -> Dict[str, float]:
  """Seconds per stage (eval, train, collect, reverb_server) of a `total_s` stop.

  Args:
    total_s: the whole ordered stop's grace period, > 0.

  Returns:
    {stage: seconds}, summing to `total_s`.

  Raises:
    ValueError: `total_s` is not positive.
  """
  if not total_s > 0:
    raise ValueError(f'stop grace must be > 0 seconds, got {total_s}')
  return {name: share * total_s for name, share in _SHARES.items()}


def program_grace_s(default_s: float = DEFAULT_STOP_GRACE_S) -> float:
  """A program's own grace after a stop signal: inside the share the launcher gave it
  (STOP_GRACE_ENV), or `default_s` when run alone or the value is unusable."""
  try:
    share = float(os.environ.get(STOP_GRACE_ENV, ''))
  except ValueError:
    return default_s
  return share * _OWN_FRACTION if share > 0 else default_s

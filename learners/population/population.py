"""Population-based training's decisions and its history (Jaderberg et al. 2017).

A population of jobs trains at once; at each ready point every member reports its
recent evaluation. Truncation selection: each member in the bottom `quantile` takes a
top-`quantile` member's weights and that member's hyperparameters, perturbed (explore):
each multiplied by one of `factors`, or with `resample_probability` drawn afresh from its
declared bounds, and kept within them.

Where the defaults come from: the truncation, 20% at each end (`QUANTILE`: at least one
member each, so a population of 4 copies one member, as a quarter would), and the
factors, x0.8 / x1.2, are Jaderberg et al.'s (2017) settings for their RL experiments.
The chance of resampling instead of perturbing, 0.25 (`RESAMPLE_PROBABILITY`), is Ray
Tune's default (its `PopulationBasedTraining`, whose truncation default is 25%), not a
setting the paper states.

This module decides and records; the jobs read their hyperparameters from variables
(`tfrl.agents.hyperparameters`), so a member applies a decision without re-tracing.

The lineage file (JSON lines) holds every start, report and copy in order: `replay`
rebuilds each member's hyperparameter history from it.
"""
import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from absl import flags
import numpy as np

Number = Union[int, float]  # an int where its bound says `integer`

# The defaults (see the module docstring for where each comes from).
QUANTILE = 0.2
FACTORS = (0.8, 1.2)
RESAMPLE_PROBABILITY = 0.25
# What runs one member (`learners.pbt --member_program`): a one-process job, or a
# launched job (learners/job/trainer_member.py).
MEMBER_PROGRAMS = ('train_eval', 'launch')
# How the runner decides (`learners.pbt --mode`): 'sync' at a barrier once every running
# member has reported the round; 'async' for each member as soon as it reports, against
# the others' latest scores (as Sample Factory's PBT does).
MODES = ('sync', 'async')
# Reports a member's score is the mean of, by mode: a synchronous round compares
# evaluations made at the same env steps; an asynchronous decision compares members at
# different points, each score then smoothed over its last few reports.
SCORE_WINDOWS = {'sync': 1, 'async': 3}


@dataclasses.dataclass(frozen=True)
class Bound:
  """Where a hyperparameter may go: [low, high], searched on a log scale by default.

  Attributes:
    low, high: the inclusive range (> 0 both when `log`).
    log: sample log-uniformly (rates, costs spanning decades); else uniformly.
    integer: round to an int (a period in train steps).
  """
  low: float
  high: float
  log: bool = True
  integer: bool = False

  def __post_init__(self):
    if not self.low <= self.high:
      raise ValueError(f'a bound needs low <= high, got [{self.low}, {self.high}]')
    if self.log and self.low <= 0:
      raise ValueError(f'a log-scale bound needs low > 0, got {self.low} (log=False '
                       'for a range that includes 0)')

  def clip(self, value: float) -> Number:
    value = min(max(float(value), self.low), self.high)
    return int(round(value)) if self.integer else value

  def sample(self, rng: np.random.Generator) -> Number:
    if self.log:
      value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
    else:
      value = rng.uniform(self.low, self.high)
    return self.clip(value)


def sample_all(bounds: Mapping[str, Bound], rng: np.random.Generator) -> Dict[str, Number]:
  """A member's initial hyperparameters: each drawn from its bound."""
  return {name: bound.sample(rng) for name, bound in bounds.items()}


def perturb(values: Mapping[str, Number], bounds: Mapping[str, Bound],
            rng: np.random.Generator, factors: Sequence[float] = FACTORS,
            resample_probability: float = RESAMPLE_PROBABILITY) -> Dict[str, Number]:
  """Explore: each bounded hyperparameter resampled (with `resample_probability`) or
  multiplied by one of `factors`, then kept within its bound. Unbounded ones are kept.

  Raises:
    KeyError: a bound for a hyperparameter `values` lacks.
  """
  result = dict(values)
  for name, bound in bounds.items():
    if rng.uniform() < resample_probability:
      result[name] = bound.sample(rng)
    else:
      result[name] = bound.clip(values[name] * factors[rng.integers(len(factors))])
  return result


@dataclasses.dataclass(frozen=True)
class Exploit:
  """One decision: `member` takes `source`'s latest checkpoint and `hyperparameters`."""
  member: int
  source: int
  hyperparameters: Dict[str, Number]


def exploit_and_explore(scores: Mapping[int, float],
                        hyperparameters: Mapping[int, Mapping[str, Number]],
                        bounds: Mapping[str, Bound], rng: np.random.Generator,
                        quantile: float = QUANTILE, **perturb_kwargs) -> List[Exploit]:
  """The decisions at a ready point: the bottom `quantile` of members by score each copy
  a random member of the top `quantile`, with that member's hyperparameters perturbed.

  Args:
    scores: each ready member's recent evaluation (NaN: none yet, ranked last).
    hyperparameters: each member's current hyperparameters.
    bounds: where each may go (`perturb`).
    rng: the population's random generator.
    quantile: the fraction of the population at each end (at least one member each
      once there are two).
    **perturb_kwargs: `factors`, `resample_probability` (see `perturb`).

  Returns:
    The copies to make, bottom member first; none with fewer than two members, and none
    from a source that scored no better.

  Raises:
    ValueError: a quantile outside (0, 0.5].
  """
  if not 0 < quantile <= 0.5:
    raise ValueError(f'quantile must be in (0, 0.5], got {quantile}')
  members = sorted(scores, key=lambda m: (-math.inf if math.isnan(scores[m])
                                          else scores[m], m))
  if len(members) < 2:
    return []
  count = max(1, int(len(members) * quantile))
  bottom, top = members[:count], members[-count:]
  decisions = []
  for member in bottom:
    source = top[rng.integers(len(top))]
    if scores[member] >= scores[source]:  # a tie: nothing better to copy
      continue
    decisions.append(Exploit(member, source, perturb(hyperparameters[source], bounds, rng,
                                                     **perturb_kwargs)))
  return decisions


def smoothed(history: Sequence[float], window: int) -> float:
  """A member's score: the mean of its last `window` reported scores (NaN: none yet).

  Raises:
    ValueError: window < 1.
  """
  if window < 1:
    raise ValueError(f'score window must be >= 1 report, got {window}')
  recent = [score for score in history[-window:] if not math.isnan(score)]
  return float(np.mean(recent)) if recent else math.nan


def exploit_one(member: int, scores: Mapping[int, float],
                hyperparameters: Mapping[int, Mapping[str, Number]],
                bounds: Mapping[str, Bound], rng: np.random.Generator,
                quantile: float = QUANTILE, **perturb_kwargs) -> Optional[Exploit]:
  """An asynchronous decision: `member`, at its ready point, copies a top-`quantile`
  member if its own score is in the bottom `quantile` of the members' latest scores.

  Args:
    member: the member that reported.
    scores: the latest (smoothed) score of each member that has reported, `member`'s
      included; members yet to report are left out.
    hyperparameters, bounds, rng, quantile, **perturb_kwargs: as for
      `exploit_and_explore`.

  Returns:
    The copy `member` makes, or None (it carries on): also while fewer than two members
    have scores.
  """
  decisions = exploit_and_explore(scores, hyperparameters, bounds, rng, quantile,
                                  **perturb_kwargs)
  return next((d for d in decisions if d.member == member), None)


def replace_failed(member: int, scores: Mapping[int, float],
                   hyperparameters: Mapping[int, Mapping[str, Number]],
                   bounds: Mapping[str, Bound], rng: np.random.Generator,
                   quantile: float = QUANTILE, **perturb_kwargs) -> Optional[Exploit]:
  """What replaces a member whose job failed with an error: a copy of a random member
  of the population's top `quantile` (the others' latest scores), with that member's
  hyperparameters perturbed, as an exploit would take.

  Args:
    member: the member that failed.
    scores: every member's latest score (the failed one's is ignored; NaN: none yet).
    hyperparameters: every member's latest hyperparameters.
    bounds, rng, quantile, **perturb_kwargs: as for `exploit_and_explore`.

  Returns:
    The copy to make; None while no other member has a score (nothing to copy yet).
  """
  others = {m: s for m, s in scores.items() if m != member and not math.isnan(s)}
  if not others:
    return None
  ranked = sorted(others, key=lambda m: (others[m], m))
  top = ranked[-max(1, int(len(scores) * quantile)):]
  source = top[rng.integers(len(top))]
  return Exploit(member, source, perturb(hyperparameters[source], bounds, rng,
                                         **perturb_kwargs))


class Lineage:
  """The population's history, one JSON object per line, appended and flushed as it
  happens (a killed runner loses nothing it wrote)."""

  def __init__(self, path: str):
    self.path = path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

  def record(self, event: str, member: int, **fields: Any) -> None:
    """Appends one event: 'start' (hyperparameters), 'ready' (env_steps, score),
    'exploit' (source, env_steps, hyperparameters) or any other with its fields."""
    with open(self.path, 'a') as f:
      f.write(json.dumps({'event': event, 'member': member, **fields}) + '\n')
      f.flush()
      os.fsync(f.fileno())


def read(path: str) -> List[Dict[str, Any]]:
  """The lineage file's events, in order (a torn last line, from a kill mid-write, is
  left out).

  Raises:
    ValueError: a line before the last that is not JSON (the file is not a lineage).
  """
  with open(path) as f:
    lines = [line for line in f.read().split('\n') if line.strip()]
  events = []
  for number, line in enumerate(lines, 1):
    try:
      events.append(json.loads(line))
    except json.JSONDecodeError as e:
      if number == len(lines):
        break
      raise ValueError(f'{path}:{number} is not a lineage event: {e}') from None
  return events


def replay(path: str) -> Dict[int, List[Dict[str, Any]]]:
  """Each member's hyperparameter history from the lineage: a list of {'env_steps',
  'hyperparameters', 'source'} (source: None at the start or a fresh draw, else the
  member copied), from its 'start', 'exploit' and 'replace' events."""
  history: Dict[int, List[Dict[str, Any]]] = {}
  for event in read(path):
    if event['event'] in ('start', 'exploit', 'replace'):
      history.setdefault(event['member'], []).append(
          {'env_steps': event.get('env_steps', 0), 'source': event.get('source'),
           'hyperparameters': event['hyperparameters']})
  return history


def best_member(scores: Mapping[int, float]) -> Optional[int]:
  """The member with the highest score (None if none has one yet)."""
  scored = {m: s for m, s in scores.items() if not math.isnan(s)}
  return max(scored, key=lambda m: (scored[m], -m)) if scored else None


# -- Files the runner (population_runner.py) and its members share -----------------


def member_dir(pbt_dir: str, member: int) -> str:
  """Where member `member`'s start file, reports and decisions go."""
  return os.path.join(pbt_dir, f'member_{member}')


def write_json(path: str, value: Dict[str, Any]) -> None:
  """Writes `value` whole or not at all (a reader never sees half a file)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  temporary = f'{path}.tmp{os.getpid()}'
  with open(temporary, 'w') as f:
    json.dump(value, f)
    f.flush()
    os.fsync(f.fileno())
  os.replace(temporary, path)


def read_json(path: str) -> Optional[Dict[str, Any]]:
  """The file's value, or None while it does not exist."""
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    return None


def last_round(directory: str, kind: str) -> int:
  """The highest k of `directory`'s `<kind>_<k>.json` files (0 if none)."""
  rounds = [0]
  if os.path.isdir(directory):
    for name in os.listdir(directory):
      stem, _, extension = name.partition('.')
      prefix, _, number = stem.rpartition('_')
      if prefix == kind and extension == 'json' and number.isdigit():
        rounds.append(int(number))
  return max(rounds)


def define_ready_interval_flag() -> None:
  """--ready_interval, once per process: the runner (`learners.pbt`) and its members
  (`learners.pbt_member`) both take it, and a process may import both."""
  if 'ready_interval' not in flags.FLAGS:
    flags.DEFINE_integer('ready_interval', 50_000, 'Env steps between ready points (a '
                         "member's first evaluation at or past each multiple).")


def define_member_flags() -> None:
  """--pbt_dir, --member, --ready_interval and --decision_timeout_s, once per process:
  the one-process member (`learners.pbt_member`), the launcher that runs a launched member
  (`learners.launch`) and its trainer (`learners.train`) take them, and a process (a
  test, a notebook) may import all three."""
  if 'pbt_dir' in flags.FLAGS:
    return
  flags.DEFINE_string('pbt_dir', None, "A population's directory: this job is one of its "
                      'members (`learners.pbt`), which reports at ready points.')
  flags.DEFINE_integer('member', None, "This member's index in the population.")
  flags.DEFINE_float('decision_timeout_s', 3600.0, "Seconds a member waits for the "
                     "population's decision at a ready point.")
  define_ready_interval_flag()

"""solve_time.py's summary: per task, each measure's central value over seeds with its
bootstrap interval for tfrl and its peer side by side, the comparison of the two, as a
markdown table (solve_time.py prints it, docs/results/ shows it) and as JSON.

The measures, by how a task is judged:
  threshold tasks   env steps to the target and seconds of training to it (lower is
                    better; a seed that never reached it counts as infinite, so a central
                    value is finite only when enough seeds got there); compared as
                    tfrl / peer.
  budget tasks      the return at each of the task's env-step budgets (interpolated
                    between the evaluations either side; seeds that never got that far are left
                    out and the "reached" column says how many did), the return at the
                    end of the wall-clock budget (higher is better; compared as
                    tfrl - peer), and env steps per second of training (tfrl / peer).

The two sides are compared only where every run recorded one and the same evaluation
protocol (`tasks.Protocol`: the env-step grid, the episodes, the seeds, the success
rule); otherwise each measure's verdict says why not and no comparison is drawn.
"""
import dataclasses
import json
import math
from typing import Callable, List, Optional, Sequence

import stats  # benchmarks/stats.py


@dataclasses.dataclass(frozen=True)
class Settings:
  """How the summary's statistics are drawn (see stats.py)."""
  statistic: str = stats.STATISTIC
  confidence: float = stats.CONFIDENCE
  resamples: int = stats.RESAMPLES
  seed: int = stats.SEED


@dataclasses.dataclass(frozen=True)
class Measure:
  """One measure of a run: its name, how it is read off a run, and its direction."""
  name: str
  value: Callable[[object], Optional[float]]  # a Run -> the value, None where missing
  higher_is_better: bool
  how: str                                    # stats.compare: 'ratio' or 'difference'
  unit: str                                   # 'steps', 's', 'return', 'rate'


def return_at(curve: Sequence[Sequence[float]], env_steps: int) -> Optional[float]:
  """The return at `env_steps`: an evaluation's there, else interpolated linearly
  between the evaluations either side; None where the run did not get that far (or
  has no evaluation before it).

  The two sides evaluate on different grids (tfrl's SAC every 10,240 env steps, SB3's
  every 1,000): taking each side's last evaluation at or below the budget compared
  tfrl's at 40,684 env steps with SB3's at 50,000.

  Args:
    curve: (env steps, seconds, return) per evaluation, in order.
    env_steps: the budget.
  """
  for (before, _, before_return), (after, _, after_return) in zip(curve, curve[1:]):
    if before <= env_steps <= after:
      if after == before:
        return after_return
      share = (env_steps - before) / (after - before)
      return before_return + share * (after_return - before_return)
  if curve and curve[-1][0] == env_steps:
    return curve[-1][2]
  return None


def steps_to(curve: Sequence[Sequence[float]], target: float) -> float:
  """Env steps at which a curve first reaches `target`, interpolated between the
  evaluations either side; infinite where it never does.

  Args:
    curve: (env steps, seconds, return) per evaluation, in order.
    target: the return.
  """
  previous = None
  for point in curve:
    if point[2] >= target:
      if previous is None or previous[2] >= target:
        return float(point[0])
      share = (target - previous[2]) / (point[2] - previous[2])
      return previous[0] + share * (point[0] - previous[0])
    previous = point
  return math.inf


def measures(task, budget_seconds: float) -> List[Measure]:
  """The measures a task is judged on (see the module docstring).

  Args:
    task: solve_time.Task.
    budget_seconds: the wall-clock budget of the tasks without a threshold.
  """
  if task.threshold is not None:
    return [
        Measure('env steps to target',
                lambda run: run.env_steps if run.solved else math.inf, False, 'ratio',
                'steps'),
        Measure('seconds to target', lambda run: run.seconds if run.solved else math.inf,
                False, 'ratio', 's'),
    ]
  frames = task.frames_per_step
  at_budgets = [
      Measure(f'return at {steps * frames:,} {"frames" if frames > 1 else "env steps"}',
              lambda run, steps=steps: return_at(run.extra.get('curve') or [], steps),
              True, 'difference', 'return')
      for steps in task.env_step_budgets]
  return at_budgets + [
      Measure(f'return after {budget_seconds:g} s', lambda run: run.eval_return, True,
              'difference', 'return'),
      Measure(f'{"frames" if frames > 1 else "env steps"}/s',
              lambda run: (run.env_steps * frames / run.seconds
                           if run.env_steps and run.seconds else None),
              True, 'ratio', 'rate'),
  ]


def _side(runs, measure: Measure, settings: Settings) -> dict:
  """One side's values of a measure, their statistic and interval."""
  values = [measure.value(run) for run in runs]
  kept = [v for v in values if v is not None]
  side = {'values': values, 'seeds': [r.seed for r in runs],
          'reached': sum(math.isfinite(v) for v in kept), 'of': len(runs)}
  if kept:
    side.update(stats.interval(kept, settings.statistic, settings.confidence,
                               settings.resamples, settings.seed).as_dict())
  return side


def _verdict(measure: Measure, ours: dict, theirs: dict, comparison: dict) -> str:
  """PASS/MISS on the central values (a target also wants every tfrl seed to reach
  it), and whether the comparison's interval clears parity (1 for a ratio, 0 for a
  difference)."""
  if math.isnan(comparison['point']):
    return 'n/a'
  if measure.higher_is_better:
    ahead = ours['point'] >= theirs['point']
  else:
    ahead = ours['point'] <= theirs['point']
  if measure.unit in ('steps', 's'):  # to a target
    ahead = ahead and ours['reached'] == ours['of']
  parity = 1.0 if measure.how == 'ratio' else 0.0
  if math.isnan(comparison['low']):
    clear = 'interval n/a'
  elif comparison['low'] > parity or comparison['high'] < parity:
    clear = 'interval clear of parity'
  else:
    clear = 'parity inside interval'
  return f'{"PASS" if ahead else "MISS"}, {clear}'


def protocol_mismatch(runs) -> Optional[str]:
  """Why runs cannot be compared, or None where every one of them recorded one and the
  same evaluation protocol (`tasks.Protocol.as_dict`, in its `extra['protocol']`).

  Args:
    runs: both sides' `tasks.Run`s.

  Returns:
    'not compared: ...', naming the sides without a protocol or the protocols that
    differ; None where they agree.
  """
  missing = sorted({run.side for run in runs if not run.extra.get('protocol')})
  if missing:
    return (f'not compared: no evaluation protocol recorded ({" and ".join(missing)} '
            'runs, made before protocols were)')
  protocols = {}
  for run in runs:
    protocols.setdefault(json.dumps(run.extra['protocol'], sort_keys=True), set()).add(
        run.side)
  if len(protocols) > 1:
    return 'not compared: the evaluation protocols differ: ' + ' vs '.join(
        f'{"/".join(sorted(sides))} {protocol}' for protocol, sides in sorted(protocols.items()))
  return None


def summarize(algo: str, task, peer_name: Optional[str], tfrl_runs, peer_runs,
              budget_seconds: float, settings: Settings) -> dict:
  """A task's summary: per measure, both sides' statistics and their comparison.

  Args:
    algo: the task's name (solve_time's --algos).
    task: solve_time.Task.
    peer_name: the peer's name in the table; None where the task has no peer.
    tfrl_runs, peer_runs: solve_time.Run per seed (peer_runs may be empty).
    budget_seconds: the wall-clock budget of the tasks without a threshold.
    settings: the statistic and its bootstrap.

  Returns:
    A JSON-ready dict: the task, 'not_compared' (`protocol_mismatch`'s reason, or
    None), and per measure 'tfrl', 'peer' (values per seed, 'reached' of 'of' seeds,
    'point', 'low', 'high') and, where the protocols agree, 'comparison' ('how',
    'point', 'low', 'high'); a 'verdict' either way.
  """
  mismatch = protocol_mismatch([*tfrl_runs, *peer_runs]) if peer_runs else None
  rows = []
  for measure in measures(task, budget_seconds):
    row = {'measure': measure.name, 'higher_is_better': measure.higher_is_better,
           'unit': measure.unit, 'tfrl': _side(tfrl_runs, measure, settings)}
    if peer_runs:
      row['peer'] = _side(peer_runs, measure, settings)
      ours, theirs = ([v for v in row[side]['values'] if v is not None]
                      for side in ('tfrl', 'peer'))
      if mismatch:
        row['verdict'] = mismatch
      elif ours and theirs:
        row['comparison'] = {'how': measure.how, **stats.compare(
            ours, theirs, measure.how, settings.statistic, settings.confidence,
            settings.resamples, settings.seed).as_dict()}
        row['verdict'] = _verdict(measure, row['tfrl'], row['peer'], row['comparison'])
    rows.append(row)
  return {'algo': algo, 'env': task.env, 'config': task.config, 'peer': peer_name,
          'threshold': task.threshold, 'not_compared': mismatch, 'measures': rows}


def number(x: float, unit: str) -> str:
  """A value as the tables write it.

  Args:
    x: the value.
    unit: 'steps' and 'rate' (thousands separators), 's' (one decimal), 'ratio'
      ('0.45x'), 'difference' (signed), anything else a return (two decimals below
      10, else one).

  Returns:
    The text; an infinite time or count to a target is 'never', NaN 'n/a'.
  """
  if math.isnan(x):
    return 'n/a'
  if math.isinf(x):
    return 'never' if x > 0 else '-inf'
  if unit in ('steps', 'rate'):
    return f'{x:,.0f}'
  if unit == 's':
    return f'{x:.1f}'
  if unit == 'ratio':
    return f'{x:.2f}x'
  text = f'{x:.2f}' if abs(x) < 10 else f'{x:,.1f}'
  return f'+{text}' if unit == 'difference' and x >= 0 else text


def cell(interval: dict, unit: str) -> str:
  """A central value and its interval as the tables write them.

  Args:
    interval: {'point', 'low', 'high'} (stats.Interval.as_dict, or a side's summary).
    unit: as `number`.

  Returns:
    'point [low, high]'.
  """
  return (f'{number(interval["point"], unit)} '
          f'[{number(interval["low"], unit)}, {number(interval["high"], unit)}]')


def _side_cell(side: Optional[dict], unit: str) -> str:
  if side is None:
    return 'no peer'
  return cell(side, unit) if 'point' in side else 'none reached'


def markdown(summaries: List[dict], settings: Settings) -> List[str]:
  """The summaries as one markdown table, a row per task and measure.

  Args:
    summaries: `summarize`'s dicts.
    settings: named in the header (statistic, confidence).

  Returns:
    The table's lines.
  """
  name = stats.NAMES[settings.statistic]
  ci = f'[{settings.confidence:.0%} CI]'
  lines = [f'| task | measure | seeds reached (tfrl; peer) | tfrl {name} {ci} | '
           f'peer {name} {ci} | tfrl vs peer {ci} | verdict |',
           '| --- | --- | --- | --- | --- | --- | --- |']
  for task in summaries:
    threshold = '' if task['threshold'] is None else f' >= {task["threshold"]:g}'
    title = f'{task["algo"]}: {task["env"]}{threshold} vs {task["peer"] or "no peer"}'
    for row in task['measures']:
      ours, theirs, unit = row['tfrl'], row.get('peer'), row['unit']
      reached = f'{ours["reached"]}/{ours["of"]}' + (
          f'; {theirs["reached"]}/{theirs["of"]}' if theirs else '')
      comparison = row.get('comparison')
      comparison = cell(comparison, comparison['how']) if comparison else '-'
      cells = [title, row['measure'], reached, _side_cell(ours, unit),
               _side_cell(theirs, unit), comparison, row.get('verdict', '-')]
      lines.append('| ' + ' | '.join(cells) + ' |')
      title = ''  # the task's name on its first row only
  return lines


def write_json(path: str, summaries: List[dict], settings: Settings,
               header: dict) -> None:
  """Writes {'header', 'settings', 'tasks'} to `path` (replacing it).

  Args:
    path: the JSON file.
    summaries: `summarize`'s dicts.
    settings: the statistic and its bootstrap.
    header: what the run was (date, git, flags), recorded as given.
  """
  with open(path, 'w') as f:
    json.dump(_jsonable({'header': header, 'settings': dataclasses.asdict(settings),
                         'tasks': summaries}), f, indent=1)
    f.write('\n')


def _jsonable(x):
  """`x` with infinities and NaN as the strings 'inf', '-inf', 'nan' (JSON has none)."""
  if isinstance(x, dict):
    return {k: _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, float) and not math.isfinite(x):
    return str(x)
  return x

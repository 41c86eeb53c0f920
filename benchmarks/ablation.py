"""Which setting explains a gap: one solve_time task under several sets of gin bindings
("arms"), tfrl only, over seeds, each arm's return at the task's env-step budgets with
its bootstrap interval, against a baseline arm and, optionally, a peer's recorded runs.

    .venv/bin/python benchmarks/ablation.py --algo=ppo_halfcheetah \\
        --env_step_budgets=200000 --budget_seconds=600 --seeds=0,1,2,3,4 --jobs=2 \\
        --tfrl_gin_bindings='Experiment.num_train_steps = 400' \\
        --arm='config:' \\
        --arm='reward-normalized: Experiment.normalize_reward = True; PpoAgent.reward_scale = 1.0' \\
        --peer_runs=benchmarks/runs/ppo_halfcheetah_1m_3seeds.jsonl \\
        --out_dir=runs/ablation_ppo_halfcheetah

For a task with a target return, --to_target compares env steps to the target
instead (ratios; a seed that never got there counts as infinite).

Each (arm, seed) is one `solve_time.py --skip_peer` run on a CPU of its own (--jobs at
once, seeds in the outer loop, so an interrupted series still has every arm at the
first seeds); its Run is appended to OUT_DIR/<arm>.jsonl, and a run already there is not
run again (a series resumes). --report_only re-reports what OUT_DIR holds. The tables
use benchmarks/stats.py (IQM with a 95% percentile bootstrap by default; the two
sides of a comparison resampled independently), as solve_time's do.

Results: docs/results/, written by benchmarks/results_pages.py from the runs kept in
benchmarks/runs/ (a <name>.meta.json beside each says how they were made).
"""
import concurrent.futures
import dataclasses
import json
import math
import os
import subprocess
import time
from typing import Callable, List, Optional, Sequence, Tuple

from absl import app
from absl import flags

import common  # benchmarks/common.py: repository on sys.path
import stats
import summary

flags.DEFINE_string('algo', 'ppo_halfcheetah', "solve_time.py's task (its --algos).")
flags.DEFINE_multi_string('arm', [], "'name: binding; binding; ...' (gin bindings of "
                          "this arm, none for the config as it is); the first is the "
                          'baseline unless --baseline says.')
flags.DEFINE_string('baseline', None, 'The arm the others are compared with.')
flags.DEFINE_list('seeds', ['0', '1', '2', '3', '4'], 'Seeds of every arm.')
flags.DEFINE_integer('jobs', 2, 'Runs at once, each pinned to a CPU of its own.')
flags.DEFINE_list('env_step_budgets', ['200000'], 'Env steps the returns are read at.')
flags.DEFINE_float('budget_seconds', 600.0, "Each run's training time cap (s): "
                   "solve_time's --budget_seconds, and its --max_seconds on target tasks.")
flags.DEFINE_multi_string('tfrl_gin_bindings', [], 'Bindings every arm takes first.')
flags.DEFINE_string('peer_runs', None, 'A solve_time --json_out file whose runs of '
                    '--peer_algo on --peer_side each arm is also compared with.')
flags.DEFINE_string('peer_algo', None, "The --peer_runs' task (default: --algo), e.g. "
                    "ppo_breakout to hold APPO's arms against PPO's runs.")
flags.DEFINE_string('peer_side', 'SB3', "The --peer_runs' side: 'SB3', or 'tfrl' (another "
                    "config's tfrl runs).")
flags.DEFINE_string('out_dir', os.path.join(common.REPO, 'runs', 'ablation'),
                    'Where each arm\'s runs go (<arm>.jsonl) and are read from.')
flags.DEFINE_bool('to_target', False, "For a task with a target return (dqn_lunarlander, "
                  "ppo_lunarlander, ...): compare each arm's env steps to the target (a "
                  'seed that never reached it counts as infinite), as solve_time does, '
                  'not returns at --env_step_budgets.')
flags.DEFINE_bool('report_only', False, 'Report the runs in --out_dir; run nothing.')
flags.DEFINE_string('tfrl_python', os.path.join(common.REPO, '.venv', 'bin', 'python'),
                    "The interpreter of tfrl's runs.")
FLAGS = flags.FLAGS

SOLVE_TIME = os.path.join(common.REPO, 'benchmarks', 'solve_time.py')


@dataclasses.dataclass(frozen=True)
class Arm:
  name: str
  bindings: Tuple[str, ...]


def parse_arm(text: str) -> Arm:
  """'name: b1; b2' -> Arm('name', ('b1', 'b2')).

  Raises:
    app.UsageError: no name, or a name that cannot be a file name.
  """
  name, _, rest = text.partition(':')
  name = name.strip()
  if not name or not all(c.isalnum() or c in '-_.' for c in name):
    raise app.UsageError(f"--arm {text!r}: expected 'name: binding; ...' with a name of "
                         'letters, digits, -, _ or .')
  return Arm(name, tuple(b.strip() for b in rest.split(';') if b.strip()))


def _arm_file(arm: Arm) -> str:
  return os.path.join(FLAGS.out_dir, arm.name + '.jsonl')


def load_runs(path: str, algo: str, side: str = 'tfrl') -> List[dict]:
  """The runs of `algo` on `side` recorded in a solve_time JSONL file ([] if none)."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    runs = [json.loads(line) for line in f if line.strip()]
  return [r for r in runs if r['algo'] == algo and r['side'] == side]


def run_one(arm: Arm, seed: int, cpu: Optional[int]) -> str:
  """One solve_time run of `arm` at `seed` (pinned to `cpu`); its Run is appended to the
  arm's file. Returns solve_time's last output line."""
  cmd = [FLAGS.tfrl_python, SOLVE_TIME, f'--algos={FLAGS.algo}', f'--seeds={seed}',
         '--jobs=1', '--skip_peer', '--summary_json=', f'--json_out={_arm_file(arm)}',
         f'--budget_seconds={FLAGS.budget_seconds}',
         f'--max_seconds={FLAGS.budget_seconds}',
         f'--env_step_budgets={",".join(FLAGS.env_step_budgets)}',
         f'--tfrl_python={FLAGS.tfrl_python}']
  cmd += [f'--tfrl_gin_bindings={b}' for b in (*FLAGS.tfrl_gin_bindings, *arm.bindings)]
  pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
  done = subprocess.run(cmd, cwd=common.REPO, capture_output=True, text=True,
                        preexec_fn=pin, check=False)
  lines = [l for l in (done.stdout + done.stderr).splitlines() if l.strip()]
  if done.returncode:
    return f'FAILED (exit {done.returncode}): {lines[-1] if lines else ""}'
  # solve_time's line for the run: '  <algo> seed <n> tfrl: solved=... env_steps=...'.
  return next((l.strip() for l in lines if ' tfrl: ' in l), lines[-1] if lines else '')


def run_arms(arms: Sequence[Arm], seeds: Sequence[int]) -> None:
  """Every (arm, seed) not yet in its file, seeds in the outer loop, --jobs at once."""
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  todo = [(arm, seed) for seed in seeds for arm in arms
          if seed not in {r['seed'] for r in load_runs(_arm_file(arm), FLAGS.algo)}]
  cpus = sorted(os.sched_getaffinity(0))[:FLAGS.jobs] if FLAGS.jobs > 1 else [None]
  free = list(cpus)
  print(f'{len(todo)} runs to do on {len(cpus)} CPU(s)', flush=True)
  with concurrent.futures.ThreadPoolExecutor(len(cpus)) as pool:
    running = {}
    while todo or running:
      while todo and free:
        arm, seed = todo.pop(0)
        cpu = free.pop(0)
        running[pool.submit(run_one, arm, seed, cpu)] = (arm, seed, cpu, time.time())
      finished, _ = concurrent.futures.wait(
          running, return_when=concurrent.futures.FIRST_COMPLETED)
      for future in finished:
        arm, seed, cpu, start = running.pop(future)
        free.append(cpu)
        print(f'{arm.name} seed {seed} ({time.time() - start:.0f} s): {future.result()}',
              flush=True)


def _digits(*values: float) -> int:
  """Decimals that show returns' differences: none above 100 (MuJoCo), one below
  (Atari scores)."""
  return 0 if max(abs(v) for v in values if math.isfinite(v)) >= 100 else 1


def _number(x: float, digits: int) -> str:
  return 'never' if x == math.inf else f'{x:,.{digits}f}'


def _cell(interval: stats.Interval) -> str:
  values = (interval.point, interval.low, interval.high)
  d = _digits(*values) if any(math.isfinite(v) for v in values) else 0
  return '{} [{}, {}]'.format(*(_number(v, d) for v in values))


def returns_at(runs: Sequence[dict], env_steps: int) -> List[float]:
  """Each run's return at `env_steps` (runs that did not get there left out)."""
  values = [summary.return_at(r['extra'].get('curve', []), env_steps) for r in runs]
  return [v for v in values if v is not None]


def steps_to_target(runs: Sequence[dict]) -> List[float]:
  """Each run's env steps to its task's target return; infinite where it never got there
  (solve_time's 'env steps to target')."""
  return [r['env_steps'] if r['solved'] else math.inf for r in runs]


def _measures() -> List[Tuple[str, Callable[[Sequence[dict]], List[float]], str]]:
  """(title, one value per run, how arms compare) of each table."""
  statistic = f'{stats.STATISTIC.upper()} [{stats.CONFIDENCE:.0%} CI]'
  if FLAGS.to_target:
    return [(f'Env steps to the target ({FLAGS.algo}; {statistic}; ratios)',
             steps_to_target, 'ratio')]
  return [(f'Return at {budget:,} env steps ({FLAGS.algo}; {statistic})',
           lambda runs, budget=budget: returns_at(runs, budget), 'difference')
          for budget in (int(b) for b in FLAGS.env_step_budgets)]


def report(arms: Sequence[Arm], baseline: Arm) -> List[str]:
  """A markdown table per measure (the return at each env-step budget, or with
  --to_target the env steps to the target): each arm's IQM [CI], its difference (or
  ratio) to the baseline arm and to the peer's runs."""
  peer = (load_runs(FLAGS.peer_runs, FLAGS.peer_algo or FLAGS.algo, FLAGS.peer_side)
          if FLAGS.peer_runs else [])
  peer_name = f'{FLAGS.peer_side} {FLAGS.peer_algo or FLAGS.algo}'
  lines = []
  for title, values_of, how in _measures():
    base = values_of(load_runs(_arm_file(baseline), FLAGS.algo))
    theirs = values_of(peer)
    lines += ['', title, '',
              f'| arm | seeds | {"env steps" if how == "ratio" else "return"} | '
              f'vs {baseline.name} |' +
              (f' vs {peer_name} ({len(theirs)} seeds: {_cell(stats.interval(theirs))}) |'
               if theirs else ''),
              '| --- | --- | --- | --- |' + (' --- |' if theirs else '')]
    for arm in arms:
      ours = values_of(load_runs(_arm_file(arm), FLAGS.algo))
      if not ours:
        lines.append(f'| {arm.name} | 0 | - | - |' + (' - |' if theirs else ''))
        continue
      row = f'| {arm.name} | {len(ours)} | {_cell(stats.interval(ours))} | '
      row += (_comparison(ours, base, how) if arm != baseline else '-') + ' |'
      if theirs:
        row += f' {_comparison(ours, theirs, how)} |'
      lines.append(row)
  lines += ['', 'Arms: ' + '; '.join(
      f'{arm.name} = {", ".join(arm.bindings) or "the config as it is"}' for arm in arms)]
  return lines


def _comparison(ours: Sequence[float], theirs: Sequence[float], how: str) -> str:
  if not ours or not theirs:
    return '-'
  d = stats.compare(ours, theirs, how)
  if how == 'ratio':  # inf: a side's statistic never reached; nan: neither did
    times = lambda x: 'never' if x == math.inf else 'n/a' if math.isnan(x) else f'{x:.2f}x'
    return '{} [{}, {}]'.format(*(times(v) for v in (d.point, d.low, d.high)))
  n = _digits(*ours, *theirs)
  return f'{d.point:+,.{n}f} [{d.low:+,.{n}f}, {d.high:+,.{n}f}]'


def main(argv):
  del argv
  if not FLAGS.arm:
    raise app.UsageError('Give at least one --arm.')
  arms = [parse_arm(text) for text in FLAGS.arm]
  names = [arm.name for arm in arms]
  if len(set(names)) != len(names):
    raise app.UsageError(f'Arm names repeat: {names}.')
  baseline = arms[0] if FLAGS.baseline is None else next(
      (arm for arm in arms if arm.name == FLAGS.baseline), None)
  if baseline is None:
    raise app.UsageError(f'--baseline {FLAGS.baseline!r} is not an arm ({names}).')
  if not FLAGS.report_only:
    run_arms(arms, [int(s) for s in FLAGS.seeds])
  print('\n'.join(report(arms, baseline)))


if __name__ == '__main__':
  app.run(main)

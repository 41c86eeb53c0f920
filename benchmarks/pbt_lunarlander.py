"""Population-based training against its own starting points.

For each seed:

  1. tuned       the config alone (`ppo_lunarlander.gin`'s tuned settings): the env steps
                 it needs to reach and confirm its target set each run's budget B
  2. population  `tfrl-pbt` with `--population_size` members whose initial settings are
                 drawn from `--bounds` (learning rate log-uniform in [1e-5, 1e-2], entropy
                 cost uniform in [0, 0.05]), B env steps per member; it ends when a member
                 reaches and confirms the target
  3. alone       each member's initial settings trained alone (same seed, same budget B),
                 as `<binding_prefix>.<name> = value` gin bindings

and prints, per seed, B, whether and where the population's best member reached the
target (its own env steps), and how many of the starting points reached it alone. The
criterion: the population reaches the target within B where at least half of its
starting points alone do not.

    .venv/bin/python benchmarks/pbt_lunarlander.py --seeds=0,1,2

A run whose summary exists in --runs_dir is read, not run again.

Results: docs/results/, written by benchmarks/results_pages.py from the runs kept in
benchmarks/runs/ (a <name>.meta.json beside each says how they were made).
"""
import glob
import json
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags
import numpy as np

import pbt_criterion  # benchmarks/pbt_criterion.py

REPO = common.REPO

flags.DEFINE_string('gin_file', 'ppo_lunarlander.gin', 'The tuned config.')
flags.DEFINE_list('seeds', ['0'], 'Seeds of the whole experiment.')
flags.DEFINE_integer('population_size', 4, 'Members.')
flags.DEFINE_integer('ready_interval', 50_000, 'Env steps between ready points.')
flags.DEFINE_string('bounds', 'learning_rate=1e-5:1e-2,entropy_cost=0:0.05:linear',
                    'tfrl-pbt --bounds.')
flags.DEFINE_string('binding_prefix', 'create_ppo_agent',
                    'Where a starting point trained alone binds its settings.')
flags.DEFINE_list('gin_bindings', [], 'Extra bindings for every run (a smoke run: a '
                  'small num_train_steps and target).')
flags.DEFINE_enum('member_program', 'train_eval', ['train_eval', 'launch'],
                  "The population's members: one-process jobs, or launched jobs.")
flags.DEFINE_integer('member_collectors', 1, 'Collectors of each launched member.')
flags.DEFINE_enum('mode', 'sync', ['sync', 'async'], "tfrl-pbt's --mode: rounds at a "
                  'barrier, or each report decided at once (its populations run beside the '
                  "other mode's, against the same tuned run and starting points).")
flags.DEFINE_bool('alone', True, "Train each starting point alone after the population "
                  '(off: populations only, as when comparing the modes; no criterion).')
flags.DEFINE_string('runs_dir', os.path.join(REPO, 'benchmarks', 'runs', 'pbt'),
                    "Where each run's directory and summary go.")
flags.DEFINE_bool('report_only', False, 'Report and draw what --runs_dir holds; run '
                  'nothing.')
flags.DEFINE_string('png', os.path.join(REPO, 'benchmarks', 'curves', 'pbt_lunarlander.png'),
                    'Learning curves, a panel per seed ("" for none).')
FLAGS = flags.FLAGS

_TRAINED = re.compile(r'Trained to step (\d+) \((\d+) env steps\)')


def _train_eval(root: str, bindings: List[str]) -> Dict[str, Any]:
  """One job alone; its exit status, train and env steps and wall-clock seconds."""
  start = time.monotonic()
  result = common.run_python(
      ['-m', 'learners.train_eval', f'--root_dir={root}', '--overwrite',
       f'--gin_file={FLAGS.gin_file}', '--progress_bar=off'] +
      [f'--gin_bindings={b}' for b in bindings], cwd=REPO)
  match = _TRAINED.search(result.stdout)
  return {'reached': result.returncode == 0, 'returncode': result.returncode,
          'train_step': int(match.group(1)) if match else None,
          'env_steps': int(match.group(2)) if match else None,
          'seconds': time.monotonic() - start,
          'log_tail': (result.stdout + result.stderr)[-1500:] if not match else ''}


def _cached(path: str, run) -> Optional[Dict[str, Any]]:
  """The summary at `path`, else `run()`'s, saved there (None with --report_only)."""
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  if FLAGS.report_only:
    return None
  value = run()
  with open(path, 'w') as f:
    json.dump(value, f, indent=1)
  return value


def _population(root: str, seed: int, budget_steps: int) -> Dict[str, Any]:
  start = time.monotonic()
  result = common.run_python(
      ['-m', 'learners.pbt', f'--root_dir={root}',
       f'--gin_file={FLAGS.gin_file}', f'--population_size={FLAGS.population_size}',
       f'--ready_interval={FLAGS.ready_interval}', f'--bounds={FLAGS.bounds}',
       f'--seed={seed}', f'--member_program={FLAGS.member_program}',
       f'--member_collectors={FLAGS.member_collectors}', f'--mode={FLAGS.mode}'] +
      [f'--gin_bindings={b}' for b in FLAGS.gin_bindings +
       [f'Experiment.num_train_steps = {budget_steps}']],
      cwd=REPO)
  from learners.population import population  # pylint: disable=g-import-not-at-top
  events = population.read(os.path.join(root, 'pbt', 'lineage.jsonl'))
  ends = [e for e in events if e['event'] == 'end']
  reached = [e for e in ends if e.get('reached_target')]
  return {'returncode': result.returncode, 'seconds': time.monotonic() - start,
          'reached': bool(reached),
          'env_steps': min((e['env_steps'] for e in reached), default=None),
          'member': reached[0]['member'] if reached else None,
          'copies': sum(e['event'] == 'exploit' for e in events),
          'starts': {e['member']: e['hyperparameters'] for e in events
                     if e['event'] == 'start'},
          'log_tail': '' if result.returncode == 0 else result.stderr[-1500:]}


def _population_dir() -> str:
  """Where a seed's population runs: launched members beside one-process ones, and
  asynchronous beside synchronous, so all compare with the same tuned run and starting
  points."""
  name = 'population' if FLAGS.member_program == 'train_eval' else 'population_launch'
  return name if FLAGS.mode == 'sync' else f'{name}_async'


def _seed(seed: int) -> Dict[str, Any]:
  runs = os.path.join(FLAGS.runs_dir, f's{seed}')
  os.makedirs(runs, exist_ok=True)
  tuned = _cached(os.path.join(runs, 'tuned.json'), lambda: _train_eval(
      os.path.join(runs, 'tuned'), FLAGS.gin_bindings + [f'Experiment.seed = {seed}']))
  if tuned is None or not tuned['reached']:
    return {'seed': seed, 'tuned': tuned}
  budget_steps = tuned['train_step']  # B env steps: the tuned run's train steps
  pbt = _cached(os.path.join(runs, f'{_population_dir()}.json'), lambda: _population(
      os.path.join(runs, _population_dir()), seed, budget_steps))
  if pbt is None:
    return {'seed': seed, 'tuned': tuned}
  if not FLAGS.alone:
    return {'seed': seed, 'tuned': tuned, 'population': pbt, 'alone': None}
  alone = {}
  for member, start in sorted(pbt['starts'].items(), key=lambda kv: int(kv[0])):
    bindings = FLAGS.gin_bindings + [
        f'Experiment.seed = {seed * 1000 + int(member)}',
        f'Experiment.num_train_steps = {budget_steps}'] + [
            f'{FLAGS.binding_prefix}.{name} = {value!r}' for name, value in start.items()]
    alone[member] = _cached(os.path.join(runs, f'alone_{member}.json'), lambda b=bindings,
                            m=member: _train_eval(os.path.join(runs, f'alone_{m}'), b))
  return {'seed': seed, 'tuned': tuned, 'population': pbt, 'alone': alone}


def _eval_curve(run_dir: str) -> List[Tuple[int, float]]:
  """(env steps, eval return) of every evaluation a job wrote to its TensorBoard (every
  life of a restarted job), in order of env steps."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top (start-up of the others)
  points = []
  for path in glob.glob(os.path.join(run_dir, 'eval', 'events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == 'eval/AverageReturn_vs_env_steps':
          points.append((event.step, float(tf.make_ndarray(value.tensor))))
  return sorted(points)


def _plot(results: List[Dict[str, Any]], path: str) -> None:
  """A panel per seed: the tuned config, each starting point alone (dashed) and each
  population member (solid, an x where it took another member's weights), the target
  and the budget B."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from learners.population import population  # pylint: disable=g-import-not-at-top
  results = [r for r in results if 'population' in r]
  # The summaries kept in the repository (benchmarks/runs/pbt) have no runs to draw.
  drawable = [r for r in results if os.path.exists(os.path.join(
      FLAGS.runs_dir, f's{r["seed"]}', _population_dir(), 'pbt', 'lineage.jsonl'))]
  missing = [r['seed'] for r in results if r not in drawable]
  if missing:
    print(f'No curves for seeds {missing}: {FLAGS.runs_dir} has their summaries, not '
          'their runs.')
  results = drawable
  if not results:
    return
  figure, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8),
                              squeeze=False, sharey=True)
  for axis, result in zip(axes[0], results):
    runs = os.path.join(FLAGS.runs_dir, f's{result["seed"]}')
    tuned = _eval_curve(os.path.join(runs, 'tuned'))
    if tuned:  # (a summary without its run: no curve)
      axis.plot(*zip(*tuned), color='black', linewidth=1.2, label='tuned config')
    copies = [e for e in population.read(os.path.join(runs, _population_dir(), 'pbt',
                                                      'lineage.jsonl'))
              if e['event'] == 'exploit']
    for index, member in enumerate(sorted(result['population']['starts'], key=int)):
      color = f'C{index}'
      alone = _eval_curve(os.path.join(runs, f'alone_{member}')) if result['alone'] else []
      if alone:
        axis.plot(*zip(*alone), color=color, linestyle='--', linewidth=0.8, alpha=0.7,
                  label='alone' if index == 0 else None)
      curve = _eval_curve(os.path.join(runs, _population_dir(), f'member_{member}'))
      if curve:
        axis.plot(*zip(*curve), color=color, linewidth=1.4, label=f'member {member}')
      steps = [c['env_steps'] for c in copies if str(c['member']) == member and curve]
      axis.plot(steps, [float(np.interp(x, *zip(*curve))) for x in steps], 'x',
                color=color, markersize=8)
    axis.axhline(200, color='grey', linestyle=':', linewidth=0.8)
    axis.set_ylim(-600, 320)  # a hovering lander's returns fall to the thousands: cut
    axis.axvline(result['tuned']['env_steps'], color='grey', linestyle='-.', linewidth=0.8)
    axis.set_title(f'seed {result["seed"]} (x: a copy; dash-dot: budget B)', fontsize=9)
    axis.set_xlabel('env steps per member')
  axes[0][0].set_ylabel('eval return (20 episodes)')
  axes[0][0].legend(fontsize=7)
  figure.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  figure.savefig(path, dpi=90)
  print(f'Curves: {path}')


def _report(result: Dict[str, Any]) -> str:
  tuned = result['tuned']
  if tuned is None:
    return f"seed {result['seed']}: not run (--report_only)"
  if 'population' not in result:
    return (f"seed {result['seed']}: " + ('the population not run (--report_only)'
            if tuned['reached'] else f'the tuned config did not reach its target ({tuned})'))
  pbt, alone = result['population'], result['alone']
  where = (f"member {pbt['member']} at {pbt['env_steps']:,} env steps" if pbt['reached']
           else 'not reached')
  head = (f"seed {result['seed']}: budget B = {tuned['env_steps']:,} env steps per run "
          f"({tuned['train_step']} train steps, the tuned config's) | {FLAGS.mode} "
          f"population: {where}, {pbt['copies']} copies, {pbt['seconds']:.0f} s")
  if alone is None:
    return head + ' | starting points not run alone (--noalone)'
  solo = sum(run['reached'] for run in alone.values() if run is not None)
  each = ', '.join('not run' if run is None else str(run['env_steps']) if run['reached']
                   else 'no' for run in alone.values())
  return (f"{head} | starting points alone: {solo} of {len(alone)} reached within B "
          f"({each}) | criterion {pbt_criterion.criterion(pbt, alone)}")


def main(argv):
  del argv
  print(f'PBT on {FLAGS.gin_file}: population {FLAGS.population_size}, bounds '
        f'{FLAGS.bounds}, ready every {FLAGS.ready_interval:,} env steps; seeds '
        f'{",".join(FLAGS.seeds)}', flush=True)
  met, results = 0, []
  for seed in FLAGS.seeds:
    results.append(_seed(int(seed)))
    line = _report(results[-1])
    met += 'criterion MET' in line
    print(line, flush=True)
  if FLAGS.alone:
    print(f'criterion met on {met} of {len(FLAGS.seeds)} seeds')
  reached = [r for r in results if (r.get('population') or {}).get('reached')]
  if reached:
    ratios = [r['population']['env_steps'] / r['tuned']['env_steps'] for r in reached]
    print(f'population best member / tuned config, env steps to the target: '
          f'{", ".join(f"{x:.2f}" for x in ratios)} (median {np.median(ratios):.2f}, '
          f'{len(reached)} of {sum(bool(r.get("population")) for r in results)} populations '
          'reached)')
  if FLAGS.png:
    _plot(results, FLAGS.png)


if __name__ == '__main__':
  app.run(main)

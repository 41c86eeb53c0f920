"""Hybrid SAC on HalfCheetah-v5: online learning that starts from a dataset.

RLPD's recipe (Ball et al. 2023) on tfrl's SAC (`sac_halfcheetah.gin`): each batch is
half rows of a dataset (`TransitionReplay.dataset_fraction = 0.5`, symmetric sampling)
and half fresh ones, several gradient steps per env step (--utd), a short random
warm-up (--warmup_steps), and with --critic_layer_norm RLPD's layer-normalized critic
(`tfrl.networks.critics`). The dataset is benchmarks/offline.py's
"halfcheetah_medium_replay": everything tfrl's SAC collected until its evaluation
reached about a third of its final return.

The bar: online SAC's return at 150,000 env steps (the tfrl runs of --online_runs, the
same config on this machine, docs/results/sac.md), reached in at most a third of those
env steps. Reported: each seed's env steps to that
return (interpolated between evaluations; a seed that never got there counts as
infinite), how many seeds got there within the bar, and each seed's return at 50,000
env steps; IQM (the interquartile mean, `stats.STATISTIC`) and 95% bootstrap interval
over seeds.

    .venv/bin/python benchmarks/offline.py --stages=datasets \
        --datasets=halfcheetah_medium_replay     # once: the dataset
    .venv/bin/python benchmarks/hybrid.py --seeds=0,1,2 --jobs=2

Each run's line in --hybrid_out names the dataset's content checksum
(`dataset_checksum`, `tfrl.datasets.rlds.checksum`) and the summary prints it. A seed
there counts as done, and is summarized, only on the dataset as it is now: a line of
another checksum, or of none, is run again.

The defaults are the best measured recipe, the one of both records on
docs/results/hybrid.md; the pilots ran --nocritic_layer_norm --warmup_steps=5000
--dataset_only_steps=0.

Results: docs/results/, written by benchmarks/results_pages.py from the runs kept in
benchmarks/runs/ (a <name>.meta.json beside each says how they were made).
"""
import json
import math
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags

import curves  # benchmarks/curves.py
import offline  # benchmarks/offline.py: its data dir, --seeds, --jobs, runs in a process
import stats  # benchmarks/stats.py
import summary  # benchmarks/summary.py

REPO = common.REPO

flags.DEFINE_integer('env_steps', 50_000, "Env steps of each hybrid run (the bar: a third of "
                     "online SAC's 150,000).")
flags.DEFINE_integer('utd', 4, 'Gradient steps per env step (RLPD: 20 with LayerNorm '
                     'critics and an ensemble; 4 in its smaller settings).')
flags.DEFINE_bool('critic_layer_norm', True, "RLPD's layer-normalized critic "
                  '(create_sac_agent.critic_layer_norm).')
flags.DEFINE_integer('warmup_steps', 1_000, 'Random-action env steps before training.')
flags.DEFINE_float('fraction', 0.5, 'Share of each batch drawn from the dataset.')
flags.DEFINE_integer('dataset_only_steps', 10_240, "ALF's rl_train_after_update_steps: gradient "
                     'steps on dataset rows alone before the first env step '
                     '(TransitionReplay.dataset_only_steps); they cost no env steps.')
flags.DEFINE_integer('eval_every', 5_000, 'Env steps between evaluations (about).')
flags.DEFINE_integer('online_env_steps', 150_000, "Online SAC's env steps whose return "
                     'is the bar.')
flags.DEFINE_string('online_runs', os.path.join(
    REPO, 'benchmarks', 'runs', 'sac_halfcheetah_1600s_jobs2.jsonl'),
                    "solve_time.py's runs of online SAC (the tfrl side is read).")
flags.DEFINE_string('hybrid_out', os.path.join(REPO, 'benchmarks', 'runs', 'hybrid.jsonl'),
                    'One line per hybrid run (a seed already there, of these settings '
                    'and on the dataset as it is now, is not run again).')
flags.DEFINE_string('hybrid_runs_dir', os.path.join(REPO, 'runs', 'hybrid'),
                    "The hybrid runs' root_dirs and logs.")
flags.DEFINE_string('png', os.path.join(REPO, 'benchmarks', 'curves',
                                        'hybrid_halfcheetah.png'), 'Curves (empty: none).')

FLAGS = flags.FLAGS

DATASET = 'halfcheetah_medium_replay'
VECTOR_STEP = 64  # sac_halfcheetah.gin: 16 vector steps of 4 envs per iteration


def bindings(seed: int) -> List[str]:
  """The hybrid run's settings on top of sac_halfcheetah.gin."""
  per_iteration = VECTOR_STEP * FLAGS.utd
  # One iteration more than the vector steps: gymnasium's next-step autoreset spends one
  # vector step per episode end that is no env step, and the run must pass env_steps.
  iterations = math.ceil((FLAGS.env_steps - FLAGS.warmup_steps) / VECTOR_STEP) + 1
  return [f"Experiment.dataset_dir = '{offline.path(DATASET)}'",
          f'TransitionReplay.dataset_fraction = {FLAGS.fraction}',
          f'TransitionReplay.dataset_only_steps = {FLAGS.dataset_only_steps}',
          f'Experiment.seed = {seed}',
          f'Experiment.initial_collect_steps = {FLAGS.warmup_steps}',
          f'Experiment.train_steps_per_iteration = {per_iteration}',
          f'Experiment.num_train_steps = '
          f'{FLAGS.dataset_only_steps + iterations * per_iteration}',
          f'Experiment.eval_interval = '
          f'{max(1, FLAGS.eval_every // VECTOR_STEP) * per_iteration}',
          f'create_sac_agent.critic_layer_norm = {FLAGS.critic_layer_norm}',
          *FLAGS.train_bindings]


def settings() -> Dict[str, Any]:
  """What makes runs comparable: a row of the JSONL with other settings is another
  experiment's."""
  return dict(utd=FLAGS.utd, fraction=FLAGS.fraction, warmup_steps=FLAGS.warmup_steps,
              critic_layer_norm=FLAGS.critic_layer_norm,
              dataset_only_steps=FLAGS.dataset_only_steps)


def same_run(record: Dict[str, Any], checksum: str) -> bool:
  """Whether a --hybrid_out line is a run of these settings on the dataset as it is now:
  one that is done (not run again) and reported.

  Args:
    record: a --hybrid_out line.
    checksum: the dataset's content checksum now (`offline.dataset_checksum`).

  Returns:
    Whether it has these settings() and trained on that data (`offline.ran_on`: a line
    without a checksum does not count).
  """
  return (all(record.get(k, False) == v for k, v in settings().items())
          and offline.ran_on(record, checksum))


def hybrid_run(seed: int, cpu: Optional[int]) -> Dict[str, Any]:
  """One seed's run (pinned to `cpu`); its curve is (env steps, seconds, return)."""
  name = (f"sac_hybrid{'_layernorm' if FLAGS.critic_layer_norm else ''}"
          f"{f'_first{FLAGS.dataset_only_steps}' if FLAGS.dataset_only_steps else ''}"
          f'_warmup{FLAGS.warmup_steps}_s{seed}')
  root = os.path.join(FLAGS.hybrid_runs_dir, name)
  os.makedirs(FLAGS.hybrid_runs_dir, exist_ok=True)
  print(f'run hybrid SAC seed {seed} (cpu {cpu}) ...', flush=True)
  offline.run_logged(f'hybrid SAC, seed {seed}', [
      sys.executable, '-c', offline.TFRL_RUN, root, 'sac_halfcheetah.gin',
      json.dumps(bindings(seed)), root + '.json'], root + '.log', cpu)
  with open(root + '.json') as f:
    result = json.load(f)
  curve = [(row['env_steps'], row['seconds'], row['eval_return'])
           for row in result['history']]
  checksum = offline.dataset_checksum(DATASET)
  print(f'done hybrid SAC seed {seed}: return {curve[-1][2]:.1f} at {curve[-1][0]:,} env '
        f"steps, {result['seconds']:.0f} s (dataset checksum {checksum})", flush=True)
  return {'seed': seed, **settings(), 'dataset': DATASET, 'dataset_checksum': checksum,
          'curve': curve, 'seconds': result['seconds'], 'load': common.load_1min()}


def online_curves() -> List[List[List[float]]]:
  """The tfrl side's curves of --online_runs (online SAC, same config)."""
  with open(FLAGS.online_runs) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [row['extra']['curve'] for row in rows
          if row['side'] == 'tfrl' and row['algo'] == 'sac_halfcheetah']


def _cell(values: Sequence[Optional[float]]) -> str:
  """Central value [95% CI] of the values there (None: a run that did not get so far)."""
  there = [v for v in values if v is not None]
  if not there:
    return f'none of {len(values)} got there'
  interval = stats.interval(there)
  return (f'{interval.point:,.0f} [{interval.low:,.0f}, {interval.high:,.0f}]'
          + (f' ({len(there)} of {len(values)} got there)' if len(there) < len(values) else ''))


def _ratio_cell(ratios: Sequence[float]) -> str:
  """Median and range of (online, hybrid) pairs' ratios; an online seed that never got
  there counts as infinite."""
  if not ratios:
    return 'none'
  return (f'median {stats.median(ratios):.1f}x, range {min(ratios):.1f}x-{max(ratios):.1f}x '
          f'over {len(ratios)} pairs')


def report(runs: List[Dict[str, Any]]) -> None:
  """The bar, each seed's env steps to it, and the return at a third of the steps."""
  online = online_curves()
  budget, third = FLAGS.online_env_steps, FLAGS.online_env_steps // 3
  at_budget = [summary.return_at(curve, budget) for curve in online]
  bar = stats.interval([r for r in at_budget if r is not None]).point
  print(f"online SAC's return at {budget:,} env steps ({len(online)} seeds, "
        f'{os.path.relpath(FLAGS.online_runs, REPO)}): {_cell(at_budget)}')
  hybrid_steps = [summary.steps_to(run['curve'], bar) for run in runs]
  critic = ', layer-normalized critic' if FLAGS.critic_layer_norm else ''
  print(f'hybrid SAC ({FLAGS.fraction:.0%} dataset rows, {FLAGS.utd} gradient steps per '
        f'env step{critic}), {len(runs)} seeds:')
  checksums = sorted({run.get('dataset_checksum', 'not recorded') for run in runs})
  print(f'  dataset {DATASET}, checksum ' + (
      checksums[0] if len(checksums) == 1 else ', '.join(
          f"s{run['seed']} {run.get('dataset_checksum', 'not recorded')}" for run in runs)))
  within = sum(steps <= third for steps in hybrid_steps)
  print(f'  env steps to {bar:,.0f}, {stats.NAMES[stats.STATISTIC]} [95% CI]: '
        f'{_cell(hybrid_steps)} | '
        + ', '.join(f"s{run['seed']} {s:,.0f}" for run, s in zip(runs, hybrid_steps))
        + f' (bar: <= {third:,}; {within} of {len(runs)} seeds within it)')
  print(f'  return at {third:,} env steps, {stats.NAMES[stats.STATISTIC]} [95% CI]: '
        f"{_cell([summary.return_at(run['curve'], third) for run in runs])}; online SAC "
        f'{_cell([summary.return_at(curve, third) for curve in online])}')
  # What each run's last return is worth in online SAC's env steps (its 3 seeds' curves).
  ratios = []
  for run in runs:
    steps, _, final = run['curve'][-1]
    online_steps = [summary.steps_to(curve, final) for curve in online]
    ratios += [s / steps for s in online_steps]
    print(f"  s{run['seed']}: {final:,.0f} at {steps:,} env steps; online SAC reaches it at "
          + ', '.join(f'{s:,.0f}' for s in online_steps) + ' env steps')
  print(f'  online SAC env steps / hybrid env steps, to the same return: {_ratio_cell(ratios)}')
  print(f"  seconds per run, median: {stats.median([run['seconds'] for run in runs]):,.0f}")
  if FLAGS.png:
    path = curves.plot(
        FLAGS.png, f'HalfCheetah-v5: SAC from {DATASET} ({FLAGS.fraction:.0%}, UTD '
        f'{FLAGS.utd}) against online SAC', {
            'hybrid SAC': [run['curve'] for run in runs],
            'online SAC': [[p for p in c if p[0] <= budget * 1.1] for c in online]},
        threshold=bar, threshold_label=f"online SAC's return at {budget:,}")
    print(f'  Curves: {path}')


def main(argv):
  del argv
  if FLAGS.dataset_only_steps % (VECTOR_STEP * FLAGS.utd):
    # The job collects before each iteration whose first step is past them: a part
    # iteration would train on without new env steps, off the run's update ratio.
    raise app.UsageError(f'--dataset_only_steps must be a multiple of an iteration\'s '
                         f'{VECTOR_STEP * FLAGS.utd} train steps (64 env steps x --utd).')
  if not os.path.exists(offline.path(DATASET)):
    raise app.UsageError(f'{offline.path(DATASET)} is missing: make it first with '
                         f'benchmarks/offline.py --stages=datasets --datasets={DATASET}')
  checksum = offline.dataset_checksum(DATASET)
  print(f'dataset {DATASET}: checksum {checksum}', flush=True)
  done = []
  if os.path.exists(FLAGS.hybrid_out):
    with open(FLAGS.hybrid_out) as f:
      done = [json.loads(line) for line in f if line.strip()]
  done = [r for r in done if same_run(r, checksum)]
  todo = [int(s) for s in FLAGS.seeds if int(s) not in {r['seed'] for r in done}]
  failed = []
  for seed, run, error in common.on_pinned_cpus(FLAGS.jobs, hybrid_run, todo):
    if error:
      print(f'FAILED: {error}', flush=True)
      failed.append(f'seed {seed}: {error}')
      continue
    done.append(run)
    with open(FLAGS.hybrid_out, 'a') as f:
      f.write(json.dumps(run) + '\n')
  report(sorted((r for r in done if str(r['seed']) in FLAGS.seeds), key=lambda r: r['seed']))
  if failed:
    raise RuntimeError(f'{len(failed)} runs failed: ' + '; '.join(failed))


if __name__ == '__main__':
  app.run(main)

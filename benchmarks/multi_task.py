"""Multi-task IMPALA: three MiniGrid tasks at once, in one process and under tfrl-launch.

Runs `impala_minigrid_multitask.gin` (DoorKey-5x5, LavaGapS5 and SimpleCrossingS9N1 at
once; every evaluation evaluates all three; the job ends once each task's return reaches
its `Experiment.task_target_returns` and a confirmation repeats it) two ways:

  one_process  `learners.train_eval`: sub-env i of the 18 runs task i % 3
  launch       `learners.launch --num_collectors=3`: collector k runs task k, 6 envs
               each, beside a Reverb server, the trainer and the evaluator

and prints, per run, whether the target was reached and confirmed, the env steps at
which each task's evaluation first reached its threshold, each task's final return and
the wall-clock time; then draws each task's return against env steps to --png.

Run (from the repository root; ~15-20 min per run on 2 cores, one at a time):

    .venv/bin/python benchmarks/multi_task.py --seeds=0

A run whose summary (<runs_dir>/<mode>_s<seed>.summary.json) exists is read, not run again
(--rerun runs it again).

Results: docs/results/, written by benchmarks/results_pages.py from the runs kept in
benchmarks/runs/ (a <name>.meta.json beside each says how they were made).
"""
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags

import task_curves  # benchmarks/task_curves.py

REPO = common.REPO
MODES = ('one_process', 'launch')
GIN_FILE = 'impala_minigrid_multitask.gin'

flags.DEFINE_list('modes', list(MODES), 'How to run the job: one_process, launch.')
flags.DEFINE_list('seeds', ['0'], 'Experiment.seed of each run.')
flags.DEFINE_integer('num_collectors', 3, 'Collectors of a launched run (one per task).')
flags.DEFINE_integer('launch_num_envs', 6, "Envs per collector of a launched run (the "
                     "one-process job's 18 split over 3 collectors).")
flags.DEFINE_integer('timeout_s', 3600, "A launched run's --timeout_s.")
flags.DEFINE_float('launch_stop_grace_s', 120.0, "A launched run's --stop_grace_s: its "
                   "trainer's final save writes a SavedModel per task, which takes longer "
                   'than the default share of the stop on a loaded machine.')
flags.DEFINE_string('runs_dir', os.path.join(REPO, 'benchmarks', 'runs', 'multi_task'),
                    'Where each run writes its root_dir (<mode>_s<seed>).')
flags.DEFINE_list('gin_bindings', [], 'Extra bindings for every run.')
flags.DEFINE_bool('rerun', False, 'Run again where a summary exists.')
flags.DEFINE_string('png', os.path.join(REPO, 'benchmarks', 'curves',
                                        'multi_task_minigrid.png'),
                    'The per-task curves (empty: none).')
FLAGS = flags.FLAGS


def _command(mode: str, root: str, seed: str) -> List[str]:
  bindings = [f'Experiment.seed = {seed}', *FLAGS.gin_bindings]
  if mode == 'one_process':
    command = [sys.executable, '-m', 'learners.train_eval', '--overwrite']
  else:
    command = [sys.executable, '-m', 'learners.launch',
               f'--num_collectors={FLAGS.num_collectors}', f'--timeout_s={FLAGS.timeout_s}',
               f'--stop_grace_s={FLAGS.launch_stop_grace_s}']
    bindings.insert(0, f'Experiment.num_envs = {FLAGS.launch_num_envs}')
  return command + [f'--root_dir={root}', f'--gin_file={GIN_FILE}',
                    *[f'--gin_bindings={b}' for b in bindings]]


def _history(mode: str, root: str) -> List[Dict[str, Any]]:
  """The run's evaluations: env_steps and task_returns each (and reached_target)."""
  if mode == 'one_process':
    with open(os.path.join(root, 'tasks.json')) as f:
      return json.load(f)['history']
  with open(os.path.join(root, 'eval', 'results.json')) as f:
    return json.load(f)


def run_job(mode: str, seed: str) -> Dict[str, Any]:
  """Runs (or reads) one job; returns its summary: exit status, seconds, history."""
  root = os.path.join(FLAGS.runs_dir, f'{mode}_s{seed}')
  summary_file = root + '.summary.json'  # beside root_dir (which has a run.json)
  if FLAGS.rerun or not os.path.exists(summary_file):
    if mode == 'launch' and os.path.exists(root):
      subprocess.run(['rm', '-rf', root], check=True)  # tfrl-launch has no --overwrite
    os.makedirs(FLAGS.runs_dir, exist_ok=True)
    start = time.monotonic()
    print(f'{mode} seed {seed}: running ({root}.log)', flush=True)
    open(root + '.log', 'w').close()
    done = common.run_python(_command(mode, root, seed)[1:], log_path=root + '.log',
                             cwd=REPO)
    summary = {'returncode': done.returncode, 'seconds': time.monotonic() - start,
               'history': _history(mode, root)}
    with open(summary_file, 'w') as f:
      json.dump(summary, f, indent=1)
  with open(summary_file) as f:
    return json.load(f)


def report(mode: str, seed: str, run: Dict[str, Any], thresholds: Dict[str, float]
           ) -> None:
  """One line per run: reached or not, each task's first env step at its threshold."""
  history = run['history']
  # One process: the job exits 0 only on a confirmed target; launched: the evaluator's
  # row says so.
  reached = (run['returncode'] == 0 if mode == 'one_process'
             else any(row.get('reached_target') for row in history))
  parts = []
  for name, threshold in thresholds.items():
    first = next((row['env_steps'] for row in history
                  if row['task_returns'][name] >= threshold), None)
    parts.append(f'{name}: first >= {threshold:g} at '
                 f'{"never" if first is None else f"{first:,} env steps"}, final '
                 f'{history[-1]["task_returns"][name]:.3f}' if history else f'{name}: -')
  print(f'{mode:<11} seed {seed}: target {"reached" if reached else "NOT reached"} '
        f'(exit {run["returncode"]}) at {history[-1]["env_steps"] if history else 0:,} '
        f'env steps, {len(history)} evaluations, {run["seconds"]:.0f} s | ' +
        ' | '.join(parts), flush=True)


def main(argv):
  del argv
  common.check_choices('modes', FLAGS.modes, MODES)
  from learners.configuration import config  # pylint: disable=g-import-not-at-top (TensorFlow)
  experiment = config.parse([GIN_FILE], FLAGS.gin_bindings)
  target, names = experiment.target, experiment.task_names
  # Each task's threshold (with a target on the tasks' mean, that for each).
  thresholds = dict(target.per_task or (
      {name: target.mean_return for name in names} if target.is_set else {}))
  print(f'Multi-task IMPALA ({GIN_FILE}), {", ".join(FLAGS.modes)} x seeds '
        f'{", ".join(FLAGS.seeds)}; thresholds {target}; '
        f'{common.machine_and_versions()}', flush=True)
  runs = {mode: [] for mode in FLAGS.modes}
  for seed in FLAGS.seeds:
    for mode in FLAGS.modes:
      run = run_job(mode, seed)
      report(mode, seed, run, thresholds)
      runs[mode].append(run['history'])
  if FLAGS.png:
    task_curves.plot(runs, names, FLAGS.png, thresholds=thresholds)


if __name__ == '__main__':
  app.run(main)

"""Forgetting on a task sequence: IMPALA against CLEAR.

Runs `learners.train_eval` with `<algo>_minigrid_sequence.gin` (DoorKey-5x5, then
LavaGapS5, 600k env steps each, then SimpleCrossingS9N1, 1.5M; every evaluation evaluates all
three) for each algorithm and seed, reads each run's `tasks.json`, and prints per run
and over seeds (median and bootstrap interval):

  learned     each task's best return while it was the task being trained (how well
              the algorithm learns it: CLEAR should stay within 10% of IMPALA)
  forgetting  each earlier task's best return over the run less its final one; their
              mean over the tasks trained before the last (CLEAR should forget a
              third of IMPALA's or less)
  transfer    the accuracy matrix (row i: every task's return at the end of phase i),
              backward transfer (BWT: the mean over the tasks before the last of
              their final return less their return at the end of their own phase;
              negative is forgetting) and forward transfer (FWT: the mean over the
              tasks after the first of their return at the end of the phase before
              theirs less their return at the first evaluation), after Lopez-Paz &
              Ranzato 2017 (`learners/configuration/transfer.py`), computed from each
              run's evaluations

and draws each task's return against env steps, the task switches marked, to --png.

Run (from the repository root; ~14 min per run alone on 2 cores, --jobs at a time):

    .venv/bin/python benchmarks/task_sequence.py --seeds=0,1,2 --jobs=2

A run whose directory already holds tasks.json is read, not run again (--rerun runs
it again).

Results: docs/results/, written by benchmarks/results_pages.py from the runs kept in
benchmarks/runs/ (a <name>.meta.json beside each says how they were made).
"""
import concurrent.futures
import json
import os
from typing import Any, Dict, List

import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags
import numpy as np

import stats  # benchmarks/stats.py
import task_curves  # benchmarks/task_curves.py
from learners.configuration import transfer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

flags.DEFINE_list('algos', ['impala', 'clear'], 'Configs <algo>_minigrid_sequence.gin.')
flags.DEFINE_list('seeds', ['0', '1', '2'], 'Experiment.seed of each run.')
flags.DEFINE_integer('jobs', 2, 'Runs at a time.')
flags.DEFINE_string('runs_dir', os.path.join(REPO, 'benchmarks', 'runs', 'task_sequence'),
                    'Where each run writes its root_dir (<algo>_s<seed>).')
flags.DEFINE_list('gin_bindings', [], 'Extra bindings for every run.')
flags.DEFINE_bool('rerun', False, 'Run again where tasks.json exists.')
flags.DEFINE_string('png', os.path.join(REPO, 'benchmarks', 'curves',
                                        'task_sequence_minigrid.png'),
                    'The per-task curves (empty: none).')
FLAGS = flags.FLAGS


def run_job(algo: str, seed: str) -> Dict[str, Any]:
  """Runs (or reads) one job; returns its tasks.json."""
  root = os.path.join(FLAGS.runs_dir, f'{algo}_s{seed}')
  tasks_file = os.path.join(root, 'tasks.json')
  if FLAGS.rerun or not os.path.exists(tasks_file):
    os.makedirs(FLAGS.runs_dir, exist_ok=True)
    command = ['-m', 'learners.train_eval', f'--root_dir={root}',
               '--overwrite', f'--gin_file={algo}_minigrid_sequence.gin',
               f'--gin_bindings=Experiment.seed = {seed}',
               *[f'--gin_bindings={b}' for b in FLAGS.gin_bindings]]
    open(root + '.log', 'w').close()
    done = common.run_python(command, log_path=root + '.log', cwd=REPO)
    done.check_returncode()
  with open(tasks_file) as f:
    return json.load(f)


def _median_interval(values: List[float]) -> str:
  """The median over the seeds that have a value, [its 95% bootstrap interval]."""
  present = [v for v in values if not np.isnan(v)]
  if not present:
    return 'n/a (no evaluation)'
  found = stats.interval(present, statistic='median')
  return f'{found.point:.3f} [{found.low:.3f}, {found.high:.3f}] ({len(present)} seeds)'


def _transfer_lines(algo: str, seed: str, report: Dict[str, Any]) -> List[str]:
  """A run's BWT and FWT, then its accuracy matrix, a row per phase."""
  lines = [f'{algo:<7} seed {seed}: BWT {report["backward_transfer"]:.3f}, FWT '
           f'{report["forward_transfer"]:.3f}; accuracy matrix, each task\'s return at '
           'the end of each phase:']
  for phase, (task, row) in enumerate(zip(report['phases'], report['accuracy_matrix'])):
    lines.append(f'          phase {phase} ({task}): ' +
                 ' '.join(f'{value:.3f}' for value in row))
  return lines


def summarize(runs: Dict[str, List[Dict[str, Any]]]) -> None:
  """Prints each run's figures, then each algorithm's median and interval."""
  names = [name for _, name in runs[FLAGS.algos[0]][0]['switches']]
  # From the history, not tasks.json's keys: runs recorded before them have none.
  transfers = {algo: [transfer.transfer_report(run['history'], run['switches'])
                      for run in algo_runs] for algo, algo_runs in runs.items()}
  for algo, algo_runs in runs.items():
    for seed, run, report in zip(FLAGS.seeds, algo_runs, transfers[algo]):
      learned = task_curves.learned_returns(run)
      print(f'{algo:<7} seed {seed}: {len(run["history"])} evaluations, mean forgetting '
            f'{run["mean_forgetting"]:.3f} | ' +
            ' | '.join(f'{n}: learned {learned[n]:.3f}, final '
                       f'{run["tasks"][n]["final_return"]:.3f}, forgot '
                       f'{run["tasks"][n]["forgetting"]:.3f}' for n in names))
      print('\n'.join(_transfer_lines(algo, seed, report)))
  print()
  forgetting = {algo: [run['mean_forgetting'] for run in algo_runs]
                for algo, algo_runs in runs.items()}
  for algo in runs:
    print(f'{algo:<7} mean forgetting, median: {_median_interval(forgetting[algo])}')
    for key, label in (('backward_transfer', 'BWT'), ('forward_transfer', 'FWT')):
      print(f'{algo:<7} {label}, median: '
            f'{_median_interval([report[key] for report in transfers[algo]])}')
    for name in names:
      learned = [task_curves.learned_returns(run)[name] for run in runs[algo]]
      print(f'{algo:<7}   {name}: learned {_median_interval(learned)}')
  if {'impala', 'clear'} <= set(runs):
    ratio = stats.compare(forgetting['clear'], forgetting['impala'], 'ratio',
                          statistic='median')
    print(f'clear / impala mean forgetting: {ratio.point:.2f} [{ratio.low:.2f}, '
          f'{ratio.high:.2f}] (target <= 0.33)')


def main(argv):
  del argv
  print(f'Task sequence, {", ".join(FLAGS.algos)} x seeds {", ".join(FLAGS.seeds)}, '
        f'{common.machine_and_versions()}', flush=True)
  jobs = [(algo, seed) for seed in FLAGS.seeds for algo in FLAGS.algos]
  with concurrent.futures.ThreadPoolExecutor(FLAGS.jobs) as pool:
    results = dict(zip(jobs, pool.map(lambda job: run_job(*job), jobs)))
  runs = {algo: [results[(algo, seed)] for seed in FLAGS.seeds] for algo in FLAGS.algos}
  summarize(runs)
  if FLAGS.png:
    first = runs[FLAGS.algos[0]][0]
    task_curves.plot({algo: [run['history'] for run in algo_runs]
                      for algo, algo_runs in runs.items()},
                     list(dict.fromkeys(name for _, name in first['switches'])), FLAGS.png,
                     switches=[step for step, _ in first['switches'][1:]])


if __name__ == '__main__':
  app.run(main)

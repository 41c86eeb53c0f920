"""Start-up and whole-process time to solve: tfrl's train_eval vs Stable-Baselines3.

For DQN, PPO and SAC (CartPole-v1, CartPole-v1, Pendulum-v1; the configs and RL-Zoo
settings of solve_time.py), runs each side as a user would, one process per seed, and
reports three clocks per run:

  start-up   process start (interpreter, imports, building everything) to the first
             train step: tfrl's 'start-up N s' of its first progress line, SB3's
             time to `model.learn` (both from /proc, so interpreter start counts);
  import     just before each run, a fresh interpreter of the same venv that only
             imports its framework (`python -c 'import tensorflow'` for tfrl,
             `import torch` for SB3), start to exit: the floor any program on that
             framework pays, measured beside the run it is compared with;
  train      the first train step to the first evaluation at the threshold (see
             solve_time.py: evaluations included, as on both sides);
  process    the whole process, start to exit, as a person waits for it: tfrl's
             includes its confirming evaluation, final checkpoint and exports.

Targets: tfrl's start-up <= 1.5x the import of TensorFlow alone (medians of all its
runs and of the imports beside them), and for each algorithm the median whole-process
time to solve <= 0.6x SB3's. SB3's start-up over its import of torch is printed beside.

Run (from the repository root):

    .venv/bin/python benchmarks/startup.py --peer_torch_threads=1
    .venv/bin/python benchmarks/startup.py --algos=ppo --seeds=0,1,2,3,4

It takes solve_time.py's flags (seeds, caps, venvs). With `--skip_peer` it runs tfrl
only: no peer venv is built, and the SB3 columns and the whole-process verdicts are
left empty ('-', 'n/a'). The test suite's smoke run uses that with a few train steps
(tests/test_benchmarks_run.py).

Results: docs/results/, written by benchmarks/results_pages.py from the outputs kept in
benchmarks/runs/ (a run's output as printed, <name>.txt, beside its <name>.meta.json).
"""
import datetime
import math
import os
import statistics
import subprocess
from typing import List, Optional

from absl import app
from absl import flags

import common  # benchmarks/common.py
import solve_time  # benchmarks/solve_time.py: the runs and their flags

FLAGS = flags.FLAGS
ALGOS = ('dqn', 'ppo', 'sac')
STARTUP_RATIO_TARGET = 1.5  # tfrl's start-up over `import tensorflow` alone
FRAMEWORK = {'tfrl': 'tensorflow', 'SB3': 'torch'}
PROCESS_RATIO_TARGET = 0.6


def _median(values) -> Optional[float]:
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def _fmt(x: Optional[float]) -> str:
  return '-' if x is None else 'inf' if math.isinf(x) else f'{x:.1f}'


def _clocks(run: solve_time.Run) -> List[Optional[float]]:
  """start-up, train (inf when unsolved), process seconds."""
  return [run.extra.get('startup_seconds'),
          run.seconds if run.solved else math.inf, run.process_seconds]


def _ratio_line(name: str, startups: List[Optional[float]], imports: List[float],
                target: Optional[float]) -> str:
  """'<name> start-up / import <framework>: median a s / b s = r x' and, with a target,
  its verdict."""
  startup, imported = _median(startups), _median(imports)
  if startup is None or imported is None:
    return f'{name} start-up / import {FRAMEWORK[name]}: n/a'
  ratio = startup / imported
  line = (f'{name} start-up / import {FRAMEWORK[name]}: median {startup:.2f} s / '
          f'{imported:.2f} s = {ratio:.2f}x')
  if target is not None:
    line += f'   target <= {target}x   {"PASS" if ratio <= target else "MISS"}'
  return line


def _process_to_solve(run: solve_time.Run) -> float:
  """The whole process's seconds where it solved, else infinite (as solve_time does)."""
  return run.process_seconds if run.solved else math.inf


def main(argv):
  del argv
  common.check_choices('algos', FLAGS.algos, ALGOS)
  if not FLAGS.skip_peer:
    solve_time.ensure_peer_venv()
  peer = 'no peer (--skip_peer)' if FLAGS.skip_peer else solve_time.peer_versions()
  git = subprocess.run(['git', 'describe', '--always', '--dirty'], cwd=common.REPO,
                       capture_output=True, text=True).stdout.strip()
  print(f'Start-up and whole-process time to solve: algos={",".join(FLAGS.algos)} '
        f'seeds={",".join(FLAGS.seeds) or "per task"}, {os.cpu_count()} CPUs', flush=True)
  print(f'  date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; '
        f'tfrl at {git}; peer venv: {peer}; torch threads: '
        f'{FLAGS.peer_torch_threads or "default"}', flush=True)
  print(common.load_line('start'), flush=True)
  runs = {algo: {'tfrl': [], 'SB3': []} for algo in FLAGS.algos}
  imports = {'tfrl': [], 'SB3': []}
  python = {'tfrl': FLAGS.tfrl_python, 'SB3': solve_time.peer_python()}
  for algo in FLAGS.algos:
    for seed in solve_time.seeds_for(algo):
      # Alternate which side goes first, as solve_time.py does.
      for side in (('tfrl', 'SB3') if seed % 2 == 0 else ('SB3', 'tfrl')):
        if side == 'SB3' and FLAGS.skip_peer:
          continue
        solve_time.wait_while_paused()
        imported = common.import_seconds(python[side], FRAMEWORK[side])
        imports[side].append(imported)
        run = (solve_time.run_tfrl if side == 'tfrl' else solve_time.run_peer)(algo, seed)
        runs[algo][side].append(run)
        start, train, proc = _clocks(run)
        print(f'  {algo} seed {seed} {side}: start-up {_fmt(start)} s, train {_fmt(train)} s, '
              f'process {_fmt(proc)} s; import {FRAMEWORK[side]} {imported:.2f} s' +
              (f' ({run.note})' if run.note else ''), flush=True)
  print(common.load_line('end'))
  print()
  print(f'{"algo":<5} {"seed":<5} {"tfrl start":>10} {"train":>7} {"process":>8}   |'
        f' {"SB3 start":>9} {"train":>7} {"process":>8}')
  startups, verdicts = [], []
  for algo in FLAGS.algos:
    by_seed = {run.seed: run for run in runs[algo]['SB3']}
    for run in runs[algo]['tfrl']:
      peer = by_seed.get(run.seed)
      ours = _clocks(run)
      theirs = _clocks(peer) if peer else [None] * 3
      print(f'{algo:<5} {run.seed:<5} {_fmt(ours[0]):>10} {_fmt(ours[1]):>7} '
            f'{_fmt(ours[2]):>8}   | {_fmt(theirs[0]):>9} {_fmt(theirs[1]):>7} '
            f'{_fmt(theirs[2]):>8}')
      startups.append(ours[0])
    tfrl_process = _median(_process_to_solve(r) for r in runs[algo]['tfrl'])
    peer_process = _median(_process_to_solve(r) for r in runs[algo]['SB3'])
    if tfrl_process is None or peer_process is None or math.isinf(peer_process):
      verdicts.append(f'{algo}: whole process to solve, tfrl {_fmt(tfrl_process)} s vs SB3 '
                      f'{_fmt(peer_process)} s   n/a')
      continue
    ratio = tfrl_process / peer_process
    verdicts.append(
        f'{algo}: whole process to solve, median tfrl {tfrl_process:.1f} s / SB3 '
        f'{peer_process:.1f} s = {ratio:.2f}x   target <= {PROCESS_RATIO_TARGET}x   '
        f'{"PASS" if ratio <= PROCESS_RATIO_TARGET else "MISS"}')
  print()
  print(_ratio_line('tfrl', startups, imports['tfrl'], STARTUP_RATIO_TARGET))
  if not FLAGS.skip_peer:
    print(_ratio_line('SB3', [_clocks(run)[0] for algo in FLAGS.algos
                              for run in runs[algo]['SB3']], imports['SB3'], None))
  print('\n'.join(verdicts))


if __name__ == '__main__':
  FLAGS.set_default('algos', list(ALGOS))
  app.run(main)

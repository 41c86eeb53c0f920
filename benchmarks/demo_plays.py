"""Does `make demo`'s exported policy play at the target on episodes it never saw?

For each seed: `learners.train_eval` with make demo's config (`--gin_file`,
dqn_cartpole.gin) and `Experiment.seed = <seed>`, to its confirmed target or its budget;
then its exported greedy policy, loaded in a fresh process with TensorFlow and gymnasium
only (benchmarks/plain_play.py), plays `--episodes` episodes from the held-out seed
stream (`tfrl.seeding.HELD_OUT`), which no evaluation or confirmation drew from. Prints
each run's confirmation and fresh mean, in how many runs the fresh mean reaches the
target, and the median fresh mean over runs with its 95% bootstrap interval.

    .venv/bin/python benchmarks/demo_plays.py --seeds=0,1,2,3,4,5,6,7,8,9

A run whose summary exists in --runs_dir is read, not run again.
"""
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Dict, List

import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags
import numpy as np

import stats  # benchmarks/stats.py
import tfrl_leaves  # benchmarks/tfrl_leaves.py

REPO = common.REPO

flags.DEFINE_string('gin_file', 'learners/configs/dqn_cartpole.gin', "make demo's config.")
flags.DEFINE_list('seeds', [str(seed) for seed in range(10)], 'Experiment seeds, a run each.')
flags.DEFINE_integer('episodes', 100, 'Fresh episodes each export plays.')
flags.DEFINE_float('target', 475.0, "The config's target: CartPole-v1's threshold.")
flags.DEFINE_list('gin_bindings', [], 'Extra bindings for every run (a smoke run: a '
                  'small budget and target).')
flags.DEFINE_string('runs_dir', os.path.join(REPO, 'runs', 'demo_plays'),
                    "Where each run's directory and summary go.")
FLAGS = flags.FLAGS

_CONFIRMED = re.compile(r'Confirmation evaluation: (-?[\d.]+) over (\d+) episodes '
                        r'\(seeded from (\d+)\)')
_TRAINED = re.compile(r'Trained to step (\d+) \((\d+) env steps\) in ([\d.]+) s')
_EXPORTED = re.compile(r'Greedy policy exported to: (\S+)')


def _run(seed: int) -> Dict[str, Any]:
  """One demo run and its export's fresh episodes; the run's summary."""
  root = os.path.join(FLAGS.runs_dir, f'seed{seed}')
  start = time.monotonic()
  job = common.run_python(
      ['-m', 'learners.train_eval', f'--root_dir={root}', '--overwrite',
       f'--gin_file={FLAGS.gin_file}', '--progress_bar=off',
       f'--gin_bindings=Experiment.seed = {seed}'] +
      [f'--gin_bindings={b}' for b in FLAGS.gin_bindings], cwd=REPO)
  exported, trained = _EXPORTED.search(job.stdout), _TRAINED.search(job.stdout)
  if exported is None or trained is None:
    raise RuntimeError(f'seed {seed}: the job exported nothing (exit {job.returncode}):\n'
                       f'{job.stderr[-3000:]}')
  confirmations = _CONFIRMED.findall(job.stderr)
  held_out = tfrl_leaves.load('seeding')
  fresh_seed = held_out.derive(seed, held_out.HELD_OUT)
  # A fresh interpreter, not a fork: the client must not have tfrl in it.
  play = subprocess.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'plain_play.py'),
       f'--policy_dir={exported.group(1)}', f'--seed={fresh_seed}',
       f'--episodes={FLAGS.episodes}'], cwd=REPO, capture_output=True, text=True,
      timeout=1800, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  played = re.search(r'^PLAYED (.*)$', play.stdout, re.M)
  if play.returncode or played is None:
    raise RuntimeError(f'seed {seed}: plain_play.py exited {play.returncode}:\n'
                       f'{play.stderr[-3000:]}')
  fresh = json.loads(played.group(1))
  if fresh['tfrl_imported']:
    raise RuntimeError('plain_play.py imported tfrl or tf-agents: not a plain client.')
  return {
      'seed': seed, 'reached': job.returncode == 0, 'train_step': int(trained.group(1)),
      'env_steps': int(trained.group(2)), 'train_seconds': float(trained.group(3)),
      'confirmations': [float(c[0]) for c in confirmations],
      'confirmation_episodes': int(confirmations[-1][1]) if confirmations else None,
      'fresh_seed': fresh_seed, 'fresh_returns': fresh['returns'],
      'fresh_mean': fresh['mean'], 'seconds': time.monotonic() - start}


def _cached(seed: int) -> Dict[str, Any]:
  path = os.path.join(FLAGS.runs_dir, f'seed{seed}.json')
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  summary = _run(seed)
  with open(path, 'w') as f:
    json.dump(summary, f)
  return summary


def report(runs: List[Dict[str, Any]], target: float) -> str:
  """Each run's line, the count at the target on fresh episodes and the median."""
  lines = []
  for run in runs:
    returns = np.array(run['fresh_returns'])
    confirmation = (f"{run['confirmations'][-1]:.1f} over {run['confirmation_episodes']}"
                    if run['confirmations'] else 'none')
    lines.append(
        f"seed {run['seed']}: {'confirmed' if run['reached'] else 'NOT reached'} at train "
        f"step {run['train_step']:,} ({run['env_steps']:,} env steps, "
        f"{run['train_seconds']:.0f} s) | confirmation {confirmation} | fresh: mean "
        f"{run['fresh_mean']:.1f} over {len(returns)}, min {returns.min():.0f}, "
        f"{np.mean(returns >= target):.0%} of episodes at {target:g} or more")
  means = [run['fresh_mean'] for run in runs]
  at_target = sum(mean >= target for mean in means)
  median = stats.interval(means, 'median')
  lines += [f'exports at the target on {FLAGS.episodes} fresh episodes: {at_target} of '
            f'{len(runs)} runs',
            f'fresh mean return, median over runs [95% CI]: {median.point:.1f} '
            f'[{median.low:.1f}, {median.high:.1f}]']
  return '\n'.join(lines)


def main(argv):
  del argv
  os.makedirs(FLAGS.runs_dir, exist_ok=True)
  print(common.machine_and_versions('gymnasium'), flush=True)
  runs = []
  for seed in (int(s) for s in FLAGS.seeds):
    runs.append(_cached(seed))
    # Progress on stderr; stdout is the report alone.
    print(report(runs[-1:], FLAGS.target).splitlines()[0], file=sys.stderr, flush=True)
  print(report(runs, FLAGS.target))


if __name__ == '__main__':
  app.run(main)

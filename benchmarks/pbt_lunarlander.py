"""Population-based training against its own starting points (issue 28).

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
issue's criterion: the population reaches the target within B where at least half of its
starting points alone do not.

    .venv/bin/python benchmarks/pbt_lunarlander.py --seeds=0,1,2

A run whose summary exists in --runs_dir is read, not run again. Record the output in
benchmarks/RESULTS.md.
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
flags.DEFINE_string('runs_dir', os.path.join(REPO, 'benchmarks', 'runs', 'pbt'),
                    "Where each run's directory and summary go.")
FLAGS = flags.FLAGS

_TRAINED = re.compile(r'Trained to step (\d+) \((\d+) env steps\)')


def _train_eval(root: str, bindings: List[str]) -> Dict[str, Any]:
  """One job alone; its exit status, train and env steps and wall-clock seconds."""
  start = time.monotonic()
  result = subprocess.run(
      [sys.executable, '-m', 'learners.train_eval', f'--root_dir={root}', '--overwrite',
       f'--gin_file={FLAGS.gin_file}', '--progress_bar=off'] +
      [f'--gin_bindings={b}' for b in bindings], cwd=REPO, capture_output=True, text=True)
  match = _TRAINED.search(result.stdout)
  return {'reached': result.returncode == 0, 'returncode': result.returncode,
          'train_step': int(match.group(1)) if match else None,
          'env_steps': int(match.group(2)) if match else None,
          'seconds': time.monotonic() - start,
          'log_tail': (result.stdout + result.stderr)[-1500:] if not match else ''}


def _cached(path: str, run) -> Dict[str, Any]:
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  value = run()
  with open(path, 'w') as f:
    json.dump(value, f, indent=1)
  return value


def _population(root: str, seed: int, budget_steps: int) -> Dict[str, Any]:
  start = time.monotonic()
  result = subprocess.run(
      [sys.executable, '-m', 'learners.pbt', f'--root_dir={root}',
       f'--gin_file={FLAGS.gin_file}', f'--population_size={FLAGS.population_size}',
       f'--ready_interval={FLAGS.ready_interval}', f'--bounds={FLAGS.bounds}',
       f'--seed={seed}'] +
      [f'--gin_bindings={b}' for b in FLAGS.gin_bindings +
       [f'Experiment.num_train_steps = {budget_steps}']],
      cwd=REPO, capture_output=True, text=True)
  from learners import population  # pylint: disable=g-import-not-at-top
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


def _seed(seed: int) -> Dict[str, Any]:
  runs = os.path.join(FLAGS.runs_dir, f's{seed}')
  os.makedirs(runs, exist_ok=True)
  tuned = _cached(os.path.join(runs, 'tuned.json'), lambda: _train_eval(
      os.path.join(runs, 'tuned'), FLAGS.gin_bindings + [f'Experiment.seed = {seed}']))
  if not tuned['reached']:
    return {'seed': seed, 'tuned': tuned}
  budget_steps = tuned['train_step']  # B env steps: the tuned run's train steps
  pbt = _cached(os.path.join(runs, 'population.json'), lambda: _population(
      os.path.join(runs, 'population'), seed, budget_steps))
  alone = {}
  for member, start in sorted(pbt['starts'].items(), key=lambda kv: int(kv[0])):
    bindings = FLAGS.gin_bindings + [
        f'Experiment.seed = {seed * 1000 + int(member)}',
        f'Experiment.num_train_steps = {budget_steps}'] + [
            f'{FLAGS.binding_prefix}.{name} = {value!r}' for name, value in start.items()]
    alone[member] = _cached(os.path.join(runs, f'alone_{member}.json'), lambda b=bindings,
                            m=member: _train_eval(os.path.join(runs, f'alone_{m}'), b))
  return {'seed': seed, 'tuned': tuned, 'population': pbt, 'alone': alone}


def _report(result: Dict[str, Any]) -> str:
  tuned = result['tuned']
  if 'population' not in result:
    return f"seed {result['seed']}: the tuned config did not reach its target ({tuned})"
  pbt, alone = result['population'], result['alone']
  solo = sum(run['reached'] for run in alone.values())
  criterion = pbt['reached'] and solo <= len(alone) / 2
  where = (f"member {pbt['member']} at {pbt['env_steps']:,} env steps" if pbt['reached']
           else 'not reached')
  return (f"seed {result['seed']}: budget B = {tuned['env_steps']:,} env steps per run "
          f"({tuned['train_step']} train steps, the tuned config's) | population: {where}, "
          f"{pbt['copies']} copies, {pbt['seconds']:.0f} s | starting points alone: "
          f"{solo} of {len(alone)} reached within B "
          f"({', '.join(str(run['env_steps']) if run['reached'] else 'no' for run in alone.values())})"
          f" | criterion {'MET' if criterion else 'NOT MET'}")


def main(argv):
  del argv
  print(f'PBT on {FLAGS.gin_file}: population {FLAGS.population_size}, bounds '
        f'{FLAGS.bounds}, ready every {FLAGS.ready_interval:,} env steps; seeds '
        f'{",".join(FLAGS.seeds)}', flush=True)
  met = 0
  for seed in FLAGS.seeds:
    result = _seed(int(seed))
    line = _report(result)
    met += 'criterion MET' in line
    print(line, flush=True)
  print(f'criterion met on {met} of {len(FLAGS.seeds)} seeds')


if __name__ == '__main__':
  app.run(main)

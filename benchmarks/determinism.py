"""What `Experiment.deterministic` costs, and what it buys: one-process runs of a queue
config (PPO on CartPole by default) with and without TensorFlow's op determinism, side by
side, each seed run twice per mode in fresh processes.

Per mode it prints the train seconds of every run (the job's own clock, first train step
to the end), their median, whether the two runs of each seed ended with the same
weights (a digest of the exported policy's variables) and evaluation return, and the
ratio of the medians (deterministic / default). Op
determinism is process-wide and cannot be switched off, so each run is its own process.

Run (from the repository root):

    .venv/bin/python benchmarks/determinism.py
    .venv/bin/python benchmarks/determinism.py --gin_file=impala_cartpole.gin --seeds=0,1

Results: docs/results/, written by benchmarks/results_pages.py from the outputs kept in
benchmarks/runs/ (a run's output as printed, <name>.txt, beside its <name>.meta.json).
"""
import hashlib
import os
import re
import statistics
import tempfile
from typing import Dict, List, Tuple

from absl import app
from absl import flags

import common  # benchmarks/common.py

FLAGS = flags.FLAGS
flags.DEFINE_string('gin_file', 'ppo_cartpole.gin', 'The config (a queue layout: PPO, '
                    'IMPALA or APPO, for runs that can repeat).')
flags.DEFINE_integer('train_steps', 30, 'Train steps per run; one evaluation at the end '
                     '(short of solving CartPole, where every run would return 500).')
flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds; each runs twice per mode.')
flags.DEFINE_integer('eval_episodes', 5, 'Episodes of the final evaluation.')

_RESULT = re.compile(r'Trained to step (\d+) \((\d+) env steps\) in ([\d.]+) s; last eval '
                     r'return (-?\d+(?:\.\d+)?)')


def weights_digest(policy_dir: str) -> str:
  """A digest of the exported policy's variables."""
  from tfrl import export  # pylint: disable=g-import-not-at-top (TensorFlow: here only)
  digest = hashlib.sha256()
  for variable in export.load_policy(policy_dir).model_variables:
    digest.update(variable.numpy().tobytes())
  return digest.hexdigest()[:12]


def run_once(root_dir: str, seed: int, deterministic: bool) -> Tuple[float, float, str]:
  """One train_eval process; returns (train seconds, final eval return, weights digest).

  Raises:
    RuntimeError: the run failed or printed no result line (its output's tail).
  """
  bindings = [f'Experiment.seed = {seed}', f'Experiment.deterministic = {deterministic}',
              f'Experiment.num_train_steps = {FLAGS.train_steps}',
              f'Experiment.eval_interval = {FLAGS.train_steps}',
              f'Experiment.num_eval_episodes = {FLAGS.eval_episodes}',
              'Experiment.target_return = None']
  command = ['-m', 'learners.train_eval', f'--root_dir={root_dir}',
             f'--gin_file={FLAGS.gin_file}', '--progress_bar=off'] + [
                 f'--gin_bindings={b}' for b in bindings]
  result = common.run_python(command, timeout=3600,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  found = _RESULT.search(result.stdout)
  if result.returncode or not found:
    raise RuntimeError(f'python {" ".join(command)} failed ({result.returncode}):\n'
                       f'{(result.stdout + result.stderr)[-2000:]}')
  return (float(found.group(3)), float(found.group(4)),
          weights_digest(os.path.join(root_dir, 'policies', 'greedy_policy')))


def main(argv):
  del argv
  print(common.machine_and_versions('tensorflow', 'tf-agents'), flush=True)
  print(f'{FLAGS.gin_file}: {FLAGS.train_steps} train steps, seeds {",".join(FLAGS.seeds)}'
        f', each twice per mode, one process per run', flush=True)
  seconds: Dict[bool, List[float]] = {False: [], True: []}
  with tempfile.TemporaryDirectory() as scratch:
    for deterministic in (False, True):
      repeats = 0
      for seed in map(int, FLAGS.seeds):
        runs = [run_once(os.path.join(scratch, f'{deterministic}_{seed}_{i}'), seed,
                         deterministic) for i in range(2)]
        seconds[deterministic] += [s for s, _, _ in runs]
        same = runs[0][1:] == runs[1][1:]
        repeats += same
        print(f'deterministic={deterministic!s:<5} seed {seed}: train '
              f'{runs[0][0]:.1f} s and {runs[1][0]:.1f} s, eval returns {runs[0][1]:g} '
              f'and {runs[1][1]:g}, weights {runs[0][2]} and {runs[1][2]} '
              f'({"the same run" if same else "different"})', flush=True)
      median = statistics.median(seconds[deterministic])
      print(f'deterministic={deterministic!s:<5} median train {median:.1f} s; {repeats} of '
            f'{len(FLAGS.seeds)} seeds repeated their run', flush=True)
  ratio = statistics.median(seconds[True]) / statistics.median(seconds[False])
  print(f'deterministic / default train seconds: {ratio:.2f}x', flush=True)


if __name__ == '__main__':
  app.run(main)

"""Where a job's start-up goes: train_eval's phases before its first train step, beside
`import tensorflow` alone.

Each run is a fresh interpreter (this script with --child) that imports TensorFlow,
then tf-agents (with TensorFlow Probability) and Reverb, then tfrl and the job's modules,
and runs `learners.train_eval` on --config with its phases timed (the env, the agent,
the replay server, the actors, the evaluator, the Learner's input pipeline and its
compile: the train step's trace and graph optimization, the random warm-up). It stops
where the first train step would start and reports each phase's seconds and the time
from the interpreter's start (/proc), as `benchmarks/startup.py` reads a run's
'start-up N s'. Before each run, `python -c 'import tensorflow'` is timed start to exit.

It prints the median of --runs runs per phase, the start-up over `import tensorflow`
(the 1.5x target of startup.py) and the floor: TensorFlow's import, tf-agents' and
Reverb's, and the Learner's compile, which every tfrl job pays before its first train
step whatever its agent and env, over `import tensorflow`.

    .venv/bin/python benchmarks/startup_phases.py --runs=5

Results: benchmarks/RESULTS.md (this script's output, with its command).
"""
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags

flags.DEFINE_string('config', 'dqn_cartpole.gin', "The gin file (`make demo`'s by default).")
flags.DEFINE_integer('runs', 3, 'Runs; each phase reports its median.', lower_bound=1)
FLAGS = flags.FLAGS
CHILD = '--child'  # `startup_phases.py --child <root_dir> <gin file>`: one timed run

RESULT_PREFIX = 'PHASES '
STARTUP_RATIO_TARGET = 1.5  # benchmarks/startup.py's
# The phases every job pays whatever its agent and env (see the module docstring).
FLOOR = ('import tensorflow', 'import tf-agents and Reverb', 'Learner compile')


def _child(root_dir: str, gin_file: str) -> None:
  """One run: the imports and train_eval's phases, timed; exits at the first train step
  (train_eval parses its own command line: this script's flags are not defined here)."""
  seconds: Dict[str, float] = {}
  start = time.perf_counter()
  import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  seconds['import tensorflow'] = time.perf_counter() - start
  start = time.perf_counter()
  import reverb  # pylint: disable=g-import-not-at-top,unused-import
  import tf_agents.agents  # pylint: disable=g-import-not-at-top,unused-import
  seconds['import tf-agents and Reverb'] = time.perf_counter() - start
  start = time.perf_counter()
  # pylint: disable=g-import-not-at-top
  from learners import train_eval
  from learners.configuration import experiment
  from learners.processes import process
  from learners.job import one_process_job
  from tfrl import learner as learner_lib
  from tfrl import triggers
  # pylint: enable=g-import-not-at-top
  seconds['import tfrl and learners'] = time.perf_counter() - start
  timed = {
      'make envs': (one_process_job.OneProcessJob, '_make_envs'),
      'build the agent': (experiment.Experiment, 'make_agent'),
      'start the replay server': (one_process_job.OneProcessJob, '_start_server'),
      'build the actors (policy traces)': (one_process_job.OneProcessJob, '_make_actors'),
      'build the evaluator': (experiment.Experiment, 'make_evaluator'),
      'export trigger': (triggers.PolicySavedModelTrigger, '__init__'),
      'Learner input pipeline': (learner_lib.Learner, '_make_iterator'),
      'Learner compile': (learner_lib.Learner, 'compile'),
      'random warm-up': (one_process_job.OneProcessJob, 'warm_up'),
  }
  for name, (owner, attribute) in timed.items():
    setattr(owner, attribute, _timed(getattr(owner, attribute), name, seconds))

  def first_train_step(self):
    del self
    seconds['start-up'] = process.seconds_since_start()
    print(RESULT_PREFIX + json.dumps(seconds), flush=True)
    os._exit(0)  # pylint: disable=protected-access (the measurement ends here)

  one_process_job.OneProcessJob.collect_and_train = first_train_step
  sys.argv = [sys.argv[0], f'--root_dir={root_dir}', f'--gin_file={gin_file}',
              '--progress_bar=off']
  train_eval.run_main()


def _timed(function, name: str, seconds: Dict[str, float]):
  @functools.wraps(function)
  def wrapper(*args, **kwargs):
    start = time.perf_counter()
    try:
      return function(*args, **kwargs)
    finally:
      seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
  return wrapper


def _run_once(root_dir: str) -> Dict[str, float]:
  """One child run's phases, and `import tensorflow` alone timed just before it."""
  imported = common.import_seconds(sys.executable, 'tensorflow')
  result = subprocess.run(
      [sys.executable, os.path.abspath(__file__), CHILD, root_dir, FLAGS.config],
      capture_output=True, text=True, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'), cwd=common.REPO)
  lines = [line for line in result.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
  if not lines:
    raise RuntimeError(f'the timed run printed no phases (exit {result.returncode}):\n'
                       f'{(result.stdout + result.stderr)[-3000:]}')
  return {**json.loads(lines[-1][len(RESULT_PREFIX):]), 'import tensorflow alone': imported}


def main(argv):
  del argv
  print(f'Start-up phases of train_eval --gin_file={FLAGS.config} before its first train '
        f'step: median of {FLAGS.runs} runs; {os.cpu_count()} CPUs', flush=True)
  print(common.load_line('start'), flush=True)
  runs: List[Dict[str, float]] = []
  with tempfile.TemporaryDirectory() as tmp:
    for i in range(FLAGS.runs):
      runs.append(_run_once(os.path.join(tmp, f'run_{i}')))
      print(f'  run {i}: start-up {runs[-1]["start-up"]:.2f} s, import tensorflow alone '
            f'{runs[-1]["import tensorflow alone"]:.2f} s', flush=True)
  print(common.load_line('end'), flush=True)
  phases = [name for name in runs[0] if name not in ('start-up', 'import tensorflow alone')]
  rest = 'the rest (interpreter, flags, gaps)'
  for run in runs:
    run[rest] = run['start-up'] - sum(run[name] for name in phases)
  median = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
  print(f'\n{"phase (median of its runs)":<36} {"seconds":>8}')
  for name in phases + [rest]:
    print(f'{name:<36} {median[name]:8.2f}')
  print(f'{"start-up (from /proc)":<36} {median["start-up"]:8.2f}')
  print(f'{"import tensorflow alone":<36} {median["import tensorflow alone"]:8.2f}')
  alone = median['import tensorflow alone']
  ratio = median['start-up'] / alone
  print(f'\nstart-up / import tensorflow: {ratio:.2f}x   target <= {STARTUP_RATIO_TARGET}x   '
        f'{"PASS" if ratio <= STARTUP_RATIO_TARGET else "MISS"}')
  floor = sum(median[name] for name in FLOOR)
  print(f'floor ({" + ".join(FLOOR)}) / import tensorflow: {floor:.2f} s / {alone:.2f} s '
        f'= {floor / alone:.2f}x')


if __name__ == '__main__':
  if sys.argv[1:2] == [CHILD]:
    _child(*sys.argv[2:4])
  else:
    app.run(main)

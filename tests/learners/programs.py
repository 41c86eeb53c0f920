"""Running tfrl's programs as real subprocesses in tests (shared by the program and
fault-injection tests): `Programs` starts `python -m learners.<program>` with its output
in log files and stops whatever a test leaves running, servers last."""
import os
import signal
import subprocess
import time
from typing import Callable, Dict, List, Optional, Sequence

import pytest

from tfrl import actors
from tfrl import checkpoints
from tfrl import export
from tfrl import replay

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIN = '--gin_file=dqn_cartpole.gin'
# Small job: 16 envs in one item, 4 items per batch of 64, paced by the replay table's
# rate limiter (8 samples per transition: 8 vector steps per 16 train steps).
SMALL = ['Experiment.num_envs=16', 'Experiment.batch_size=64',
         'Experiment.initial_collect_steps=64', 'Experiment.samples_per_insert=8.0',
         'Experiment.train_steps_per_iteration=16', 'Experiment.checkpoint_interval=32',
         'Experiment.policy_checkpoint_interval=100000', 'Experiment.eval_interval=64',
         'Experiment.num_eval_episodes=2']
# A job the suite runs to a target confirms it on its 100 fresh episodes all at once
# rather than 10 at a time (`Experiment.max_eval_envs`): the same rule in a tenth of the
# policy calls, a third to a half of a masked-CartPole LSTM job's seconds.
CONFIRM_AT_ONCE = 'Experiment.max_eval_envs = 100'
START_TIMEOUT_S = 180  # a TF program's import and set-up, on a loaded 2-core machine


def _python_runs():
  """tests/python_runs.py, imported when first used: benchmarks/reliability.py imports
  this module's settings from a path without tests/ on it."""
  import python_runs  # pylint: disable=g-import-not-at-top
  return python_runs


def program_env(**extra: str) -> Dict[str, str]:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  env.pop('TF_CONFIG', None)
  env.update(extra)
  return env


def gin_args(bindings: Sequence[str]) -> List[str]:
  return [GIN] + [f'--gin_bindings={b}' for b in bindings]


class Programs:
  """Starts learners.* programs as subprocesses logging to files; stops them all."""

  def __init__(self, root_dir: str):
    self.root_dir = root_dir
    self.log_dir = os.path.join(root_dir, 'test_logs')
    os.makedirs(self.log_dir, exist_ok=True)
    self.processes: Dict[str, subprocess.Popen] = {}  # or fork_server.ForkedProcess
    self._programs: Dict[str, str] = {}

  def start(self, name: str, program: str, *args: str,
            env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    assert name not in self.processes, name
    self._programs[name] = program
    self.processes[name] = _python_runs().start(
        ['-u', '-m', f'learners.{program}', *args], os.path.join(self.log_dir, f'{name}.out'),
        self.log_path(name), env=env or program_env())
    return self.processes[name]

  def log_path(self, name: str) -> str:
    """The program's stderr (absl logs and error messages)."""
    return os.path.join(self.log_dir, f'{name}.log')

  def log(self, name: str) -> str:
    with open(self.log_path(name), errors='replace') as f:
      return f.read()

  def tail(self, name: str, lines: int = 40) -> str:
    return '\n'.join(self.log(name).splitlines()[-lines:])

  def check_alive(self, *names: str) -> None:
    """Fails the test, with the log's tail, if one of `names` has exited."""
    for name in names:
      code = self.processes[name].poll()
      if code is not None:
        pytest.fail(f'{name} exited with code {code} unexpectedly:\n{self.tail(name)}')

  def wait(self, name: str, timeout_s: float) -> int:
    try:
      return self.processes[name].wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      pytest.fail(f'{name} did not exit within {timeout_s:.0f} s:\n{self.tail(name)}')

  def stop(self, name: str, grace_s: float = 30.0) -> Optional[int]:
    process = self.processes[name]
    if process.poll() is None:
      process.send_signal(signal.SIGTERM)
      try:
        process.wait(timeout=grace_s)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
    return process.returncode

  def close(self) -> None:
    """Stops every program still running: servers last, so that collectors and trainers
    stop cleanly (a collector's final flush needs its server)."""
    names = list(reversed(self.processes))
    for name in sorted(names, key=lambda n: self._programs[n] == 'reverb_server'):
      self.stop(name)

  def start_server(self, name: str, port: int, bindings: Sequence[str], *extra: str
                  ) -> str:
    """Starts a reverb_server and returns its address once it answers."""
    self.start(name, 'reverb_server', f'--root_dir={self.root_dir}', f'--port={port}',
               *gin_args(bindings), *extra)
    address = f'127.0.0.1:{port}'
    wait_until(lambda: answers(address), START_TIMEOUT_S, f'{name} answering', self,
               [name])
    return address


def answers(address: str) -> bool:
  try:
    replay.wait_for_server(address, timeout_s=1)
    return True
  except replay.ReplayServerUnreachableError:
    return False


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str,
               progs: Programs, watch: Sequence[str] = (), poll_s: float = 0.5) -> None:
  """Polls `condition` until true; fails on timeout or if a watched program exits."""
  deadline = time.monotonic() + timeout_s
  while True:
    if condition():
      return
    progs.check_alive(*watch)
    if time.monotonic() > deadline:
      tails = '\n'.join(f'--- {n}:\n{progs.tail(n)}' for n in watch)
      pytest.fail(f'Timed out after {timeout_s:.0f} s waiting for {what}.\n{tails}')
    time.sleep(poll_s)


def checkpoint_step(checkpoint_dir: str) -> int:
  """The train step of the latest checkpoint in `checkpoint_dir` (-1: none): the newest
  with an index file, as the trainer restores it (a kill between the write and the state
  file's update leaves a complete checkpoint the state file does not list)."""
  prefixes = checkpoints.checkpoint_prefixes(checkpoint_dir)
  return int(prefixes[0].rsplit('-', 1)[1]) if prefixes else -1


def evaluate_export(path: str, seed: int, num_episodes: Optional[int] = None) -> float:
  """Average return of the exported greedy policy at `path`, loaded as a user would, over
  `num_episodes` (num_eval_episodes) of the gin-bound Experiment's eval envs (call
  `learners.configuration.config.parse` first) reset with `seed`."""
  from learners.configuration.experiment import Experiment  # pylint: disable=g-import-not-at-top
  experiment = Experiment()
  episodes = num_episodes or experiment.num_eval_episodes
  env = experiment.make_eval_env(num_episodes=episodes, seed=seed)
  try:
    return actors.Evaluator(env, export.load_policy(path), episodes,
                            seed=seed).run()['AverageReturn']
  finally:
    env.close()


def replay_confirmation(path: str, confirmation_seed: int) -> float:
  """`evaluate_export` on the episodes of the confirmation an eval row's
  'confirmation_seed' names (num_confirm_episodes of them)."""
  from learners.configuration.experiment import Experiment  # pylint: disable=g-import-not-at-top
  return evaluate_export(path, confirmation_seed, Experiment().num_confirm_episodes)


def run_launch(root_dir, gin_file: str, bindings: Sequence[str], num_collectors: int,
               timeout_s: int = 300, stop_grace_s: float = 120.0
               ) -> subprocess.CompletedProcess:
  """Runs a whole job with `python -m learners.launch` as a user would, to its end.

  The ordered stop gets `stop_grace_s` (the launcher's default is Kubernetes' 30 s): on
  a loaded 2-core machine a trainer's final exports took over its 12 s share, and these
  jobs test what they train and export, not the stop's timing (test_signals and
  test_watchdogs do, with the default). A target is confirmed at once (CONFIRM_AT_ONCE)."""
  return _python_runs().run(
      ['-m', 'learners.launch', f'--root_dir={root_dir}', f'--gin_file={gin_file}',
       f'--num_collectors={num_collectors}', f'--timeout_s={timeout_s}',
       f'--stop_grace_s={stop_grace_s}'] +
      [f'--gin_bindings={b}' for b in (CONFIRM_AT_ONCE, *bindings)],
      timeout=timeout_s + 300, env=program_env())


def final_state(root_dir: str) -> Dict[str, int]:
  """Train steps of the latest checkpoint, the three exports, and the trainer's final
  'Trainer stopped at train step N' log line (-1 where absent)."""
  state = {'checkpoint': checkpoint_step(os.path.join(root_dir, 'train', 'checkpoints'))}
  for name in ('greedy_policy', 'collect_policy', 'policy'):
    step = export.exported_train_step(os.path.join(root_dir, 'policies', name))
    state[name] = -1 if step is None else step
  return state

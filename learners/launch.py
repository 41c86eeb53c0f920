r"""Starts a whole job on this host: Reverb server, collectors, trainer, evaluator.

    python -m learners.launch --root_dir=runs/job --gin_file=dqn_cartpole.gin \
      --num_collectors=2

Each program runs as a subprocess logging to root_dir/logs/<name>.log. A status line
(alive/dead per process, env steps/s, train steps/s, last eval return) prints every
--status_interval_s. The job ends when the evaluator finishes (target return reached
and confirmed, or the train step budget evaluated); then, or on Ctrl-C, every process is
stopped (SIGTERM, then SIGKILL after a grace period). If a process dies on its own,
the launcher says which, prints the tail of its log, stops the rest and exits 1.
Children also get SIGTERM if the launcher itself is killed, so none are orphaned.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import portpicker
import reverb

from learners import config
from learners.experiment import Experiment
from tfrl import replay

config.define_common_flags()
flags.DEFINE_integer('num_collectors', 2, 'Collector processes.')
flags.DEFINE_integer('port', 0, 'Reverb port (0: pick a free one).')
flags.DEFINE_float('status_interval_s', 10.0, 'Seconds between status lines.')
flags.DEFINE_float('timeout_s', 0.0, 'Stop with an error after this long (0: never).')
FLAGS = flags.FLAGS
LOG_DIR = 'logs'
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
  """Runs in the child before exec: SIGTERM it when the launcher dies."""
  try:
    ctypes.CDLL('libc.so.6').prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  except OSError:
    pass  # not Linux: the launcher's own cleanup still applies


class JobFailedError(RuntimeError):
  """A process of the job died on its own."""


class Launcher:
  """Runs the programs of one job as subprocesses (also the notebooks' API)."""

  def __init__(self, root_dir: str, gin_files: Sequence[str] = (),
               gin_bindings: Sequence[str] = (), num_collectors: int = 2,
               port: int = 0, python: str = sys.executable):
    """Args:
      root_dir: the job directory (logs go to root_dir/logs).
      gin_files, gin_bindings: passed to every program (and parsed here for status).
      num_collectors: collector processes.
      port: Reverb port (0 picks a free one).
      python: the interpreter that runs the programs.
    """
    self.root_dir = os.path.abspath(root_dir)
    self._gin_args = ([f'--gin_file={f}' for f in gin_files] +
                      [f'--gin_bindings={b}' for b in gin_bindings])
    config.parse(gin_files, gin_bindings)  # fail here, before starting anything
    self._experiment = Experiment()
    self._num_collectors = num_collectors
    self.port = port or portpicker.pick_unused_port()
    self.address = f'localhost:{self.port}'
    self._python = python
    self.processes: Dict[str, subprocess.Popen] = {}
    self._logs = {}
    self._last_status = None
    os.makedirs(os.path.join(self.root_dir, LOG_DIR), exist_ok=True)

  def log_path(self, name: str) -> str:
    return os.path.join(self.root_dir, LOG_DIR, f'{name}.log')

  def _spawn(self, name: str, program: str, args: List[str]) -> None:
    log = open(self.log_path(name), 'a')
    self._logs[name] = log
    command = [self._python, '-u', '-m', f'learners.{program}',
               f'--root_dir={self.root_dir}', *self._gin_args, *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get('TF_CPP_MIN_LOG_LEVEL', '2'))
    self.processes[name] = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env,
        preexec_fn=_die_with_parent)
    logging.info('Started %s (pid %d): %s', name, self.processes[name].pid,
                 ' '.join(command))

  def start(self, server_timeout_s: float = 120.0) -> None:
    """Starts the server, waits until it answers, then the other programs.

    Raises:
      JobFailedError: the server died or did not answer in time.
    """
    self._spawn('reverb_server', 'reverb_server', [f'--port={self.port}'])
    deadline = time.monotonic() + server_timeout_s
    while True:
      self._check_alive()
      try:
        replay.wait_for_server(self.address, timeout_s=2)
        break
      except replay.ReplayServerUnreachableError:
        if time.monotonic() > deadline:
          self.stop()
          raise JobFailedError(f'The Reverb server did not answer on {self.address} within '
                               f'{server_timeout_s:.0f} s; see {self.log_path("reverb_server")}.')
    reverb_flag = f'--reverb_address={self.address}'
    self._spawn('train', 'train', [reverb_flag])
    for task in range(self._num_collectors):
      self._spawn(f'collect_{task}', 'collect', [
          reverb_flag, f'--task_id={task}', f'--num_collectors={self._num_collectors}'])
    self._spawn('eval', 'eval', [reverb_flag])

  def _check_alive(self) -> None:
    """Raises JobFailedError if a process ended on its own (the evaluator with 0 and
    the trainer with 0 are normal ends)."""
    for name, process in self.processes.items():
      code = process.poll()
      if code is None or (code == 0 and name in ('eval', 'train')):
        continue
      self.stop()
      raise JobFailedError(f'{name} exited with code {code}. Last lines of '
                           f'{self.log_path(name)}:\n{self.tail(name)}')

  def tail(self, name: str, lines: int = 30) -> str:
    with open(self.log_path(name), errors='replace') as f:
      return ''.join(f.readlines()[-lines:])

  def done(self) -> bool:
    """True once the evaluator has finished (target reached or budget evaluated)."""
    self._check_alive()
    return self.processes['eval'].poll() == 0

  def eval_results(self) -> List[dict]:
    path = os.path.join(self.root_dir, 'eval', 'results.json')
    try:
      with open(path) as f:
        return json.load(f)
    except (OSError, ValueError):
      return []

  def status(self) -> dict:
    """Alive/exit code per process, env steps/s, train steps/s, last eval return."""
    now = time.monotonic()
    env_steps, train_step = self._counters()
    status = {'processes': {name: ('alive' if p.poll() is None else f'exited({p.poll()})')
                            for name, p in self.processes.items()},
              'env_steps': env_steps, 'train_step': train_step,
              'env_steps_per_s': float('nan'), 'train_steps_per_s': float('nan')}
    if self._last_status is not None:
      then, last = self._last_status
      elapsed = max(now - then, 1e-9)
      if env_steps is not None and last['env_steps'] is not None:
        status['env_steps_per_s'] = (env_steps - last['env_steps']) / elapsed
      if train_step is not None and last['train_step'] is not None:
        status['train_steps_per_s'] = (train_step - last['train_step']) / elapsed
    results = self.eval_results()
    status['last_eval_return'] = results[-1]['return'] if results else float('nan')
    self._last_status = (now, status)
    return status

  def _counters(self):
    try:
      items = replay.inserted_items(self.address, self._experiment.experience_table,
                                    timeout_s=2)
      sample = next(reverb.Client(self.address).sample(
          'variables', num_samples=1, emit_timesteps=False, unpack_as_table_signature=True))
      return (items * self._experiment.env_steps_per_item,
              int(sample.data['train_step']))
    except Exception:  # pylint: disable=broad-except
      return None, None  # server busy or not pushed yet: the next status will tell

  @staticmethod
  def format_status(status: dict) -> str:
    alive = ' '.join(f'{name}:{state}' for name, state in status['processes'].items())
    return (f'[{alive}] env steps {status["env_steps"]} '
            f'({status["env_steps_per_s"]:.0f}/s) | train step {status["train_step"]} '
            f'({status["train_steps_per_s"]:.0f}/s) | last eval return '
            f'{status["last_eval_return"]:.1f}')

  def wait(self, status_interval_s: float = 10.0, timeout_s: float = 0.0,
           printer=print) -> List[dict]:
    """Prints status lines until the job is done; returns the eval results.

    Raises:
      JobFailedError: a process died, or `timeout_s` passed first.
    """
    start = last = time.monotonic()
    while not self.done():
      if timeout_s and time.monotonic() - start > timeout_s:
        self.stop()
        raise JobFailedError(f'The job did not finish within {timeout_s:.0f} s.')
      if time.monotonic() - last >= status_interval_s:
        last = time.monotonic()
        printer(self.format_status(self.status()))
      time.sleep(0.5)
    printer(self.format_status(self.status()))
    return self.eval_results()

  def stop(self, grace_s: float = 30.0) -> None:
    """Stops every process, SIGTERM then SIGKILL after `grace_s`, in dependency order.

    Collectors and the evaluator go first, while the trainer still samples (a collector
    blocked by the rate limiter gets unblocked by it), then the trainer (it writes a
    final checkpoint), then the server (it writes a final Reverb checkpoint).
    """
    names = list(self.processes)
    groups = [[n for n in names if n not in ('train', 'reverb_server')],
              [n for n in names if n == 'train'],
              [n for n in names if n == 'reverb_server']]
    for group in groups:
      for name in group:
        if self.processes[name].poll() is None:
          self.processes[name].send_signal(signal.SIGTERM)
      deadline = time.monotonic() + grace_s
      for name in group:
        process = self.processes[name]
        try:
          process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
          logging.warning('%s ignored SIGTERM for %.0f s; killing it.', name, grace_s)
          process.kill()
          process.wait()
    for log in self._logs.values():
      log.close()

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.stop()


def main(argv):
  del argv
  try:
    launcher = Launcher(FLAGS.root_dir, FLAGS.gin_file, FLAGS.gin_bindings,
                        FLAGS.num_collectors, FLAGS.port)
  except config.ConfigError as e:
    raise SystemExit(f'error: {e}') from e
  try:
    launcher.start()
    results = launcher.wait(FLAGS.status_interval_s, FLAGS.timeout_s)
  except KeyboardInterrupt:
    print('Interrupted: stopping every process.')
    launcher.stop()
    return
  except JobFailedError as e:
    raise SystemExit(f'error: {e}') from e
  launcher.stop()
  last = results[-1] if results else {}
  print(f'Job finished: last eval return {last.get("return", float("nan")):.1f} at train '
        f'step {last.get("train_step")}; reached target: {last.get("reached_target")}. '
        f'Policies in {os.path.join(launcher.root_dir, "policies")}.')


def run_main():
  flags.mark_flag_as_required('root_dir')
  app.run(main)


if __name__ == '__main__':
  run_main()

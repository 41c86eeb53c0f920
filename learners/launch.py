r"""Starts a whole job on this host: Reverb server, collectors, trainer, evaluator.

    python -m learners.launch --root_dir=runs/job --gin_file=dqn_cartpole.gin \
      --num_collectors=2

Each program runs as a subprocess logging to root_dir/logs/<name>.log. A status line
(alive/dead per process, env steps/s, train steps/s, last eval return) prints every
--status_interval_s. The job ends when the evaluator finishes (target return reached
and confirmed, or the train step budget evaluated); then, or on Ctrl-C, SIGTERM or
SIGHUP (within --stop_grace_s), every process is
stopped in an order that lets the trainer finish: the evaluator, then the trainer while
the collectors still feed it (it writes its final checkpoint and policies), then the
collectors, then the server (final Reverb checkpoint). Each gets SIGTERM, then SIGKILL
after a grace period. Children run in their own session, so a Ctrl-C reaches only the
launcher, which stops them in that order.

Exit status 0 means every process ended cleanly and the trainer wrote its final
checkpoint and exports. If a process dies on its own, the launcher says which, repeats
its 'error:' line and the tail of its log, stops the rest and exits 1; 3 when a process
had to be killed at the stop; 5 when a process stalled or stopped answering for
--stall_timeout_s (learners/heartbeat.py); 2 for bad flags or settings, before anything
starts. Children also get SIGTERM if the launcher itself is killed, so none are
orphaned. Everything listens and connects on loopback addresses.
"""
import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Union

from absl import app
from absl import flags
from absl import logging
import portpicker
import reverb
import tensorflow as tf

from learners import child_process
from learners import config
from learners import process
from learners import heartbeat
from learners import ray_backend
from learners import stop_plan
from learners import validation
from learners.experiment import Experiment
from tfrl import export
from tfrl import learner as learner_lib
from tfrl import logs
from tfrl import metrics
from tfrl import replay
from tfrl import run_dir
from tfrl import triggers
from tfrl.replay import fallback

config.define_common_flags()
flags.DEFINE_integer('num_collectors', 2, 'Collector processes.')
flags.DEFINE_integer('port', 0, 'Reverb port (0: pick a free one).')
flags.DEFINE_float('status_interval_s', 10.0, 'Seconds between status lines.')
flags.DEFINE_float('stop_grace_s', stop_plan.DEFAULT_STOP_GRACE_S,
                   'Seconds the ordered stop (Ctrl-C, SIGTERM, SIGHUP, the end) may take in '
                   'all, split between its stages; match the scheduler\'s grace period.')
flags.DEFINE_float('timeout_s', 0.0, 'Stop with an error after this long (0: never).')
flags.DEFINE_float('stall_timeout_s', 120.0,
                   'End the job (exit status 5) when a process makes no progress while '
                   'working, or does not answer, for this long (0: never).')
flags.DEFINE_enum('backend', 'local', ['local', 'ray'],
                  'local: every program a subprocess of this host. ray: processes placed by '
                  "Ray on the cluster at --ray_address (the 'ray' extra; root_dir on a path "
                  'every node sees).')
flags.DEFINE_string('ray_address', None, "The Ray cluster's address (HOST:PORT of its head).")
flags.DEFINE_string('ray_resources', '{}',
                    'JSON: program (reverb_server, train, collect, eval) -> extra Ray '
                    'resources its process asks for, e.g. \'{"collect": {"actors": 1}}\' to '
                    'put collectors on the nodes started with that custom resource.')
flags.DEFINE_float('ray_trainer_gpus', -1.0,
                   "GPUs the trainer asks Ray for (-1: one if the cluster has any).")
FLAGS = flags.FLAGS
LOG_DIR = 'logs'
REVERB_DIR = 'reverb'  # the server's checkpoints (learners/reverb_server.py)


class JobFailedError(RuntimeError):
  """A process of the job died on its own, or did not stop cleanly."""


class JobStalledError(JobFailedError):
  """A process stopped progressing or answering (learners/heartbeat.py)."""


class Launcher:
  """Runs the programs of one job as subprocesses (also the notebooks' API)."""

  def __init__(self, root_dir: str, gin_files: Sequence[str] = (),
               gin_bindings: Sequence[str] = (), num_collectors: int = 2,
               port: int = 0, python: str = sys.executable,
               backend: Optional['ray_backend.RayBackend'] = None,
               stop_grace_s: float = stop_plan.DEFAULT_STOP_GRACE_S,
               overwrite: bool = False):
    """Args:
      root_dir: the job directory (logs go to root_dir/logs).
      gin_files, gin_bindings: passed to every program (and parsed here for status).
      num_collectors: collector processes.
      port: Reverb port (0 picks a free one; with a backend, its node picks it).
      python: the interpreter that runs the programs (on every node).
      backend: a `ray_backend.RayBackend` places the programs on a Ray cluster's nodes;
        None runs them as subprocesses of this host.
      overwrite: passed to the trainer, which owns root_dir (see `tfrl.run_dir.claim`).

    Raises:
      learners.config.ConfigError: a missing gin file, a bad binding or Experiment
        setting, a root_dir that cannot be a directory, a port in use.
    """
    self.root_dir = os.path.abspath(root_dir)
    # Fail here, before starting anything, so no child reports (and blames) it.
    try:
      validation.check_root_dir(root_dir)
    except validation.ValidationError as e:
      raise config.ConfigError(e.message) from e
    config.parse(gin_files, gin_bindings)
    if not backend:  # a backend's server picks its port on its own node
      try:
        replay.check_port_free(port)
      except replay.PortInUseError as e:
        raise config.ConfigError(str(e)) from e
    # Absolute paths: a program on another node starts in another directory.
    self._gin_args = ([f'--gin_file={config.resolve_gin_file(f)}' for f in gin_files] +
                      [f'--gin_bindings={b}' for b in gin_bindings])
    self._experiment = Experiment()
    self._num_collectors = num_collectors
    self._backend = backend
    self._overwrite = overwrite
    self.port = port or (0 if backend else portpicker.pick_unused_port())
    self.address = f'127.0.0.1:{self.port}'  # a backend's server sets its own
    self._python = python
    self.processes: Dict[str, Union[subprocess.Popen, 'ray_backend.RayProcess']] = {}
    self._logs = {}
    # Rates between status lines; a counter the server cannot tell now is skipped.
    self._env_steps_rate, self._train_steps_rate = metrics.Throughput(), metrics.Throughput()
    self._counted = {'env_steps': False, 'train_step': False}
    self._problems = None  # set by stop()
    self.killed = set()  # what stop() had to kill
    self._stop_shares = stop_plan.shares(stop_grace_s)  # ValueError if not > 0
    self.stop_grace_s = stop_grace_s
    self.lost = set()  # collectors killed during the job, which went on without them
    os.makedirs(os.path.join(self.root_dir, LOG_DIR), exist_ok=True)

  def log_path(self, name: str) -> str:
    return os.path.join(self.root_dir, LOG_DIR, f'{name}.log')

  def _spawn(self, name: str, program: str, args: List[str],
             port_flag: Optional[str] = None) -> None:
    """Starts a program; with a backend, `port_flag` asks its node for a free port."""
    command = [self._python, '-u', '-m', f'learners.{program}',
               f'--root_dir={self.root_dir}', *self._gin_args, *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get('TF_CPP_MIN_LOG_LEVEL', '2'))
    # The program's own grace after SIGTERM fits inside its stage's share of the stop.
    env[stop_plan.STOP_GRACE_ENV] = str(self._stop_shares[stop_plan.stage(name)])
    if self._backend is not None:
      child = self._backend.start(program, command, self.log_path(name), env, port_flag)
      self.processes[name] = child
      logs.progress('Started %s (pid %d on %s, Ray node %s): %s', name, child.pid, child.ip,
                    child.node_id, ' '.join(command))
      return
    log = open(self.log_path(name), 'a')
    self._logs[name] = log
    self.processes[name] = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=child_process.child_env(env),
        start_new_session=True)
    logs.progress('Started %s (pid %d): %s', name, self.processes[name].pid,
                 ' '.join(command))

  def start(self, server_timeout_s: float = 120.0) -> None:
    """Starts the server, waits until it answers, then the other programs.

    Raises:
      JobFailedError: the server died or did not answer in time.
    """
    if self._overwrite:  # a run started over must not replay the old run's experience
      fallback.discard(os.path.join(self.root_dir, REVERB_DIR))
    if self._backend is not None and not self.port:
      self._spawn('reverb_server', 'reverb_server', [], port_flag='--port')
      server = self.processes['reverb_server']
      self.port, self.address = server.port, f'{server.ip}:{server.port}'
    else:
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
    # Once per job, on the launcher's console (the server's own goes to its log).
    replay.warn_exposed(self.port)
    reverb_flag = f'--reverb_address={self.address}'
    self._spawn('train', 'train', [reverb_flag] + ['--overwrite'] * self._overwrite)
    for task in range(self._num_collectors):
      self._spawn(f'collect_{task}', 'collect', [
          reverb_flag, f'--task_id={task}', f'--num_collectors={self._num_collectors}'])
    self._spawn('eval', 'eval', [reverb_flag])

  def _check_alive(self) -> None:
    """Raises JobFailedError if the job cannot go on.

    Normal ends are the evaluator's and the trainer's status 0. A collector killed by a
    signal (a preempted machine) is reported once and the job goes on with the others;
    a collector that exits with an error (which the others will meet too), the last
    collector, or any other process ending fails the job.
    """
    for name, child in self.processes.items():
      code = child.poll()
      if code is None or (code == 0 and name in ('eval', 'train')) or name in self.lost:
        continue
      others = [n for n, p in self.processes.items()
                if n.startswith('collect') and n != name and p.poll() is None]
      if name.startswith('collect') and code < 0 and others:
        self.lost.add(name)
        logging.warning('%s %s (exit status %d); the job goes on with %s. Last lines of '
                        '%s:\n%s', name, _meaning(code), code, ', '.join(others),
                        self.log_path(name), self.tail(name, 10))
        continue
      problems = self.stop()
      # The child's own 'error:' line says why (a full disk, a port in use), which the
      # status alone does not.
      said = _last_error_line(self.tail(name, 200))
      raise JobFailedError('\n'.join([f'{name} {_meaning(code)} (exit status {code})'
                                       f'{": " + said if said else ""}. '
                                       f'Last lines of {self.log_path(name)}:\n'
                                       f'{self.tail(name)}'] +
                                      [p for p in problems if not p.startswith(name)]))

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
    env_steps, train_step = self._counters()
    status = {'processes': {name: ('alive' if p.poll() is None else f'exited({p.poll()})')
                            for name, p in self.processes.items()},
              'env_steps': env_steps, 'train_step': train_step,
              'env_steps_per_s': self._rate('env_steps', env_steps, self._env_steps_rate),
              'train_steps_per_s': self._rate('train_step', train_step,
                                              self._train_steps_rate)}
    results = self.eval_results()
    status['last_eval_return'] = results[-1]['return'] if results else float('nan')
    return status

  def _rate(self, name: str, count: Optional[int], throughput: metrics.Throughput
            ) -> float:
    """count/s since the last status that had this count (NaN the first time)."""
    if count is None:
      return float('nan')
    rate = throughput.rate(count)
    first, self._counted[name] = not self._counted[name], True
    return float('nan') if first else rate

  def _counters(self):
    """(env steps, train step) from the server; None for what it cannot tell now."""
    try:
      info = replay.wait_for_server(self.address, timeout_s=2)
      items = int(info[self._experiment.layout.experience_table].rate_limiter_info
                  .insert_stats.completed)
      train_step = None
      if info[replay.VARIABLES_TABLE].current_size:  # else sampling would wait for a push
        sample = replay.call_with_timeout(
            lambda: next(reverb.Client(self.address).sample(
                replay.VARIABLES_TABLE, num_samples=1, emit_timesteps=False,
                unpack_as_table_signature=True)),
            2.0, f'a sample of the variables table at {self.address}')
        train_step = int(sample.data['train_step'])
      return items * self._experiment.layout.env_steps_per_item, train_step
    except replay.ReplayServerUnreachableError:
      return None, None  # server busy or restarting: the next status will tell

  @staticmethod
  def format_status(status: dict) -> str:
    alive = ' '.join(f'{name}:{state}' for name, state in status['processes'].items())
    return (f'[{alive}] env steps {status["env_steps"]} '
            f'({status["env_steps_per_s"]:.0f}/s) | train step {status["train_step"]} '
            f'({status["train_steps_per_s"]:.0f}/s) | last eval return '
            f'{metrics.format_return(status["last_eval_return"])}')

  def wait(self, status_interval_s: float = 10.0, timeout_s: float = 0.0,
           printer=print, monitor: Optional[heartbeat.Monitor] = None) -> List[dict]:
    """Prints status lines until the job is done; returns the eval results.

    Raises:
      JobFailedError: a process died, or `timeout_s` passed first.
      JobStalledError: `monitor` found a process stalled or not answering.
    """
    start = last = time.monotonic()
    while not self.done():
      if timeout_s and time.monotonic() - start > timeout_s:
        self.stop()
        raise JobFailedError(f'The job did not finish within {timeout_s:.0f} s.')
      stalled = monitor.stalled() if monitor else None
      if stalled or time.monotonic() - last >= status_interval_s:
        last = time.monotonic()
        line = self.format_status(self.status())
        if monitor:
          line += ''.join(f' | {name} {state}' for name, state in monitor.check().items()
                          if state != 'ok')
        printer(line)
      if stalled:
        raise JobStalledError(stalled)
      time.sleep(0.5)
    printer(self.format_status(self.status()))
    return self.eval_results()

  def stop(self, grace_s: Optional[float] = None) -> List[str]:
    """Stops every process in an order that lets the trainer finish; idempotent.

    The evaluator first; then the trainer, while the collectors still feed it (a
    trainer waiting for a sample could not see its stop signal otherwise), so it ends
    its current run and writes its final checkpoint and exports; then the collectors
    (nothing samples any more, so they drop what a rate limiter holds); then the server,
    which writes a final Reverb checkpoint. Each group gets SIGTERM, then SIGKILL after
    its share of `grace_s` (stop_plan; each program's own grace is set inside it when
    it starts, so it can say why). `killed` then names what had to be killed.

    Args:
      grace_s: the whole stop's grace period (default: the Launcher's stop_grace_s).

    Returns:
      One line per process that did not end cleanly (killed, or a non-zero status).
    """
    if self._problems is None:
      names = list(self.processes)
      groups = [[n for n in names if n == 'eval'], [n for n in names if n == 'train'],
                [n for n in names if n.startswith('collect')],
                [n for n in names if n == 'reverb_server']]
      killed = self.killed
      budget = stop_plan.shares(self.stop_grace_s if grace_s is None else grace_s)
      # Each stage may use what the stages before it left unused: its deadline is the
      # sum of the shares so far, so the whole stop still ends inside the grace period.
      deadline = time.monotonic()
      for group in groups:
        for name in group:
          if self.processes[name].poll() is None:
            self.processes[name].send_signal(signal.SIGTERM)
        deadline += budget[stop_plan.stage(group[0])] if group else 0.0
        group_grace_s = max(0.0, deadline - time.monotonic())
        for name in group:
          child = self.processes[name]
          try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
          except subprocess.TimeoutExpired:
            logging.warning('%s ignored SIGTERM for %.0f s; killing it.', name,
                            group_grace_s)
            child.kill()
            child.wait()
            killed.add(name)
      self._problems = [
          f'{name} {"ignored SIGTERM and was killed" if name in killed else _meaning(code)}'
          f' (exit status {code}); see {self.log_path(name)}'
          for name, code in ((n, p.returncode) for n, p in self.processes.items())
          if (code != 0 and name not in self.lost) or name in killed]
      for log in self._logs.values():
        log.close()
      for child in self.processes.values():
        if hasattr(child, 'release'):  # a backend's: free its place on the cluster
          child.release()
    return self._problems

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.stop()


def _stop_after_stall(launcher: Launcher, what: str) -> None:
  """Ends a stalled job through the ordered stop and exits with EXIT_STALLED."""
  print(f'error: {what}; stopping the job.', file=sys.stderr, flush=True)
  for child in launcher.processes.values():
    if child.poll() is None:  # a SIGSTOPped process could not handle the stop's SIGTERM
      child.send_signal(signal.SIGCONT)
  problems = launcher.stop()
  if problems:
    print('  ' + '\n  '.join(problems), file=sys.stderr)
  print(f'error: {what} (exit status {process.EXIT_STALLED}). '
        f'{_final_state(launcher.root_dir)}', file=sys.stderr, flush=True)
  sys.exit(process.EXIT_STALLED)


def _last_error_line(log_text: str) -> Optional[str]:
  """The last 'error: ...' line a program printed, or None."""
  lines = [l.strip() for l in log_text.splitlines() if l.startswith('error:')]
  return lines[-1] if lines else None


def _meaning(code: Optional[int]) -> str:
  return process.EXIT_STATUS_MEANING.get(code, 'exited with an error')


def _final_state(root_dir: str) -> str:
  """Where the trainer's final checkpoint and the greedy export stand."""
  latest = tf.train.latest_checkpoint(os.path.join(root_dir, learner_lib.TRAIN_DIR,
                                                   learner_lib.CHECKPOINT_DIR))
  greedy = os.path.join(root_dir, triggers.POLICY_DIR, triggers.GREEDY_POLICY)
  return (f'Final checkpoint {latest}; greedy policy (train step '
          f'{export.exported_train_step(greedy)}) in {greedy}.')


def _ray_backend_from_flags() -> 'ray_backend.RayBackend':
  """The Ray backend the flags ask for; bad flags end the program with status 2."""
  if not FLAGS.ray_address:
    config.fail('--backend=ray needs --ray_address=HOST:PORT (the Ray head node).')
  try:
    resources = json.loads(FLAGS.ray_resources)
    unknown = set(resources) - set(ray_backend.DEFAULT_RESOURCES)
    if unknown or not all(isinstance(r, dict) for r in resources.values()):
      raise ValueError(f'programs are {sorted(ray_backend.DEFAULT_RESOURCES)}, each with a '
                       f'{{resource: amount}} object; got {FLAGS.ray_resources}')
  except ValueError as e:
    config.fail(f'--ray_resources: {e}')
  gpus = None if FLAGS.ray_trainer_gpus < 0 else FLAGS.ray_trainer_gpus
  try:
    return ray_backend.RayBackend(FLAGS.ray_address, resources, gpus)
  except ImportError as e:
    config.fail(str(e))
  except ConnectionError as e:
    config.fail(f'No Ray cluster at --ray_address={FLAGS.ray_address}: {e}')


def _raise_keyboard_interrupt(signum, unused_frame):
  """Signal handler: SIGTERM, SIGINT and SIGHUP take Ctrl-C's path (the ordered stop).
  Further signals are ignored from here: one arriving before the ordered stop begins
  would otherwise escape it (PR_SET_PDEATHSIG under a dying parent sends several)."""
  process.ignore_stop_signals()
  raise KeyboardInterrupt(f'signal {signum}')


def main(argv):
  del argv
  logs.quiet_absl_unless_asked()
  backend = None
  if FLAGS.backend == 'ray':
    backend = _ray_backend_from_flags()
  try:
    validation.check_flags(FLAGS, ('port', 'num_collectors', 'status_interval_s',
                                   'timeout_s', 'stall_timeout_s'))
  except validation.ValidationError as e:
    config.fail(e.message)
  try:
    launcher = Launcher(FLAGS.root_dir, FLAGS.gin_file, FLAGS.gin_bindings,
                        FLAGS.num_collectors, FLAGS.port, backend=backend,
                        stop_grace_s=FLAGS.stop_grace_s, overwrite=FLAGS.overwrite)
    # The trainer takes root_dir's lock; probing it here refuses a busy root_dir before
    # any program starts.
    run_dir.RootDirLock(launcher.root_dir).release()
  except (config.ConfigError, run_dir.RootDirBusy) as e:
    config.fail(str(e))
  except ValueError as e:  # --stop_grace_s
    config.fail(f'--stop_grace_s: {e}')
  results = []
  # SIGTERM (timeout, Slurm, Kubernetes, systemd) and SIGHUP run Ctrl-C's ordered stop.
  process.on_stop_signals(_raise_keyboard_interrupt)
  try:
    launcher.start()
    results = launcher.wait(FLAGS.status_interval_s, FLAGS.timeout_s,
                            monitor=heartbeat.Monitor(FLAGS.root_dir, FLAGS.stall_timeout_s))
  except JobStalledError as e:
    _stop_after_stall(launcher, str(e))
  except KeyboardInterrupt:
    print('Interrupted: stopping the job in order (evaluator, trainer, collectors, '
          'server); this takes a few seconds.', flush=True)
  except JobFailedError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(1)
  process.ignore_stop_signals()  # a second signal must not cut the ordered stop
  problems = launcher.stop()
  if problems:
    print('error: the job did not stop cleanly:\n  ' + '\n  '.join(problems),
          file=sys.stderr)
    sys.exit(process.EXIT_STOP_TIMEOUT if launcher.killed else 1)
  if launcher.lost:
    print(f'Lost during the job (reported above): {", ".join(sorted(launcher.lost))}.')
  # After Ctrl-C/SIGTERM `wait` returned nothing: the evaluator's file has what it did.
  results = results or launcher.eval_results()
  last = results[-1] if results else {}
  print(f'Job finished: last eval return '
        f'{metrics.format_return(last.get("return", float("nan")))} at train '
        f'step {last.get("train_step")}; reached target: {last.get("reached_target")}. '
        f'{_final_state(launcher.root_dir)}')
  process.exit_now(0)


def run_main():
  flags.mark_flag_as_required('root_dir')
  app.run(main)


if __name__ == '__main__':
  run_main()

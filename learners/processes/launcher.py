"""The launcher of one job: its programs as processes, their status, their ordered stop.

`Launcher` starts the Reverb server, then the trainer, the collectors and the evaluator
(as subprocesses of this host, or through a backend such as `ray_backend.RayBackend`),
reports their status, notices a process that ends on its own, and stops them all in an
order that lets the trainer finish. learners/launch.py is its command line; notebooks
use it directly.
"""
import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Union

from absl import logging

from learners.configuration import config
from learners.configuration import validation
from learners.processes import fork_server
from learners.processes import heartbeat
from learners.processes import job_status
from learners.processes import process
from learners.processes import ray_backend
from learners.processes import stop_plan
from tfrl import logs
from tfrl import replay
from tfrl.replay import fallback

LOG_DIR = 'logs'
REVERB_DIR = 'reverb'  # the server's checkpoints (learners/job/server_program.py)
# Where the server writes the port it listens on (learners/job/server_program.py).
PORT_FILE = 'reverb_server.port'


class JobFailedError(RuntimeError):
  """A process of the job died on its own, or did not stop cleanly.

  Attributes:
    status: the exit status of the process that failed, where one did (else None).
  """

  def __init__(self, message: str, status: Optional[int] = None):
    super().__init__(message)
    self.status = status


class JobStalledError(JobFailedError):
  """A process stopped progressing or answering (learners/processes/heartbeat.py)."""

class Launcher:
  """Runs the programs of one job as subprocesses (also the notebooks' API)."""

  def __init__(self, root_dir: str, gin_files: Sequence[str] = (),
               gin_bindings: Sequence[str] = (), num_collectors: int = 2,
               port: int = 0, python: str = sys.executable,
               backend: Optional['ray_backend.RayBackend'] = None,
               stop_grace_s: float = stop_plan.DEFAULT_STOP_GRACE_S,
               overwrite: bool = False, trainer_args: Sequence[str] = ()):
    """Args:
      root_dir: the job directory (logs go to root_dir/logs).
      gin_files, gin_bindings: passed to every program (and parsed here for status).
      num_collectors: collector processes (none for an offline job).
      port: Reverb port (0 picks a free one; with a backend, its node picks it).
      python: the interpreter that runs the programs (on every node).
      backend: a `ray_backend.RayBackend` places the programs on a Ray cluster's nodes;
        None runs them as subprocesses of this host.
      overwrite: passed to the trainer, which owns root_dir (see `tfrl.run_dir.claim`).
      trainer_args: more flags for the trainer (a population member's: --pbt_dir, ...).

    Raises:
      learners.configuration.config.ConfigError: a missing gin file, a bad binding or
        Experiment setting, a root_dir that cannot be a directory, a port in use.
    """
    self.root_dir = os.path.abspath(root_dir)
    # Fail here, before starting anything, so no child reports (and blames) it.
    try:
      validation.check_root_dir(root_dir)
    except validation.ValidationError as e:
      raise config.ConfigError(e.message) from e
    experiment = config.parse(gin_files, gin_bindings)
    if not backend:  # a backend's server picks its port on its own node
      try:
        replay.check_port_free(port)
      except replay.PortInUseError as e:
        raise config.ConfigError(str(e)) from e
    # Absolute paths: a program on another node starts in another directory.
    self._gin_args = ([f'--gin_file={config.resolve_gin_file(f)}' for f in gin_files] +
                      [f'--gin_bindings={b}' for b in gin_bindings])
    if experiment.task_sequence is not None:
      raise config.ConfigError(
          "Experiment.tasks: a task sequence runs in one process (tfrl-train-eval) for "
          "now; tfrl-launch takes Experiment.task_mode = 'multi_task'.")
    if experiment.multi_task and num_collectors < len(experiment.tasks):
      raise config.ConfigError(
          f'--num_collectors={num_collectors} for {len(experiment.tasks)} tasks in '
          "'multi_task' mode: collector k steps task k modulo the list, so each task "
          f'needs one; use --num_collectors={len(experiment.tasks)} or more.')
    # An offline job (Experiment.dataset_dir alone) trains from the server's dataset.
    self._num_collectors = 0 if experiment.offline else num_collectors
    if experiment.offline:
      logs.progress('Offline job: no collectors; the server loads %s.',
                    experiment.dataset_dir)
    self._backend = backend
    self._overwrite = overwrite
    self._trainer_args = list(trainer_args)
    # 0: the server picks its port as it binds it and writes it to root_dir/PORT_FILE
    # (a backend's server, on its node). A port picked here stayed free for the
    # seconds until the server bound it, and another job could take it meanwhile:
    # this launcher then waited on that job's server and pointed its programs at it.
    self.port = port
    self.address = f'127.0.0.1:{port}' if port else None
    self._python = python
    self.processes: Dict[str, Union[subprocess.Popen, fork_server.ForkedProcess,
                                    'ray_backend.RayProcess']] = {}
    # Local programs start as forks of one process that imported their libraries once
    # (learners/processes/fork_server.py).
    self._starter = fork_server.ProgramStarter(python, self.log_path('fork_server'))
    self.experiment = experiment
    self._status = job_status.StatusReader(experiment.layout, experiment.offline)
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
    self.processes[name] = self._starter.start(command, self.log_path(name), env)
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
      port_file = os.path.join(self.root_dir, PORT_FILE)
      if os.path.exists(port_file):
        os.remove(port_file)  # an earlier run's
      self._spawn('reverb_server', 'reverb_server', [f'--port={self.port}'])
    deadline = time.monotonic() + server_timeout_s
    while True:
      self._check_alive()
      try:
        if self.address is None:
          self._read_server_port(port_file)
        else:
          replay.wait_for_server(self.address, timeout_s=2)
          break
      except replay.ReplayServerUnreachableError:
        pass
      if time.monotonic() > deadline:
        self.stop()
        where = self.address or 'the port it was to pick'
        raise JobFailedError(f'The Reverb server did not answer on {where} within '
                             f'{server_timeout_s:.0f} s; see {self.log_path("reverb_server")}.')
    # Once per job, on the launcher's console (the server's own goes to its log).
    replay.warn_exposed(self.port)
    reverb_flag = f'--reverb_address={self.address}'
    self._spawn('train', 'train',
                [reverb_flag] + ['--overwrite'] * self._overwrite + self._trainer_args)
    for task in range(self._num_collectors):
      self._spawn(f'collect_{task}', 'collect', [
          reverb_flag, f'--task_id={task}', f'--num_collectors={self._num_collectors}'])
    self._spawn('eval', 'eval', [reverb_flag])
    self._starter.close()  # every program has started; the fork server holds memory

  def _read_server_port(self, port_file: str) -> None:
    """Takes the port the server wrote once bound (sets port and address); waits a
    moment when it has not written it yet."""
    try:
      with open(port_file) as f:
        self.port = int(f.read())
      self.address = f'127.0.0.1:{self.port}'
    except (FileNotFoundError, ValueError):  # not yet, or not yet whole
      time.sleep(0.2)

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
                        '%s:\n%s', name, meaning(code), code, ', '.join(others),
                        self.log_path(name), self.tail(name, 10))
        continue
      problems = self.stop()
      # The child's own 'error:' line says why (a full disk, a port in use), which the
      # status alone does not.
      said = _last_error_line(self.tail(name, 200))
      raise JobFailedError('\n'.join([f'{name} {meaning(code)} (exit status {code})'
                                       f'{": " + said if said else ""}. '
                                       f'Last lines of {self.log_path(name)}:\n'
                                       f'{self.tail(name)}'] +
                                      [p for p in problems if not p.startswith(name)]),
                           status=code)

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
    """Alive/exit code per process, env steps/s, train steps/s, last eval return (see
    `job_status.StatusReader.read`)."""
    return self._status.read(self.address, self.processes, self.eval_results)

  format_status = staticmethod(job_status.format_status)

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
          f'{name} {"ignored SIGTERM and was killed" if name in killed else meaning(code)}'
          f' (exit status {code}); see {self.log_path(name)}'
          for name, code in ((n, p.returncode) for n, p in self.processes.items())
          if (code != 0 and name not in self.lost) or name in killed]
      self._starter.close()
      for child in self.processes.values():
        if hasattr(child, 'release'):  # a backend's: free its place on the cluster
          child.release()
    return self._problems

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.stop()


def _last_error_line(log_text: str) -> Optional[str]:
  """The last 'error: ...' line a program printed, or None."""
  lines = [l.strip() for l in log_text.splitlines() if l.startswith('error:')]
  return lines[-1] if lines else None


def meaning(code: Optional[int]) -> str:
  """What a program's exit status means, for messages."""
  return process.EXIT_STATUS_MEANING.get(code, 'exited with an error')

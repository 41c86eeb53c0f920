"""Starting programs as forks of one process that has already imported their libraries.

A tfrl program spends 4-7 CPU-seconds importing TensorFlow, TF-Agents, Reverb, gin and
tfrl before it does anything, and a launched job starts four to six programs. The
launcher (and the test suite's program runner) instead start one fork server: a plain
`python -m learners.processes.fork_server_process` that imports what the programs
import, once, then forks a copy of itself for each program, which runs `python -m
learners.<program>` exactly as an exec'd interpreter would (same `sys.argv`,
environment, working directory, standard streams, and `__main__`).

Forking is safe then because nothing has started: no TensorFlow op has run (the
runtime and its thread pools come with the first op), no gRPC channel or Reverb server
exists, and no Python thread runs (OpenBLAS's worker, the one native thread, is
fork-safe by OpenBLAS's design). The program modules (which define flags when imported)
are imported only in the fork.

Each program is still the caller's child: the server forks twice and the middle
process exits at once, so Linux re-parents the program to the nearest ancestor marked
as a child subreaper, which `ForkServer` makes the calling process. `ForkedProcess`
then waits for it, reads its exit status and signals it as `subprocess.Popen` would,
and the program dies with its launcher (`learners.processes.child_process`) once
re-parented.

Used where Linux offers subreapers; with `TFRL_FORK_SERVER=0` every program is exec'd.
The server ends when its caller closes it or dies.
"""
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Mapping, Optional, Sequence

from absl import logging

from learners.processes import child_process
from learners.processes.fork_server_process import INHERITED_SERVER_ENV, open_output

ENABLE_ENV = 'TFRL_FORK_SERVER'
# The programs that start programs themselves (a job's launcher, a population's runner):
# each gets a fork server of its own (see `fork_server_process._fork_inherited_server`).
PROGRAM_STARTERS = ('learners.launch', 'learners.pbt')
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
# The server's last argument: room for each program's command line (blank in `ps`).
ROOM_ARG = ' ' * 4096
# The first answer waits for the server's imports (minutes on a loaded machine).
ANSWER_TIMEOUT_S = 300.0


class ForkServerError(RuntimeError):
  """The fork server could not start a program (it died, refused, or did not answer)."""


def enabled() -> bool:
  """Whether programs are to be started through a fork server (see the module doc)."""
  return (os.environ.get(ENABLE_ENV, '1') != '0' and sys.platform.startswith('linux')
          and hasattr(os, 'fork'))


def _become_subreaper() -> bool:
  """Marks this process a child subreaper (Linux 3.4+); whether that worked."""
  try:
    return ctypes.CDLL('libc.so.6', use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
  except (OSError, AttributeError):
    return False


class ForkedProcess:
  """`subprocess.Popen`'s interface (pid, args, returncode, poll, wait, send_signal,
  kill) over a program the fork server started as this process's child."""

  def __init__(self, pid: int, args: Sequence[str]):
    self.pid = pid
    self.args = list(args)
    self.returncode: Optional[int] = None

  def poll(self) -> Optional[int]:
    if self.returncode is None:
      try:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
      except ChildProcessError:
        # Reaped by someone else (a `waitpid(-1)` elsewhere in this process): its status
        # is lost; report a failure rather than wait forever.
        self.returncode = 1
        return self.returncode
      if pid:
        self.returncode = os.waitstatus_to_exitcode(status)
    return self.returncode

  def wait(self, timeout: Optional[float] = None) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.001
    while self.poll() is None:
      if deadline is not None and time.monotonic() >= deadline:
        raise subprocess.TimeoutExpired(self.args, timeout)
      remaining = 0.05 if deadline is None else deadline - time.monotonic()
      time.sleep(max(0.0, min(delay, remaining, 0.05)))
      delay *= 2
    return self.returncode

  def send_signal(self, sig: int) -> None:
    if self.poll() is None:
      os.kill(self.pid, sig)

  def kill(self) -> None:
    self.send_signal(signal.SIGKILL)


class _InheritedServer(ForkedProcess):
  """A fork server this process's start forked for it (its child): the pipes to it, and
  Popen's interface to the process."""

  def __init__(self, pid: int, stdin, stdout):
    super().__init__(pid, ['fork server'])
    self.stdin, self.stdout = stdin, stdout

  def wait(self, timeout: Optional[float] = None) -> int:
    returncode = super().wait(timeout)
    self.stdout.close()
    return returncode


class ForkServer:
  """Starts programs through one fork server process, started at the first request.

  Args:
    python: the interpreter that runs the server.
    log_path: where the server's own output goes (its import warnings).
    env: the server's environment; variables that libraries read at import time
      (TF_CPP_MIN_LOG_LEVEL) take effect from here for every program.
  """

  def __init__(self, python: str = sys.executable, log_path: str = os.devnull,
               env: Optional[Mapping[str, str]] = None):
    self._python = python
    self._log_path = log_path
    self._env = dict(os.environ if env is None else env)
    self._server: Optional[subprocess.Popen] = None
    self._log = None
    self._lock = threading.Lock()  # one request and its answer at a time

  @classmethod
  def inherited(cls, log_path: str = os.devnull) -> Optional['ForkServer']:
    """The fork server this process was started with (`start(...,
    with_fork_server=True)`), if it was and the server is still its child; else None.
    Its programs' start costs no imports at all: the server is a fork of this
    process's own starting point, made before the program began."""
    spec = os.environ.pop(INHERITED_SERVER_ENV, None)
    if not spec:
      return None
    try:
      pid, answers, requests = (int(part) for part in spec.split(':'))
      os.fstat(answers)
      os.fstat(requests)
    except (ValueError, OSError):
      return None
    server = _InheritedServer(pid, os.fdopen(requests, 'wb'), os.fdopen(answers, 'rb'))
    if server.poll() is not None or not _become_subreaper():
      server.stdin.close()
      server.stdout.close()
      return None
    forks = cls(log_path=log_path)
    forks._server = server
    return forks

  def _start_server(self) -> subprocess.Popen:
    if not _become_subreaper():
      raise ForkServerError('this process cannot adopt forked programs (no '
                            'PR_SET_CHILD_SUBREAPER)')
    self._log = open(self._log_path, 'a')
    # The server ends when its requests pipe closes (this process closed it or died),
    # not by PR_SET_PDEATHSIG: that follows the thread that started it, and a request
    # from a short-lived thread (a pool's) would take the server down when it ends.
    self._server = subprocess.Popen(
        [self._python, '-u', '-m', 'learners.processes.fork_server_process', ROOM_ARG],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
        env=self._without_parent(self._env), start_new_session=True)
    return self._server

  def start(self, args: Sequence[str], env: Mapping[str, str], stdout_path: str,
            stderr_path: Optional[str] = None, cwd: Optional[str] = None,
            append: bool = True, timeout_s: float = ANSWER_TIMEOUT_S,
            with_fork_server: Optional[bool] = None) -> ForkedProcess:
    """Starts `python <args>` as a fork of the server.

    Args:
      args: the interpreter's arguments: `-m <module> ...` (the module's `__main__` runs),
        `-c <code> ...` or `<script.py> ...`, optionally after `-u` (output is
        unbuffered anyway).
      env: its whole environment. Set `child_process.PARENT_PID_ENV` (through
        `child_process.child_env`) for it to die with this process.
      stdout_path: the file its standard output goes to.
      stderr_path: the file its standard error goes to (None: with stdout).
      cwd: its working directory (None: this process's).
      append: append to the files (else truncate them).
      timeout_s: how long to wait for the server's answer.
      with_fork_server: give the program a fork server of its own, for the programs it
        starts (`ForkServer.inherited()`); None: if it is one of `PROGRAM_STARTERS`.

    Returns:
      The program, a child of this process.

    Raises:
      ValueError: `args` is neither `-m` nor `-c` form.
      ForkServerError: the server could not be started, died, refused or did not
        answer within `timeout_s`.
    """
    args = list(args)
    main = args[1:] if args[:1] == ['-u'] else args
    if main[:1] and not main[0].startswith('-'):
      main = ['script', *main]  # python script.py ...
    if len(main) < 2 or main[0] not in ('-m', '-c', 'script'):
      raise ValueError(f'the fork server runs `-m module`, `-c code` or a script, not '
                       f'{args[:2]}')
    if with_fork_server is None:
      with_fork_server = main[0] == '-m' and main[1] in PROGRAM_STARTERS
    command = [self._python, *args]
    outputs = [os.path.abspath(p) for p in (stdout_path, stderr_path) if p]
    for path in outputs:  # as with Popen, the files exist once this returns
      os.close(open_output(path, append))
    request = dict(kind=main[0], main=main[1], argv=main[2:], env=dict(env), command=command,
                   cwd=cwd or os.getcwd(), stdout=outputs[0],
                   stderr=outputs[1] if stderr_path else None,
                   fork_server=bool(with_fork_server))
    with self._lock:
      if self._server is not None and self._server.poll() is not None:
        # It holds no state: a server that ended (killed, out of memory) is replaced.
        logging.warning('The fork server ended (exit status %s; see %s): starting another.',
                        self._server.poll(), self._log_path)
        self.close()
      server = self._server or self._start_server()
      try:
        server.stdin.write((json.dumps(request) + '\n').encode())
        server.stdin.flush()
      except (BrokenPipeError, ValueError) as e:
        raise ForkServerError(f'the fork server ended (exit status {server.poll()}); '
                              f'see {self._log_path}') from e
      answer = self._read_answer(server, timeout_s)
    if 'pid' not in answer:
      raise ForkServerError(f'the fork server could not start {" ".join(args[:2])}: '
                            f'{answer.get("error")}')
    return ForkedProcess(answer['pid'], command)

  @staticmethod
  def _without_parent(env: Mapping[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k != child_process.PARENT_PID_ENV}

  def _read_answer(self, server: subprocess.Popen, timeout_s: float) -> dict:
    ready, _, _ = select.select([server.stdout], [], [], timeout_s)
    if not ready:
      self.close()
      raise ForkServerError(f'the fork server did not answer within {timeout_s:.0f} s; '
                            f'see {self._log_path}')
    line = server.stdout.readline()
    if not line:
      raise ForkServerError(f'the fork server ended (exit status {server.wait(5)}); see '
                            f'{self._log_path}')
    return json.loads(line)

  def close(self) -> None:
    """Ends the server (the programs it started go on)."""
    if self._server is not None:
      if self._server.poll() is None:
        self._server.stdin.close()
        try:
          self._server.wait(timeout=10)
        except subprocess.TimeoutExpired:
          self._server.kill()
          self._server.wait()
      self._server = None
    if self._log is not None:
      self._log.close()
      self._log = None


def run_to_end(starter: Any, args: Sequence[str], env: Mapping[str, str], timeout: float,
               cwd: Optional[str] = None, log_path: Optional[str] = None,
               stderr_to_stdout: bool = False, **start_options) -> subprocess.CompletedProcess:
  """Runs `python <args>` to its end through `starter` (a `ForkServer`, or anything
  with its `start`), as `subprocess.run(..., capture_output=True, text=True,
  timeout=timeout)` would; with `log_path`, its output (stderr too) appended there
  instead, the result's stdout and stderr then empty. `start_options` go to
  `starter.start` (with_fork_server).

  Raises:
    subprocess.TimeoutExpired: it ran past `timeout` seconds (it is killed).
    ForkServerError: the starter's server could not start it.
  """
  with tempfile.TemporaryDirectory(prefix='tfrl-run-') as tmp:
    out = log_path or os.path.join(tmp, 'stdout')
    err = None if log_path or stderr_to_stdout else os.path.join(tmp, 'stderr')
    child = starter.start(list(args), env, out, err, cwd=cwd, append=bool(log_path),
                          **start_options)
    try:
      child.wait(timeout=timeout)
    finally:
      if child.poll() is None:
        child.kill()
        child.wait()
    if log_path:
      return subprocess.CompletedProcess([sys.executable, *args], child.returncode, '', '')
    with open(out, errors='replace') as f:
      stdout = f.read()
    stderr = ''
    if err:
      with open(err, errors='replace') as f:
        stderr = f.read()
    return subprocess.CompletedProcess([sys.executable, *args], child.returncode, stdout,
                                       stderr)


class ProgramStarter:
  """Starts programs of this host that die with this process (`child_process`), each
  in its own session with its output appended to a log: through a `ForkServer` where
  `enabled()`, else (or once the server fails, with a warning) exec'd.

  Args:
    python: the interpreter.
    server_log_path: the fork server's own log.
  """

  def __init__(self, python: str = sys.executable, server_log_path: str = os.devnull):
    self._python, self._server_log_path = python, server_log_path
    self._forks: Optional[ForkServer] = None
    self._use_forks = enabled()

  def start(self, command: Sequence[str], log_path: str, env: Mapping[str, str]):
    """Starts `command` (`python [-u] -m module ...`) logging to `log_path`; one of
    `PROGRAM_STARTERS` gets a fork server of its own.

    Returns:
      The program: a `ForkedProcess` or a `subprocess.Popen`.
    """
    if self._use_forks:
      # The first program's environment is the server's: what libraries read at import
      # (TF_CPP_MIN_LOG_LEVEL) is then as the programs would have it.
      self._forks = (self._forks or ForkServer.inherited(self._server_log_path) or
                     ForkServer(self._python, self._server_log_path, env))
      try:
        return self._forks.start(command[1:], child_process.child_env(env), log_path)
      except ForkServerError as e:
        logging.warning('Starting programs without the fork server: %s', e)
        self.close()
    env = child_process.child_env(env)
    with open(log_path, 'a') as log:  # the program writes its own copy of the fd
      return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)

  def close(self) -> None:
    """Ends the fork server (programs started go on); later starts exec."""
    self._use_forks = False
    if self._forks is not None:
      self._forks.close()
      self._forks = None

"""Starting programs as forks of one process that has already imported their libraries.

A tfrl program spends 4-7 CPU-seconds importing TensorFlow, TF-Agents, Reverb, gin and
tfrl before it does anything, and a launched job starts four to six programs. The
launcher (and the test suite's program runner) instead start one fork server: a plain
`python -m learners.processes.fork_server` that imports what the programs import, once, then
forks a copy of itself for each program, which runs `python -m learners.<program>`
exactly as an exec'd interpreter would (same `sys.argv`, environment, working
directory, standard streams, and `__main__`).

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
import ast
import atexit
import ctypes
import importlib
import importlib.util
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from typing import Any, Dict, List, Mapping, Optional, Sequence

from absl import logging

from learners.processes import child_process

ENABLE_ENV = 'TFRL_FORK_SERVER'
# The programs whose imports the server loads before it forks: each program's entry
# module, and the body module it imports once its flags are parsed (TensorFlow's side).
PRELOADED_PROGRAMS = ('learners.reverb_server', 'learners.job.server_program',
                      'learners.train', 'learners.job.trainer',
                      'learners.collect', 'learners.job.collector',
                      'learners.eval', 'learners.job.evaluator',
                      'learners.train_eval', 'learners.launch', 'learners.job.launched_job',
                      'learners.pbt_member')
# The programs that start programs themselves: each gets a fork server of its own (see
# `_fork_inherited_server`).
PROGRAM_STARTERS = ('learners.launch',)
# Where a program finds the fork server forked for it: "<pid>:<answers fd>:<requests fd>".
INHERITED_SERVER_ENV = 'TFRL_FORK_SERVER_INHERITED'
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
# The server's last argument: room for each program's command line (blank in `ps`).
ROOM_ARG = ' ' * 4096
# The first answer waits for the server's imports (minutes on a loaded machine).
ANSWER_TIMEOUT_S = 300.0
# A forked program waits this long for its middle parent to exit and the re-parenting.
_ADOPTION_TIMEOUT_S = 30.0


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
        [self._python, '-u', '-m', 'learners.processes.fork_server', ROOM_ARG],
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
      os.close(_open(path, append))
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


# The server process.


# Imports inside functions (a program's body, imported once its flags are parsed so that
# --help needs no TensorFlow) are preloaded too, but only tfrl's own and TensorFlow:
# optional packages imported where they are needed (Ray, MuJoCo, EnvPool) stay unloaded.
_PRELOADED_LAZY_IMPORTS = ('learners', 'tfrl', 'tensorflow', 'tf_agents', 'reverb')


def _imports_of(module: str) -> List[str]:
  """The modules `module` imports (from its source, not running it): all those at its top
  level, and those of `_PRELOADED_LAZY_IMPORTS` anywhere in it."""
  with open(importlib.util.find_spec(module).origin) as f:
    tree = ast.parse(f.read())
  top_level = set(map(id, tree.body))
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      found = [f'{node.module}.{alias.name}' for alias in node.names] + [node.module]
    else:
      continue
    if id(node) not in top_level:
      found = [n for n in found if n.split('.')[0] in _PRELOADED_LAZY_IMPORTS]
    names += found
  return names


def preload(programs: Sequence[str] = PRELOADED_PROGRAMS) -> None:
  """Imports every module the programs import (not the programs: they define flags)."""
  for program in programs:
    for name in _imports_of(program):
      if name in programs:
        continue
      try:
        importlib.import_module(name)
      except ImportError:  # `from package import function`: the package is imported too
        pass


def _exit_status(exit_code) -> int:
  """The process status of `SystemExit(exit_code)`, printing a message as Python does."""
  if exit_code is None:
    return 0
  if isinstance(exit_code, int):
    return exit_code & 0xFF
  print(exit_code, file=sys.stderr)
  return 1


def _open(path: str, append: bool) -> int:
  return os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC),
                 0o644)


def _set_path(request: Dict) -> None:
  """`sys.path` as the interpreter would start the request with: the working directory
  (`-m`), '' (`-c`) or the script's directory first, then PYTHONPATH's entries, then the
  interpreter's own. (Modules the server preloaded stay as they were loaded.)"""
  def entries(value):
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p]
  first = {'-m': request['cwd'], '-c': '',
           'script': os.path.dirname(os.path.abspath(request['main']))}[request['kind']]
  server_entries = set(entries(os.environ.get('PYTHONPATH', '')))
  rest = [p for p in sys.path[1:] if os.path.abspath(p) not in server_entries]
  sys.path[:] = [first] + entries(request['env'].get('PYTHONPATH', '')) + rest


def _set_command_line(args: Sequence[str]) -> None:
  """Makes `ps`, `pgrep -f` and /proc/<pid>/cmdline show `args` instead of the
  server's command: writes them over this process's argument area (whose bounds
  /proc/self/stat gives, Linux 3.5+), which the server's command line reserves room
  for (`ROOM_ARG`). Longer commands are cut; without the bounds nothing changes."""
  try:
    with open('/proc/self/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # fields 48 and 49 of proc(5)
  except (OSError, ValueError, IndexError):
    return
  text = '\0'.join(args).encode()[:end - start - 1]
  ctypes.memmove(start, text.ljust(end - start, b'\0'), end - start)


def _run_main(request: Dict) -> None:
  """Runs the request's module, code or script as `__main__`, as the interpreter would."""
  if request['kind'] == '-m':
    sys.argv = [request['main'], *request['argv']]  # runpy sets [0] to the module's file
    runpy.run_module(request['main'], run_name='__main__', alter_sys=True)
  elif request['kind'] == 'script':
    sys.argv = [request['main'], *request['argv']]
    runpy.run_path(request['main'], run_name='__main__')
  else:
    sys.argv = ['-c', *request['argv']]
    main = sys.modules['__main__'] = types.ModuleType('__main__')
    exec(compile(request['main'], '<string>', 'exec'), main.__dict__)  # pylint: disable=exec-used


def _run_program(request: Dict, middle_pid: int) -> None:
  """In the forked program: becomes `python -u -m <module> <argv>`; never returns."""
  status = 1
  try:
    # Before anything changes: the server is this process as the fork server left it.
    inherited = _fork_inherited_server() if request.get('fork_server') else None
    _detach_from_server()
    _set_command_line(request['command'])  # tests and people look processes up
    os.setsid()
    os.chdir(request['cwd'])
    _set_path(request)
    os.environ.clear()
    os.environ.update(request['env'])
    os.environ.pop(INHERITED_SERVER_ENV, None)  # the requester's own, if it had one
    if inherited:
      os.environ[INHERITED_SERVER_ENV] = inherited
    tempfile.tempdir = None  # read TMPDIR again, from this environment
    sys.orig_argv = list(request['command'])  # what a program re-executing itself runs
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    out = _open(request['stdout'], append=True)  # the requester created or truncated it
    err = _open(request['stderr'], append=True) if request['stderr'] else out
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.stdout.reconfigure(line_buffering=True, write_through=True)
    sys.stderr.reconfigure(line_buffering=True, write_through=True)
    # Only once adopted by the requester can it ask to die with it (earlier, the
    # re-parenting itself would fire the request).
    deadline = time.monotonic() + _ADOPTION_TIMEOUT_S
    while os.getppid() == middle_pid and time.monotonic() < deadline:
      time.sleep(0.001)
    if os.getppid() == middle_pid:
      print(f'fork server: not re-parented within {_ADOPTION_TIMEOUT_S:.0f} s (the '
            f'middle process {middle_pid} is still alive); starting anyway',
            file=sys.stderr)
    child_process.die_with_parent_if_asked()
    if 'numpy' in sys.modules:  # an exec'd program draws its own global seed
      sys.modules['numpy'].random.seed()
    try:
      _run_main(request)
      status = 0
    except SystemExit as e:
      status = _exit_status(e.code)
    except KeyboardInterrupt:
      traceback.print_exc()
      status = 128 + signal.SIGINT
    except BaseException:  # pylint: disable=broad-except
      traceback.print_exc()
      status = 1
    atexit._run_exitfuncs()  # pylint: disable=protected-access
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
  finally:
    try:
      sys.stdout.flush()
      sys.stderr.flush()
    finally:
      os._exit(status)  # pylint: disable=protected-access


def _fork_inherited_server() -> str:
  """Forks a fork server for the program about to run (its child, so the programs it
  asks for are re-parented to it); returns where the program finds it
  (`INHERITED_SERVER_ENV`). The server dies with the program."""
  requests_read, requests_write = os.pipe()
  answers_read, answers_write = os.pipe()
  program_pid = os.getpid()
  pid = os.fork()
  if pid == 0:
    try:
      os.close(requests_write)
      os.close(answers_read)
      _detach_from_server()
      os.environ[child_process.PARENT_PID_ENV] = str(program_pid)
      child_process.die_with_parent_if_asked()
      _serve(os.fdopen(requests_read, 'rb'), answers_write)
    finally:
      os._exit(0)  # pylint: disable=protected-access
  os.close(requests_read)
  os.close(answers_write)
  return f'{pid}:{answers_read}:{requests_write}'


def _fork_program(request: Dict) -> Dict:
  """Forks the program through a middle process; returns the answer for the requester.

  The answer is sent once the middle process has been reaped: by then the program has
  been re-parented, so the requester can wait for it as for its own child.
  """
  read_end, write_end = os.pipe()
  middle = os.fork()
  if middle == 0:
    answer = {}
    try:
      os.close(read_end)
      # Taken here: the program's own getppid() may already be its adopter's, if this
      # process exits before the program asks.
      middle_pid = os.getpid()
      pid = os.fork()
      if pid == 0:
        os.close(write_end)
        _run_program(request, middle_pid)
      answer = {'pid': pid}
    except BaseException as e:  # pylint: disable=broad-except
      answer = {'error': f'{type(e).__name__}: {e}'}
    finally:
      os.write(write_end, json.dumps(answer).encode())
      os._exit(0)  # pylint: disable=protected-access
  os.close(write_end)
  with os.fdopen(read_end) as f:
    answer = f.read()
  os.waitpid(middle, 0)
  return json.loads(answer) if answer else {'error': 'the middle process died'}


# The serving process's ends of its pipes: a program forked from it must not hold them
# (its requester would not see the server end while the program lives).
_SERVER_FDS: List[int] = []


def _detach_from_server() -> None:
  """Points the server's pipe fds at /dev/null in this fork (the fd numbers stay valid
  for the file objects that still name them)."""
  null = os.open(os.devnull, os.O_RDWR)
  for fd in _SERVER_FDS:
    os.dup2(null, fd)
  os.close(null)
  _SERVER_FDS.clear()


def _serve(requests, answers: int) -> None:
  """Answers each JSON request line of `requests` with a line on fd `answers`, until the
  requester closes its end."""
  _SERVER_FDS[:] = [requests.fileno(), answers]
  for line in requests:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(answers, (json.dumps(_fork_program(request)) + '\n').encode())


def serve() -> None:
  """The server's loop: one JSON request per line on stdin, one answer per line."""
  # Answers go to the real stdout; anything a library prints goes to stderr (the log).
  answers = os.dup(1)
  os.dup2(2, 1)
  preload()
  _serve(sys.stdin.buffer, answers)


if __name__ == '__main__':
  serve()

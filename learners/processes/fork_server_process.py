"""The fork server's own process: imports what tfrl's programs import, then forks each
program asked for (`learners.processes.fork_server` starts it and asks).

It reads one JSON request per line on stdin and answers each with a line on its stdout:
the forked program's pid, or the error that kept it from starting. A program is forked
twice (the middle process exits at once, so the program is re-parented to the
requester, a child subreaper) and then becomes `python -u -m <module>`, `-c <code>` or
`<script>` with the request's arguments, environment, working directory and streams.
Nothing here runs in the requester's process.
"""
import ast
import atexit
import ctypes
import importlib
import importlib.util
import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback
import types
from typing import Dict, List, Sequence

from learners.processes import child_process

# The programs whose imports the server loads before it forks: each program's entry
# module, and the body module it imports once its flags are parsed (TensorFlow's side).
PRELOADED_PROGRAMS = ('learners.reverb_server', 'learners.job.server_program',
                      'learners.train', 'learners.job.trainer',
                      'learners.collect', 'learners.job.collector',
                      'learners.eval', 'learners.job.evaluator',
                      'learners.train_eval', 'learners.launch', 'learners.job.launched_job',
                      'learners.pbt_member')
# Where a program finds the fork server forked for it: "<pid>:<answers fd>:<requests fd>".
INHERITED_SERVER_ENV = 'TFRL_FORK_SERVER_INHERITED'
# A forked program waits this long for its middle parent to exit and the re-parenting.
_ADOPTION_TIMEOUT_S = 30.0


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


def open_output(path: str, append: bool) -> int:
  """An fd writing to `path` (created 0o644; truncated unless `append`)."""
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
  for (`fork_server.ROOM_ARG`). Longer commands are cut; without the bounds nothing
  changes."""
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
    out = open_output(request['stdout'], append=True)  # the requester created or truncated it
    err = open_output(request['stderr'], append=True) if request['stderr'] else out
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

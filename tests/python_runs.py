"""Python subprocesses for tests, started as forks of one preloaded process.

A test that runs `python -m learners.<program>` or `python -c <script>` pays 4-7
CPU-seconds for the child's imports (TensorFlow, TF-Agents, Reverb, tfrl) before the
child does anything; the suite starts hundreds. `start` and `run` start them through one
`learners.processes.fork_server.ForkServer` per test process instead, as the launcher
starts its programs: each child is still a real process (its own pid, session, signals,
exit status, files), the test process's child, running exactly what the command line
says.
With TFRL_FORK_SERVER=0 every child is exec'd instead.
"""
import atexit
import os
import subprocess
import sys
import tempfile
import threading
from typing import Mapping, Optional, Sequence

from learners.processes import fork_server

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)


def base_env(**extra: str) -> dict:
  """The environment the children get by default: this one, with tfrl on the path."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  env.update(extra)
  return env


class _Exec:
  """Starts children as `ForkServer` does, exec'ing each."""

  @staticmethod
  def start(args, env, stdout_path, stderr_path=None, cwd=None, append=False,
            with_fork_server=False):
    del with_fork_server  # an exec'd child starts its own children exec'd too
    mode = 'a' if append else 'w'
    with open(stdout_path, mode) as out:
      err = open(stderr_path, mode) if stderr_path else None
      try:
        return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=out,
                                stderr=err or subprocess.STDOUT)
      finally:
        if err:
          err.close()


_STARTER = []
_STARTER_LOCK = threading.Lock()


def _starter():
  with _STARTER_LOCK:  # test threads may start children at once
    if not _STARTER:
      if fork_server.enabled():
        log = os.path.join(tempfile.gettempdir(),
                           f'tfrl-test-fork-server-{os.getpid()}.log')
        _STARTER.append(fork_server.ForkServer(env=base_env(), log_path=log))
        atexit.register(_STARTER[0].close)
      else:
        _STARTER.append(_Exec())
    return _STARTER[0]


def start(args: Sequence[str], stdout_path: str, stderr_path: Optional[str] = None,
          env: Optional[Mapping[str, str]] = None, cwd: str = REPO):
  """Starts `python <args>` (`-m module ...`, `-c code ...` or `script.py ...`) with its
  output in files (stderr with stdout if `stderr_path` is None).

  Returns:
    The child, with `subprocess.Popen`'s poll/wait/send_signal/kill/pid/returncode.
  """
  return _starter().start(list(args), _child_env(env), stdout_path, stderr_path, cwd=cwd,
                          append=False)


def _child_env(env: Optional[Mapping[str, str]]) -> dict:
  env = dict(base_env() if env is None else env)
  # A child script that imports a test module (for its helpers) imports this one too.
  env['PYTHONPATH'] = os.pathsep.join(p for p in (env.get('PYTHONPATH'), TESTS) if p)
  return env


def run(args: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None,
        cwd: str = REPO, stderr_to_stdout: bool = False,
        with_fork_server: Optional[bool] = None) -> subprocess.CompletedProcess:
  """Runs `python <args>` to its end, as `subprocess.run(..., capture_output=True,
  text=True, timeout=timeout)` would (with `stderr_to_stdout`, as
  `stdout=PIPE, stderr=STDOUT`). `with_fork_server` gives the child a fork server of
  its own for the Python programs it starts
  (`learners.processes.fork_server.ForkServer.inherited`); None: as `start` does, to
  `python -m learners.launch` or `learners.pbt` (`fork_server.PROGRAM_STARTERS`), whose
  programs are then forks too, not children of a fresh server that imports everything
  again.

  Raises:
    subprocess.TimeoutExpired: it ran past `timeout` seconds (it is killed).
  """
  return fork_server.run_to_end(_starter(), args, _child_env(env), timeout, cwd=cwd,
                                stderr_to_stdout=stderr_to_stdout,
                                with_fork_server=with_fork_server)

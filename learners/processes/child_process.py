"""Children that end with their parent: what the launcher and the Ray backend's actors
start programs with. No TensorFlow here: a Ray actor that only starts a program imports
this module and nothing heavy.

The parent starts each child with `start_new_session=True` (a terminal's Ctrl-C then
reaches only the parent, which stops its children in order) and with `child_env`; the
child calls `die_with_parent_if_asked` first thing (every program does, at the start
of `program.run_main`; the fork server does it for a forked one too), which asks Linux
for SIGTERM when the parent dies. This replaces `preexec_fn`, which Python
documents as unsafe in a parent that runs threads, as the launcher does."""
import ctypes
import os
import signal
from typing import Dict, Mapping

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The PID of the parent the child must die with; set by `child_env`.
PARENT_PID_ENV = 'TFRL_DIE_WITH_PARENT_PID'


def child_env(env: Mapping[str, str]) -> Dict[str, str]:
  """`env` plus the variable that makes the child die with this process.

  Args:
    env: the child's environment.

  Returns:
    A copy of `env` naming this process as the parent to die with.
  """
  return dict(env, **{PARENT_PID_ENV: str(os.getpid())})


def die_with_parent_if_asked() -> None:
  """With PARENT_PID_ENV set: SIGTERM to this process when its parent dies (Linux;
  elsewhere the parent's own cleanup still applies), with SIGTERM's default action
  restored should it have been inherited as ignored. If the parent already died before
  the request (the child was reparented), this process ends now the same way.

  The variable is removed so that this process's own children do not inherit it.
  """
  expected = os.environ.pop(PARENT_PID_ENV, None)
  if not expected:
    return
  # An ignored SIGTERM is inherited through exec (a parent run under a tool that ignores
  # it): the request below would then be silently lost. The programs install their own
  # handler once TensorFlow is loaded.
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  try:
    ctypes.CDLL('libc.so.6').prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  except (OSError, AttributeError):
    return
  # The parent may have died between fork and prctl: the request then never fires.
  if str(os.getppid()) != expected:
    os.kill(os.getpid(), signal.SIGTERM)

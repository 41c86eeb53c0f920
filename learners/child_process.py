"""Children that end with their parent: what the launcher and the Ray backend's actors
start programs with. No TensorFlow here: a Ray actor that only starts a program imports
this module and nothing heavy."""
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
  """For `subprocess.Popen(preexec_fn=...)`: the child gets SIGTERM when its parent dies
  (Linux; elsewhere the parent's own cleanup still applies)."""
  try:
    ctypes.CDLL('libc.so.6').prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  except OSError:
    pass


def detach_and_die_with_parent() -> None:
  """`die_with_parent`, in a session of its own: a terminal's Ctrl-C then reaches only
  the parent (a launcher, which stops its children in order)."""
  os.setsid()
  die_with_parent()

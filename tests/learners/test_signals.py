"""Signals and children: a child started as the launcher starts it ends with its parent,
also under kill -9 of the parent; process.run_until_signal stops on SIGHUP too."""
import os
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A parent that starts a child the launcher's way (without importing TensorFlow: the
# child loads learners/child_process.py alone), prints the child's PID and waits.
_LOAD = ('import importlib.util, subprocess, sys, time\n'
         "spec = importlib.util.spec_from_file_location('cp', sys.argv[1])\n"
         'cp = importlib.util.module_from_spec(spec); spec.loader.exec_module(cp)\n')
_CHILD = _LOAD + ("cp.die_with_parent_if_asked()\n"
                  "print('ready', flush=True)\n"
                  'time.sleep(300)\n')
_PARENT = _LOAD + (
    'child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]],\n'
    '    env=cp.child_env({}), start_new_session=True, stdout=subprocess.PIPE, text=True)\n'
    "assert child.stdout.readline().strip() == 'ready'\n"
    'print(child.pid, flush=True)\n'
    'time.sleep(300)\n')


def _alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().split(')')[-1].split()[0] != 'Z'
  except FileNotFoundError:
    return False


def test_kill_9_of_the_parent_ends_the_child():
  parent = subprocess.Popen(
      [sys.executable, '-c', _PARENT, os.path.join(REPO, 'learners', 'child_process.py'),
       _CHILD],
      stdout=subprocess.PIPE, text=True)
  try:
    child_pid = int(parent.stdout.readline())
    assert _alive(child_pid)
    assert os.getsid(child_pid) == child_pid  # its own session: Ctrl-C reaches the parent only
    parent.kill()
    parent.wait(timeout=60)
    deadline = time.monotonic() + 60  # generous: did not hang
    while _alive(child_pid) and time.monotonic() < deadline:
      time.sleep(0.1)
    assert not _alive(child_pid), f'child {child_pid} outlived its parent'
  finally:
    parent.kill()


def test_a_child_whose_parent_already_died_ends_itself(monkeypatch):
  # The race prctl cannot close: the recorded parent is not this process's parent.
  from learners import child_process  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv(child_process.PARENT_PID_ENV, '1' if os.getppid() != 1 else '2')
  sent = []
  monkeypatch.setattr(os, 'kill', lambda pid, sig: sent.append((pid, sig)))
  child_process.die_with_parent_if_asked()
  assert sent == [(os.getpid(), signal.SIGTERM)]
  assert child_process.PARENT_PID_ENV not in os.environ


def test_run_until_signal_stops_on_sighup():
  from learners import process  # pylint: disable=import-outside-toplevel

  def work(stop_event):
    os.kill(os.getpid(), signal.SIGHUP)
    assert stop_event.wait(60), 'SIGHUP did not set the stop event'
    return 'saved'

  sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
  saved = {sig: signal.getsignal(sig) for sig in sigs}
  try:
    assert process.run_until_signal(work, 'work', grace_s=60) == 'saved'
  finally:  # run_until_signal leaves them ignored; pytest's own must come back
    for sig, handler in saved.items():
      signal.signal(sig, handler)

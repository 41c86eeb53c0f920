"""learners/process: a program that cannot stop in time says so with its exit status."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from learners import process
from programs import REPO, program_env

BLOCKED_WORK = textwrap.dedent('''
    import threading, time
    from learners import process
    def work(stop_event):
      print('working', flush=True)
      threading.Event().wait()   # blocked where the stop signal cannot be seen
    process.run_until_signal(work, 'blocked', grace_s=1.0)
''')

CLEAN_WORK = textwrap.dedent('''
    from learners import process
    def work(stop_event):
      print('working', flush=True)
      stop_event.wait()
      print('saved', flush=True)
    process.run_until_signal(work, 'clean', grace_s=5.0)
''')


@pytest.mark.parametrize('script,status', [(BLOCKED_WORK, process.EXIT_STOP_TIMEOUT),
                                           (CLEAN_WORK, 0)], ids=['blocked', 'clean'])
def test_sigterm_exit_status_says_whether_the_work_finished(script, status):
  child = subprocess.Popen([sys.executable, '-c', script], cwd=REPO, env=program_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert child.stdout.readline().strip() == 'working'
  child.send_signal(signal.SIGTERM)
  _, stderr = child.communicate(timeout=120)  # the hang guard; the status says the rest
  assert child.returncode == status, stderr
  if status:
    assert 'WITHOUT its final save' in stderr
    # Then where it was blocked: the work thread's stack, down to the wait.
    stacks = stderr.split('Where its threads were:', 1)[1]
    assert 'in work' in stacks and 'in wait' in stacks


def test_sigusr1_writes_the_stacks_and_the_program_goes_on():
  child = subprocess.Popen([sys.executable, '-c', CLEAN_WORK], cwd=REPO, env=program_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert child.stdout.readline().strip() == 'working'
  child.send_signal(signal.SIGUSR1)
  time.sleep(1.0)
  assert child.poll() is None  # still working
  child.send_signal(signal.SIGTERM)
  stdout, stderr = child.communicate(timeout=60)
  assert child.returncode == 0 and 'saved' in stdout, stderr
  assert 'in work' in stderr and 'most recent call first' in stderr

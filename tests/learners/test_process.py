"""learners/processes/process.py: a program that cannot stop in time says so with its
exit status."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import ports  # tests/ports.py
from learners.processes import process
from programs import REPO, program_env
from tfrl import replay

BLOCKED_WORK = textwrap.dedent('''
    import threading, time
    from learners.processes import process
    def work(stop_event):
      print('working', flush=True)
      threading.Event().wait()   # blocked where the stop signal cannot be seen
    process.run_until_signal(work, 'blocked', grace_s=1.0)
''')

CLEAN_WORK = textwrap.dedent('''
    from learners.processes import process
    def work(stop_event):
      print('working', flush=True)
      stop_event.wait()
      print('saved', flush=True)
    process.run_until_signal(work, 'clean', grace_s=5.0)
''')


@pytest.mark.integration
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


# Blocked for good, with a grace far longer than the test waits: only the probes of its
# server can end it early.
BLOCKED_ON_A_SERVER = textwrap.dedent('''
    import sys, threading
    from learners.processes import process
    def work(stop_event):
      print('working', flush=True)
      threading.Event().wait()   # as a sample from a server that went away
    process.run_until_signal(work, 'trainer', grace_s=float(sys.argv[2]),
                             server_address=sys.argv[1])
''')


def _stopped_while_blocked(address: str, grace_s: float) -> subprocess.CompletedProcess:
  child = subprocess.Popen([sys.executable, '-c', BLOCKED_ON_A_SERVER, address, str(grace_s)],
                           cwd=REPO, env=program_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
  assert child.stdout.readline().strip() == 'working'
  child.send_signal(signal.SIGTERM)
  _, stderr = child.communicate(timeout=120)
  return subprocess.CompletedProcess(child.args, child.returncode, '', stderr)


@pytest.mark.integration  # waits out the probes: about 10 s
def test_a_stopped_program_whose_server_is_gone_exits_without_its_whole_grace():
  """A launcher killed with SIGKILL stops its children at once: the server may be gone
  before the trainer's train call had its data. The trainer ends once the server has
  not answered for a few seconds, not after its grace (600 s here, the wait 120)."""
  address = f'127.0.0.1:{ports.free_port()}'  # nothing listens there
  result = _stopped_while_blocked(address, grace_s=600)
  assert result.returncode == process.EXIT_STOP_TIMEOUT, result.stderr
  assert f'The Reverb server at {address} is gone' in result.stderr
  assert 'WITHOUT its final save' in result.stderr


@pytest.mark.integration  # waits out the grace: about 10 s
def test_a_stopped_program_whose_server_answers_gets_its_whole_grace(reverb_server_factory):
  server = reverb_server_factory([replay.queue_table('queue', 10, None)])
  start = time.monotonic()
  result = _stopped_while_blocked(server.address, grace_s=8)
  assert result.returncode == process.EXIT_STOP_TIMEOUT, result.stderr
  assert 'is gone' not in result.stderr
  assert time.monotonic() - start >= 8  # the grace, waited out (a lower bound only)


@pytest.mark.integration
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

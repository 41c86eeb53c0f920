"""Signals and children: a child started as the launcher starts it ends with its parent,
also under kill -9 of the parent, and every program asks for that before it parses its
flags; process.run_until_signal stops on SIGHUP too; an ignored SIGINT or SIGHUP
inherited (nohup, background jobs) stays ignored."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A parent that starts a child the launcher's way (without importing TensorFlow: the
# child loads learners/processes/child_process.py alone), prints the child's PID and
# waits.
_LOAD = ('import importlib.util, subprocess, sys, time\n'
         "spec = importlib.util.spec_from_file_location('cp', sys.argv[1])\n"
         'cp = importlib.util.module_from_spec(spec); spec.loader.exec_module(cp)\n')
_CHILD = _LOAD + ("cp.die_with_parent_if_asked()\n"
                  "print('ready', flush=True)\n"
                  'time.sleep(300)\n')
_PARENT = _LOAD + (
    'import signal\n'
    'if sys.argv[3] == "ignore": signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
    'child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]],\n'
    '    env=cp.child_env({}), start_new_session=True, stdout=subprocess.PIPE, text=True)\n'
    "assert child.stdout.readline().strip() == 'ready'\n"
    'print(child.pid, flush=True)\n'
    'time.sleep(300)\n')


_CHILD_PROCESS_PY = os.path.join(REPO, 'learners', 'processes', 'child_process.py')


def _alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().split(')')[-1].split()[0] != 'Z'
  except FileNotFoundError:
    return False


def _kill_parent_and_expect_the_end_of(parent: subprocess.Popen, child_pid: int,
                                       timeout_s: float) -> None:
  """kill -9 of `parent`; `child_pid` must then end within `timeout_s` (generous: what
  is checked is that it did not go on)."""
  parent.kill()
  parent.wait(timeout=60)
  deadline = time.monotonic() + timeout_s
  while _alive(child_pid) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not _alive(child_pid), f'{child_pid} outlived its parent'


# 'ignore': the parent ignores SIGTERM, and its child inherits that through exec (a job
# run under a tool that ignores it); the child must still end with the parent.
@pytest.mark.parametrize('parent_sigterm', ['default', 'ignore'])
def test_kill_9_of_the_parent_ends_the_child(parent_sigterm):
  parent = subprocess.Popen(
      [sys.executable, '-c', _PARENT, _CHILD_PROCESS_PY, _CHILD, parent_sigterm],
      stdout=subprocess.PIPE, text=True)
  try:
    child_pid = int(parent.stdout.readline())
    assert _alive(child_pid)
    assert os.getsid(child_pid) == child_pid  # its own session: Ctrl-C reaches the parent only
    _kill_parent_and_expect_the_end_of(parent, child_pid, 60)
  finally:
    parent.kill()


def test_a_child_whose_parent_already_died_ends_itself(monkeypatch):
  # The race prctl cannot close: the recorded parent is not this process's parent.
  from learners.processes import child_process  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv(child_process.PARENT_PID_ENV, '1' if os.getppid() != 1 else '2')
  sent = []
  monkeypatch.setattr(os, 'kill', lambda pid, sig: sent.append((pid, sig)))
  child_process.die_with_parent_if_asked()
  assert sent == [(os.getpid(), signal.SIGTERM)]
  assert child_process.PARENT_PID_ENV not in os.environ


def _console_script_programs():
  """The programs behind setup.py's console scripts (their --help loads no TensorFlow:
  test_help.py)."""
  with open(os.path.join(REPO, 'setup.py')) as f:
    return re.findall(r"'tfrl-[\w-]+=learners\.(\w+):run_main'", f.read())


def _not_its_parent() -> str:
  """A PID that is not the parent of a child this process starts."""
  return '1' if os.getpid() != 1 else '2'


@pytest.mark.parametrize('program', _console_script_programs() + ['pbt_member'])
def test_a_program_asks_to_die_with_its_parent_before_it_parses_its_flags(program):
  # The parent it was told to die with is not its parent (that one died before the
  # program asked): it ends itself by SIGTERM before it answers --help, so before the
  # flags are parsed and, but for pbt_member (whose callback, imported by tests and
  # notebooks, imports TensorFlow at its top), before any TensorFlow is imported.
  from learners.processes import child_process  # pylint: disable=import-outside-toplevel
  run = subprocess.run(
      [sys.executable, '-X', 'importtime', '-m', f'learners.{program}', '--help'],
      cwd=REPO, capture_output=True, text=True, timeout=120,
      env=dict(os.environ, PYTHONPATH=REPO,
               **{child_process.PARENT_PID_ENV: _not_its_parent()}))
  assert run.returncode == -signal.SIGTERM, (run.returncode, run.stderr[-2000:])
  assert run.stdout == ''  # no usage: the flags were not parsed
  imported = set(re.findall(r'^import time:.*\|\s*(\S+)\s*$', run.stderr, re.MULTILINE))
  assert 'learners.processes.child_process' in imported  # the report was read
  if program != 'pbt_member':
    assert not imported & {'tensorflow', 'tf_agents', 'reverb'}


# A launcher: starts a real program the launcher's way, prints its PID at once, waits.
# The program would train for hours (no target, a huge budget) if nothing stopped it.
_PROGRAM_PARENT = _LOAD + (
    'import os\n'
    'child = subprocess.Popen(\n'
    '    [sys.executable, "-m", "learners.train_eval", "--root_dir=" + sys.argv[2],\n'
    '     "--gin_file=dqn_cartpole.gin", "--gin_bindings=Experiment.target_return=None",\n'
    '     "--gin_bindings=Experiment.num_train_steps=100000000"],\n'
    '    env=cp.child_env(os.environ), start_new_session=True,\n'
    '    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n'
    'print(child.pid, flush=True)\n'
    'time.sleep(300)\n')


def test_kill_9_of_the_parent_ends_a_program_that_is_still_starting(tmp_path):
  # Killed while its program still loads its libraries (TensorFlow takes seconds): the
  # program ends too, within seconds, rather than train on as an orphan.
  parent = subprocess.Popen(
      [sys.executable, '-c', _PROGRAM_PARENT, _CHILD_PROCESS_PY, str(tmp_path / 'run')],
      cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='2'),
      stdout=subprocess.PIPE, text=True)
  child_pid = None
  try:
    child_pid = int(parent.stdout.readline())
    _kill_parent_and_expect_the_end_of(parent, child_pid, 90)
  finally:
    parent.kill()
    if child_pid and _alive(child_pid):
      os.kill(child_pid, signal.SIGKILL)


def test_run_until_signal_stops_on_sighup():
  from learners.processes import process  # pylint: disable=import-outside-toplevel

  # Under `nohup` the suite inherits SIGHUP ignored, which on_stop_signals rightly keeps
  # ignored: this test is of the handler, so it starts from the default disposition
  # (conftest puts pytest's handlers back).
  signal.signal(signal.SIGHUP, signal.SIG_DFL)

  def work(stop_event):
    os.kill(os.getpid(), signal.SIGHUP)
    assert stop_event.wait(60), 'SIGHUP did not set the stop event'
    return 'saved'

  # run_until_signal leaves the signals ignored; conftest puts pytest's handlers back.
  assert process.run_until_signal(work, 'work', grace_s=60) == 'saved'


@pytest.mark.timeout(60)
def test_a_stop_signal_sets_the_event_even_while_the_main_thread_holds_its_lock():
  # What deadlocked a launched server and trainer after kill -9 of the launcher: the
  # kernel sent one SIGTERM per launcher thread, and a handler calling Event.set() ran
  # inside another Event.set() (the same holds inside Event.wait after its timeout).
  from learners.processes import process  # pylint: disable=import-outside-toplevel
  stop_event = threading.Event()
  process.set_on_stop_signals(stop_event)
  with stop_event._cond:  # pylint: disable=protected-access  # as Event.set/wait hold it
    for _ in range(5):
      os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, on this thread
      time.sleep(0.05)
    assert not stop_event.is_set()  # the lock is still held: nothing could set it yet
  assert stop_event.wait(30), 'SIGTERM did not set the stop event'
  # (conftest puts pytest's own handlers back.)


def test_stop_signals_are_handled_but_an_inherited_ignore_of_sigint_or_sighup_stays():
  from learners.processes import process  # pylint: disable=import-outside-toplevel

  def handler(unused_signum, unused_frame):
    pass

  # As under `nohup` in a shell's background job: SIGHUP and SIGINT ignored on entry.
  for sig in process.STOP_SIGNALS:
    signal.signal(sig, signal.SIG_IGN)
  process.on_stop_signals(handler)
  assert signal.getsignal(signal.SIGTERM) is handler  # what schedulers send: always
  assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
  assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
  for sig in process.STOP_SIGNALS:
    signal.signal(sig, signal.SIG_DFL)
  process.on_stop_signals(handler)
  assert all(signal.getsignal(sig) is handler for sig in process.STOP_SIGNALS)
  process.ignore_stop_signals()
  assert all(signal.getsignal(sig) is signal.SIG_IGN for sig in process.STOP_SIGNALS)
  # (conftest puts pytest's own handlers back.)


# -- Launched jobs ----------------------------------------------------------------------

from test_faults import EXPORTS, _finish, _job_processes, _launch  # pylint: disable=g-import-not-at-top,wrong-import-position
from programs import GIN, SMALL, checkpoint_step, evaluate_export, final_state  # pylint: disable=g-import-not-at-top,wrong-import-position

_BINDINGS = [f'--gin_bindings={b}' for b in SMALL + ['Experiment.num_train_steps=1000000']]
# The stop's grace, generous: what is checked is the order of the stop and its final
# saves, not their speed. On a loaded 2-core machine the trainer's final save (its
# checkpoint and three SavedModels) outlasted its share of the default 30 s grace.
# (Start-up, stop and the waits in between fit in the tests' 900 s.)
_STOP_GRACE_S = 150


def _launch_until_training(root: str, min_step: int, *bindings: str) -> subprocess.Popen:
  """A small launched job (with `bindings` too), returned once its trainer checkpointed
  at `min_step` or later."""
  launcher = _launch(root, GIN, *_BINDINGS, *[f'--gin_bindings={b}' for b in bindings],
                     '--num_collectors=1', '--status_interval_s=2',
                     f'--stop_grace_s={_STOP_GRACE_S}')
  checkpoint_dir = os.path.join(root, 'train', 'checkpoints')
  deadline = time.monotonic() + 300  # generous: did not hang on a loaded machine
  while checkpoint_step(checkpoint_dir) < min_step:
    assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()
    time.sleep(0.5)
  return launcher


@pytest.mark.timeout(900)
def test_sigterm_to_the_launcher_stops_in_order_with_final_saves(tmp_path):
  # SIGHUP takes the same handler (process.on_stop_signals, tested above).
  sig = signal.SIGTERM
  import random  # pylint: disable=import-outside-toplevel
  root = str(tmp_path / 'job')
  launcher = _launch_until_training(root, random.choice([64, 96, 128]))
  results = os.path.join(root, 'eval', 'results.json')
  deadline = time.monotonic() + 300  # the summary must read an evaluation: wait for one
  while not os.path.exists(results):
    assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()
    time.sleep(0.5)
  launcher.send_signal(sig)  # to the launcher alone, as timeout, Slurm or Kubernetes do
  stdout, stderr = _finish(launcher, root, 300)  # also asserts that no child is left
  assert launcher.returncode == 0, stderr[-5000:]
  assert 'Interrupted: stopping the job in order' in stdout
  final = int(re.findall(r'Trainer stopped at train step (\d+)',
                         open(os.path.join(root, 'logs', 'train.log')).read())[-1])
  assert final_state(root) == {'checkpoint': final, **{name: final for name in EXPORTS}}
  with open(results) as f:  # the summary after a stop reads the evaluator's file
    last = json.load(f)[-1]
  assert f'at train step {last["train_step"]};' in stdout
  # The final export loads and plays a short rollout.
  assert np.isfinite(evaluate_export(os.path.join(root, 'policies', 'greedy_policy'), 0))


@pytest.mark.timeout(900)
def test_sigterm_during_an_evaluation_ends_it_and_the_job_stops_cleanly(tmp_path):
  """An evaluation that would outlast the stop's grace (a hundred thousand episodes
  here; several tasks of long episodes on a loaded machine in practice) ends when its
  program is told to stop: every program stops in time, with the final saves."""
  root = str(tmp_path / 'job')
  # The evaluator starts its first evaluation once it is in its loop (its heartbeat file
  # is written just before) and the trainer has pushed its variables (it has, once it
  # checkpointed): from then on a stop finds it evaluating, or about to, which raises at
  # once. A stop before that would find no evaluation to end.
  launcher = _launch_until_training(root, 32, 'Experiment.num_eval_episodes=100000')
  eval_heartbeat = os.path.join(root, 'status', 'eval.json')
  deadline = time.monotonic() + 300  # generous: a TF program's start-up, loaded machine
  while not os.path.exists(eval_heartbeat):
    assert launcher.poll() is None and time.monotonic() < deadline, (
        f'no evaluator heartbeat {eval_heartbeat}', launcher.poll())
    time.sleep(0.5)
  launcher.send_signal(signal.SIGTERM)
  stdout, stderr = _finish(launcher, root, 300)
  assert launcher.returncode == 0, (stdout + stderr)[-5000:]
  assert 'did not stop in time' not in stdout + stderr
  with open(os.path.join(root, 'logs', 'eval.log')) as f:
    assert 'Stopped during an evaluation (not recorded).' in f.read()
  final = int(re.findall(r'Trainer stopped at train step (\d+)',
                         open(os.path.join(root, 'logs', 'train.log')).read())[-1])
  assert final_state(root) == {'checkpoint': final, **{name: final for name in EXPORTS}}


@pytest.mark.timeout(600)
def test_kill_9_of_the_launcher_leaves_no_child(tmp_path):
  root = str(tmp_path / 'job')
  launcher = _launch_until_training(root, 32)
  children = [p for p in _job_processes(root) if p.pid != launcher.pid]
  assert len(children) >= 4, [p.info['cmdline'] for p in children]
  launcher.kill()
  launcher.communicate(timeout=60)
  gone, alive = psutil.wait_procs(children, timeout=120)  # generous: did not hang
  for p in alive:
    p.kill()
  assert not alive, [p.info['cmdline'] for p in alive]
  assert len(gone) == len(children)


@pytest.mark.timeout(900)
def test_sigterm_to_train_eval_exits_0_with_final_saves(tmp_path):
  root = str(tmp_path / 'run')
  bindings = SMALL + ['Experiment.num_train_steps=1000000', 'Experiment.log_interval=32']
  job = subprocess.Popen(
      [sys.executable, '-m', 'learners.train_eval', f'--root_dir={root}', GIN,
       *[f'--gin_bindings={b}' for b in bindings]],
      # Its grace as a launched program's (stop_plan): generous, as for the jobs above.
      cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO,
                         TFRL_STOP_GRACE_S=str(_STOP_GRACE_S)),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    checkpoint_dir = os.path.join(root, 'train', 'checkpoints')
    deadline = time.monotonic() + 300  # generous: did not hang
    while checkpoint_step(checkpoint_dir) < 64:
      assert job.poll() is None and time.monotonic() < deadline, job.communicate()
      time.sleep(0.5)
    job.send_signal(signal.SIGTERM)
    output, _ = job.communicate(timeout=300)
  finally:
    job.kill()
  assert job.returncode == 0, output[-5000:]
  final = int(re.findall(r'Stopped by a signal at train step (\d+)', output)[-1])
  state = final_state(root)
  assert state['checkpoint'] == final == state['greedy_policy'], (state, final)


def test_the_stop_grace_is_split_between_stages_and_programs_fit_inside(monkeypatch):
  from learners.processes import stop_plan  # pylint: disable=import-outside-toplevel
  shares = stop_plan.shares(30)
  assert set(shares) == {'eval', 'train', 'collect', 'reverb_server'}
  assert sum(shares.values()) == pytest.approx(30)
  assert shares['train'] == max(shares.values())
  assert stop_plan.stage('collect_3') == 'collect'
  with pytest.raises(ValueError, match='stop grace must be > 0'):
    stop_plan.shares(0)
  monkeypatch.setenv(stop_plan.STOP_GRACE_ENV, '15')
  assert 0 < stop_plan.program_grace_s() < 15
  monkeypatch.setenv(stop_plan.STOP_GRACE_ENV, 'soon')
  assert stop_plan.program_grace_s(7.0) == 7.0


def test_the_summary_of_a_job_stopped_before_its_first_evaluation_says_so():
  from learners.job import launched_job  # pylint: disable=import-outside-toplevel
  assert launched_job._last_evaluation({}) == 'stopped before its first evaluation finished.'  # pylint: disable=protected-access
  row = {'return': 475.44, 'train_step': 128, 'reached_target': False}
  assert launched_job._last_evaluation(row) == (  # pylint: disable=protected-access
      'last eval return 475.4 at train step 128; reached target: False.')

"""Heartbeat files and the Monitor that reads them (learners/processes/heartbeat.py), and
the hanging test env (faulty_env.py)."""
import json
import re
import signal
import socket
import subprocess
import sys
import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import faulty_env
import python_runs  # tests/python_runs.py
from learners.processes import heartbeat
from learners.processes import process
from programs import REPO, SMALL, final_state, gin_args, program_env

HERE = os.path.dirname(os.path.abspath(__file__))


def _write_beat(root, name, t, activity, since, **counters):
  os.makedirs(heartbeat.status_dir(root), exist_ok=True)
  with open(os.path.join(heartbeat.status_dir(root), f'{name}.json'), 'w') as f:
    json.dump({'pid': 1, 'host': 'h', 'time': t, 'activity': activity, 'since': since,
               'counters': counters}, f)


def test_heartbeat_writes_activity_progress_and_restores_activity(tmp_path):
  hb = heartbeat.Heartbeat(str(tmp_path), 'collector_0', interval_s=0.1).start()
  try:
    hb.progress(env_steps=7)
    with hb.doing('env step'):
      time.sleep(0.5)
      with open(hb.path) as f:
        beat = json.load(f)
      assert beat['activity'] == 'env step'
      assert beat['counters'] == {'env_steps': 7}
      assert beat['pid'] == os.getpid()
    hb.beat()
    with open(hb.path) as f:
      assert json.load(f)['activity'] == 'start'
  finally:
    hb.stop()
  assert hb.path == os.path.join(str(tmp_path), 'status', 'collector_0.json')


def test_monitor_tells_ok_stalled_and_not_answering(tmp_path):
  root, t0 = str(tmp_path), 1000.0
  monitor = heartbeat.Monitor(root, stall_timeout_s=8, silence_timeout_s=5)
  _write_beat(root, 'collector_0', t0, 'env step', t0, env_steps=10)
  _write_beat(root, 'trainer', t0, 'wait for data', t0, train_step=3)
  _write_beat(root, 'reverb_server', t0, 'serve', t0, items=1)
  assert monitor.check(now=t0) == {'collector_0': 'ok', 'reverb_server': 'ok',
                                   'trainer': 'ok'}
  # 9 s on: the collector's beats go on but its counter does not move during a step;
  # the trainer waits (not a stall); the server's file stopped being rewritten.
  _write_beat(root, 'collector_0', t0 + 9, 'env step', t0, env_steps=10)
  _write_beat(root, 'trainer', t0 + 9, 'wait for data', t0, train_step=3)
  states = monitor.check(now=t0 + 9)
  assert states['collector_0'] == 'stalled (env step, 9 s)'
  assert states['trainer'] == 'ok'
  assert states['reverb_server'] == 'not answering (9 s)'
  # Both are past 8 s: the frozen server is named, as the cause the collector waits on.
  assert monitor.stalled(now=t0 + 9) == 'reverb_server not answering (9 s)'
  # The server answers again: the collector's stall is what is left to name.
  _write_beat(root, 'reverb_server', t0 + 9, 'serve', t0, items=1)
  assert monitor.stalled(now=t0 + 9) == 'collector_0 stalled (env step, 9 s)'


def test_monitor_progress_resets_the_stall_clock_and_zero_disables(tmp_path):
  root, t0 = str(tmp_path), 1000.0
  monitor = heartbeat.Monitor(root, stall_timeout_s=8, silence_timeout_s=5)
  _write_beat(root, 'collector_0', t0, 'env step', t0, env_steps=10)
  monitor.check(now=t0)
  _write_beat(root, 'collector_0', t0 + 6, 'env step', t0, env_steps=11)
  assert monitor.check(now=t0 + 6) == {'collector_0': 'ok'}
  _write_beat(root, 'collector_0', t0 + 12, 'env step', t0, env_steps=11)
  assert monitor.stalled(now=t0 + 12) is None  # 6 s since the last progress
  _write_beat(root, 'collector_0', t0 + 15, 'env step', t0, env_steps=11)
  assert monitor.stalled(now=t0 + 15) == 'collector_0 stalled (env step, 9 s)'
  off = heartbeat.Monitor(root, stall_timeout_s=0, silence_timeout_s=5)
  assert off.stalled(now=t0 + 100) is None
  assert off.check(now=t0 + 100) == {'collector_0': 'not answering (85 s)'}


def test_a_trainer_waiting_for_its_population_holds_off_the_stall_clock(tmp_path):
  """A population member's trainer waits for the population's decision: the collector
  blocked behind it is not stalled then, and is again 8 s after the wait ends."""
  root, t0 = str(tmp_path), 1000.0
  monitor = heartbeat.Monitor(root, stall_timeout_s=8, silence_timeout_s=5)
  _write_beat(root, 'collector_0', t0, 'env step', t0, env_steps=10)
  _write_beat(root, 'train', t0, 'wait for the population', t0, train_step=3)
  monitor.check(now=t0)
  for t in (t0 + 4, t0 + 9, t0 + 30):  # a long wait: the slowest member reports late
    _write_beat(root, 'collector_0', t, 'env step', t0, env_steps=10)
    _write_beat(root, 'train', t, 'wait for the population', t0, train_step=3)
    assert monitor.stalled(now=t) is None, t
  _write_beat(root, 'train', t0 + 31, 'train or wait for data', t0 + 31, train_step=3)
  for t in (t0 + 34, t0 + 39):  # let go at 30 s; the collector still makes no progress
    _write_beat(root, 'collector_0', t, 'env step', t0, env_steps=10)
    _write_beat(root, 'train', t, 'train or wait for data', t0 + 31, train_step=3)
  assert monitor.stalled(now=t0 + 37) is None
  assert monitor.stalled(now=t0 + 39) == 'collector_0 stalled (env step, 9 s)'


def test_monitor_skips_unreadable_files_and_missing_dir(tmp_path):
  root = str(tmp_path)
  assert heartbeat.Monitor(root).check() == {}
  os.makedirs(heartbeat.status_dir(root))
  with open(os.path.join(heartbeat.status_dir(root), 'half.json'), 'w') as f:
    f.write('{"pid": ')
  assert heartbeat.Monitor(root).check() == {}


def test_exit_stalled_is_documented():
  assert process.EXIT_STALLED == 5
  assert 'stalled' in process.EXIT_STATUS_MEANING[process.EXIT_STALLED]


def test_hanging_env_blocks_at_the_set_step():
  env = gym.make(faulty_env.HANG_ENV_ID, hang_at_step=3)
  env.reset(seed=0)
  env.step(0)
  env.step(0)
  t = threading.Thread(target=env.step, args=(0,), daemon=True)
  t.start()
  t.join(timeout=1.0)
  assert t.is_alive()  # still blocked in step 3


def test_hung_env_in_a_worker_ends_the_step_with_env_step_timeout_error():
  from tfrl import envs  # pylint: disable=g-import-not-at-top
  env_id = f'faulty_env:{faulty_env.HANG_ENV_ID}'
  env = envs.make(env_id, num_envs=2, num_workers=1, step_timeout_s=2, hang_at_step=3)
  try:
    env.reset()
    actions = np.zeros(2, dtype=np.int64)
    start = time.monotonic()
    with pytest.raises(envs.EnvStepTimeoutError,
                       match=r'tfrl_test/CartPoleThatHangs-v0.*env step timeout \(2 s\)'):
      for _ in range(5):
        env.step(actions)
    assert time.monotonic() - start < 60  # did not hang
    # pylint: disable-next=protected-access
    assert not any(p.is_alive() for p in env.vector_env._processes)
  finally:
    env.close()



HANGS = ['import faulty_env', f'Experiment.env_name = "{faulty_env.HANG_ENV_ID}"',
         'Experiment.env_step_timeout_s = 5']


@pytest.mark.timeout(400)
def test_hung_env_ends_train_eval_with_env_step_timeout_error_and_status_5(programs):
  root = programs.root_dir
  env = program_env(PYTHONPATH=os.pathsep.join([REPO, HERE]), TFRL_TEST_HANG_AT_STEP='100')
  programs.start('train_eval', 'train_eval', f'--root_dir={root}',
                 *gin_args(SMALL + HANGS), env=env)
  code = programs.wait('train_eval', timeout_s=300)
  log = programs.log('train_eval')
  assert code == process.EXIT_STALLED, log[-3000:]
  assert ('error: EnvStepTimeoutError: tfrl_test/CartPoleThatHangs-v0: an env step took '
          'longer than the env step timeout (5 s)') in log, log[-3000:]


@pytest.mark.timeout(600)
def test_hung_collector_under_launch_is_stalled_and_ends_the_job_with_5(tmp_path):
  root = str(tmp_path / 'job')
  bindings = SMALL + HANGS[:2] + ['Experiment.env_step_timeout_s = 0']  # the monitor's turn
  command = ['-m', 'learners.launch', f'--root_dir={root}', *gin_args(bindings),
             '--num_collectors=1', '--status_interval_s=5', '--stall_timeout_s=8']
  launcher = python_runs.run(
      command, timeout=500, env=program_env(PYTHONPATH=os.pathsep.join([REPO, HERE]),
                                            TFRL_TEST_HANG_AT_STEP='300'))
  out = launcher.stdout[-3000:] + launcher.stderr[-3000:]
  assert launcher.returncode == process.EXIT_STALLED, out
  assert re.search(r'collect_0 stalled \(env step, \d+ s\)', launcher.stdout), out
  assert 'error: collect_0 stalled (env step' in launcher.stderr, out
  with open(os.path.join(root, 'logs', 'train.log')) as f:
    stopped = re.findall(r'Trainer stopped at train step (\d+)', f.read())
  assert stopped, out
  assert final_state(root)['checkpoint'] == int(stopped[-1]) > 0, out


def test_a_frozen_process_reads_not_answering_before_stalled(tmp_path):
  root, t0 = str(tmp_path), 1000.0
  monitor = heartbeat.Monitor(root, stall_timeout_s=8)  # silence: 4 s
  _write_beat(root, 'collect_0', t0, 'env step', t0, env_steps=10)
  monitor.check(now=t0)
  assert monitor.check(now=t0 + 5) == {'collect_0': 'not answering (5 s)'}
  assert monitor.stalled(now=t0 + 9) == 'collect_0 not answering (9 s)'


def test_a_process_that_exited_is_left_to_the_launcher(tmp_path):
  root = str(tmp_path)
  gone = subprocess.Popen([sys.executable, '-c', 'pass'])
  gone.wait()
  os.makedirs(heartbeat.status_dir(root))
  with open(os.path.join(heartbeat.status_dir(root), 'collect_1.json'), 'w') as f:
    json.dump({'pid': gone.pid, 'host': socket.gethostname(), 'time': 0.0,
               'activity': 'env step', 'since': 0.0, 'counters': {}}, f)
  _write_beat(root, 'collect_0', 0.0, 'env step', 0.0, env_steps=1)
  monitor = heartbeat.Monitor(root, stall_timeout_s=8)
  assert monitor.check(now=100.0) == {'collect_0': 'not answering (100 s)'}


@pytest.mark.timeout(600)
def test_a_frozen_server_under_launch_reads_not_answering_and_ends_with_5(tmp_path):
  # SIGSTOP: what a swapped-out or frozen machine looks like. (A frozen collector takes
  # the same path: its heartbeat file stops; the Monitor's unit tests cover the naming.)
  frozen = 'reverb_server'
  root = str(tmp_path / 'job')
  command = ['-m', 'learners.launch', f'--root_dir={root}', *gin_args(SMALL),
             '--num_collectors=1', '--status_interval_s=2', '--stall_timeout_s=6']
  stdout_path, stderr_path = str(tmp_path / 'launch.out'), str(tmp_path / 'launch.err')
  # A fork of the tests' preloaded process; its programs are forks too (the launcher
  # gets a fork server of its own).
  launcher = python_runs.start(command, stdout_path, stderr_path, env=program_env())
  try:
    beats = heartbeat.status_dir(root)

    def training() -> bool:
      try:
        with open(os.path.join(beats, 'train.json')) as f:
          return json.load(f)['counters'].get('train_step', 0) > 0
      except (OSError, ValueError, KeyError):
        return False

    deadline = time.monotonic() + 300
    while not training():
      assert launcher.poll() is None and time.monotonic() < deadline, (
          'the trainer never reported train steps')
      time.sleep(0.5)
    with open(os.path.join(beats, f'{frozen}.json')) as f:
      os.kill(json.load(f)['pid'], signal.SIGSTOP)
    launcher.wait(timeout=300)
  finally:
    if launcher.poll() is None:
      launcher.kill()
      launcher.wait()
  with open(stdout_path) as f_out, open(stderr_path) as f_err:
    out, err = f_out.read(), f_err.read()
  said = out[-3000:] + err[-3000:]
  assert launcher.returncode == process.EXIT_STALLED, said
  assert re.search(rf'{frozen} not answering \(\d+ s\)', out), said
  assert f'error: {frozen} not answering' in err, said
  # Woken (SIGCONT) and stopped in order: the trainer's final save is there.
  assert final_state(root)['checkpoint'] > 0, said


def test_an_env_worker_step_timeout_ends_a_program_with_status_5(capsys):
  from tfrl import envs  # pylint: disable=import-outside-toplevel

  def work(unused_stop_event):
    raise envs.EnvStepTimeoutError('Hang-v0: a step of env worker 0 took longer than the '
                                   'env step timeout (5 s); its workers were killed.')

  with pytest.raises(SystemExit) as ended:
    process.run_program(work, 'collector', grace_s=5)
  assert ended.value.code == process.EXIT_STALLED
  assert 'error: Hang-v0: a step of env worker 0 took longer' in capsys.readouterr().err


def test_in_process_step_watchdog_fires_on_a_hung_step_only():
  from tfrl.envs import step_watchdog  # pylint: disable=import-outside-toplevel
  fired = []
  fine = step_watchdog.TimedVectorEnv(gym.make_vec('CartPole-v1', num_envs=2,
                                                   vectorization_mode='sync'),
                                      'CartPole-v1', 0.5, on_timeout=fired.append)
  fine.reset(seed=0)
  for _ in range(20):
    fine.step(np.zeros(2, np.int64))
  time.sleep(1.0)
  fine.close()
  assert not fired
  hung = step_watchdog.TimedVectorEnv(
      gym.make_vec(faulty_env.HANG_ENV_ID, num_envs=1, vectorization_mode='sync',
                   hang_at_step=1), faulty_env.HANG_ENV_ID, 0.5, on_timeout=fired.append)
  hung.reset(seed=0)
  threading.Thread(target=hung.step, args=(np.zeros(1, np.int64),), daemon=True).start()
  deadline = time.monotonic() + 30
  while not fired and time.monotonic() < deadline:
    time.sleep(0.1)
  assert len(fired) == 1 and 'longer than the env step timeout (0.5 s)' in str(fired[0])


class _SlowWaitVectorEnv(gym.vector.VectorWrapper):
  """CartPole stepped asynchronously: step_wait takes `wait_s` (a stuck receive)."""

  def __init__(self, wait_s):
    super().__init__(gym.make_vec('CartPole-v1', num_envs=1, vectorization_mode='sync'))
    self.wait_s, self._actions = wait_s, None

  def step_async(self, actions):
    self._actions = actions

  def step_wait(self):
    time.sleep(self.wait_s)
    return self.env.step(self._actions)


def test_asynchronous_step_watchdog_times_the_wait_not_the_callers_work_between():
  from tfrl.envs import step_watchdog  # pylint: disable=import-outside-toplevel
  fired = []
  env = step_watchdog.timed_vector_env(_SlowWaitVectorEnv(0.0), 'CartPole-v1', 0.5,
                                       on_timeout=fired.append)
  assert isinstance(env, step_watchdog.TimedAsyncVectorEnv)
  env.reset(seed=0)
  env.step_async(np.zeros(1, np.int64))
  time.sleep(1.5)  # the caller's own work (a writer held back by a rate limiter)
  env.step_wait()
  assert not fired
  env.env.wait_s = 3.0
  env.step_async(np.zeros(1, np.int64))
  threading.Thread(target=env.step_wait, daemon=True).start()
  deadline = time.monotonic() + 30
  while not fired and time.monotonic() < deadline:
    time.sleep(0.1)
  assert len(fired) == 1 and 'longer than the env step timeout (0.5 s)' in str(fired[0])
  # A synchronous env keeps the plain watchdog (it has no step_async to time).
  plain = step_watchdog.timed_vector_env(
      gym.make_vec('CartPole-v1', num_envs=1, vectorization_mode='sync'), 'CartPole-v1', 1)
  assert type(plain) is step_watchdog.TimedVectorEnv  # pylint: disable=unidiomatic-typecheck
  plain.close()

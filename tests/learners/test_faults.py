"""Fault injection: the real programs (real Reverb server, real subprocesses) under kills,
restarts, signals and broken environments. What a user keeps must only move forward, and
nothing may hang.

Each test states the fault it injects and what must hold afterwards. The long ones are
marked slow; `make test` runs them all. Trials print a line each (see -s), recorded in
docs/results/index.md ("Fault injection").
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import ports  # tests/ports.py
import psutil
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from learners.configuration import config
from learners.configuration.experiment import Experiment
from learners.processes import job_status
from learners.processes import stop_plan
from programs import (CONFIRM_AT_ONCE, GIN, REPO, SMALL, answers, checkpoint_step,
                      final_state, gin_args, program_env, replay_confirmation, wait_until)
from tfrl import export
from tfrl import replay

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTS = ('greedy_policy', 'collect_policy', 'policy')
# The jobs that must go on to their target after a fault: 200 rather than the config's
# 475 (a random policy returns about 22). The fault and the recovery are what these
# tests prove; DQN's 475 is held in test_learning.py and the demo's test.
TARGET = 200.0
TARGET_BINDING = f'Experiment.target_return = {TARGET}'


def _common(root: str, address: str, bindings) -> list:
  return [f'--root_dir={root}', f'--reverb_address={address}', *gin_args(bindings)]


def _restored_step(log: str) -> int:
  found = re.findall(r'Restored \S+ at train step (\d+)\.', log)
  return int(found[-1]) if found else 0


def _last_logged_step(log: str) -> int:
  found = re.findall(r'train step (\d+) \|', log)
  return int(found[-1]) if found else 0


def _greedy_actions_from_checkpoint(checkpoint: str, observations: np.ndarray) -> list:
  """Greedy actions of the agent restored from a learner checkpoint (gin already parsed)."""
  train_step, agent = Experiment().build_agent()
  tf.train.Checkpoint(agent=agent, train_step=train_step).read(checkpoint).expect_partial()
  assert int(train_step.numpy()) == int(checkpoint.rsplit('-', 1)[1])
  time_step = ts.restart(tf.constant(observations), batch_size=len(observations))
  return agent.policy.action(time_step).action.numpy().tolist()


def _greedy_actions_of_export(path: str, observations: np.ndarray) -> list:
  time_step = ts.restart(tf.constant(observations), batch_size=len(observations))
  return export.load_policy(path).action(time_step).action.numpy().tolist()


# -- 1. kill -9 of the trainer at random points -------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_trainer_killed_at_random_points_resumes_and_exports_only_move_forward(programs):
  root = programs.root_dir
  bindings = SMALL + ['Experiment.num_train_steps=1000000',
                      'Experiment.max_checkpoints_to_keep=1000',
                      'Experiment.policy_checkpoint_interval=64']
  config.parse([GIN.split('=', 1)[1]], bindings)
  address = programs.start_server('reverb_server', ports.free_port(), bindings)
  common = _common(root, address, bindings)
  programs.start('collect', 'collect', *common)
  checkpoint_dir = os.path.join(root, 'train', 'checkpoints')
  observations = np.random.default_rng(1).normal(0, 0.5, (256, 4)).astype(np.float32)
  rng = np.random.default_rng(0)
  last_checkpoint, last_exports, trials = -1, {name: -1 for name in EXPORTS}, []
  # Four kills: anywhere from start-up into training (a delay: any outcome is fine);
  # just after a checkpoint (so the next one has something to restore, however slow the
  # machine); during the restore's exports; and a random number of train steps past the
  # restore, an event rather than a delay, so that on any machine the job has exported
  # its restored policies by the last kill.
  for trial in range(4):
    name = f'train_{trial}'
    start = time.monotonic()
    programs.start(name, 'train', *common, '--log_interval_s=0')
    watched = ['reverb_server', 'collect', name]
    if trial == 1:
      point = 'just after a new checkpoint'
      wait_until(lambda: checkpoint_step(checkpoint_dir) > last_checkpoint, 180,
                 'a new checkpoint', programs, watched, poll_s=0.05)
    elif trial == 2:  # while it exports its restored policies (right after the restore)
      point = 'at the restore'
      wait_until(lambda n=name: 'Restored' in programs.log(n), 180, 'the restore',
                 programs, watched, poll_s=0.05)
    elif trial == 3:  # well into training, past the restore's exports
      steps = int(rng.integers(1, 9)) * 16  # SMALL's train steps per iteration
      point = f'{steps} train steps past the restore'
      wait_until(lambda n=name, k=steps: ('Restored' in programs.log(n) and
                                          _last_logged_step(programs.log(n)) >=
                                          _restored_step(programs.log(n)) + k),
                 300, point, programs, watched, poll_s=0.05)
    else:  # anywhere from start-up into training
      delay = float(rng.uniform(3.0, 25.0))
      point = f'{delay:.1f} s after start'
      wait_until(lambda d=delay: time.monotonic() - start >= d, 60, point, programs,
                 watched, poll_s=0.05)
    programs.processes[name].kill()
    assert programs.wait(name, timeout_s=30) == -signal.SIGKILL
    log = programs.log(name)

    # The train step never goes back past the latest checkpoint...
    checkpoint = checkpoint_step(checkpoint_dir)
    restored = _restored_step(log)
    assert checkpoint >= last_checkpoint
    if 'Restored' in log:
      assert restored == last_checkpoint, (restored, last_checkpoint)
    logged = re.findall(r'train step (\d+) \|', log)
    assert all(int(step) > restored for step in logged), (restored, logged[:3])
    # ... and every export loads, is never older than before nor newer than the
    # checkpoints, and holds exactly the weights of the checkpoint of its train step.
    exports = {}
    for export_name in EXPORTS:
      path = os.path.join(root, 'policies', export_name)
      step = export.exported_train_step(path)
      exports[export_name] = -1 if step is None else step
      if step is None:
        continue
      assert export.load_policy(path).get_train_step() == step
      assert last_exports[export_name] <= step <= checkpoint
    if exports['greedy_policy'] >= 0:
      path = os.path.join(root, 'policies', 'greedy_policy')
      at = os.path.join(checkpoint_dir, f'ckpt-{exports["greedy_policy"]}')
      assert (_greedy_actions_of_export(path, observations) ==
              _greedy_actions_from_checkpoint(at, observations))
    if restored > 0 and 'Trainer (chief=' in log:  # it got past the restore's export
      assert exports['greedy_policy'] >= restored
    lost = max(0, _last_logged_step(log) - checkpoint)
    trials.append(f'trial {trial}: killed {point}; restored step {restored}; checkpoint '
                  f'{checkpoint}; exports {exports["greedy_policy"]}; steps trained past '
                  f'the checkpoint (lost) {lost}')
    last_checkpoint, last_exports = checkpoint, exports
  print('\n'.join(trials))
  assert last_checkpoint > 0 and last_exports['greedy_policy'] > 0, trials

  # A normal end (SIGTERM) after all that: final checkpoint and exports at the final step.
  programs.start('train_final', 'train', *common, '--log_interval_s=0')
  wait_until(lambda: checkpoint_step(checkpoint_dir) > last_checkpoint, 180,
             'a checkpoint past the last one', programs, ['collect', 'train_final'])
  assert programs.stop('train_final') == 0, programs.tail('train_final')
  final = int(re.findall(r'Trainer stopped at train step (\d+)',
                         programs.log('train_final'))[-1])
  assert final_state(root) == {'checkpoint': final, **{name: final for name in EXPORTS}}


# -- 2. kill -9 of the Reverb server and a restart ----------------------------------------


def _reverb_checkpoints(root: str) -> list:
  return sorted(glob.glob(os.path.join(root, 'reverb', '*', 'DONE')))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_server_killed_and_restarted_the_job_goes_on_to_its_target(programs):
  root = programs.root_dir
  port = ports.free_port()
  server_flags = ('--checkpoint_interval_s=1',)
  bindings = ['Experiment.checkpoint_interval = 1000',
              'Experiment.num_train_steps = 500000', TARGET_BINDING, CONFIRM_AT_ONCE]
  address = programs.start_server('reverb_server', port, bindings, *server_flags)
  common = _common(root, address, bindings)
  programs.start('train', 'train', *common, '--server_lost_after_s=3',
                 '--log_interval_s=1')
  for task in (0, 1):
    programs.start(f'collect_{task}', 'collect', *common, f'--task_id={task}',
                   '--num_collectors=2', '--write_timeout_s=10')
  # The evaluator, which ends the job at its target, starts after the restart: DQN can
  # solve CartPole in 3 s of training, before the fault would land.
  everyone = ['reverb_server', 'train', 'collect_0', 'collect_1']
  wait_until(lambda: _last_logged_step(programs.log('train')) > 0, 300,
             'the first train steps', programs, everyone, poll_s=0.1)
  size = replay.wait_for_server(address, timeout_s=10)['replay'].current_size
  # Two checkpoints on: the first to finish may have begun before `size` was read (it
  # once restored 31 items of the 33 counted); the second began after the first ended.
  for which in ('next', 'one after'):
    latest = _reverb_checkpoints(root)[-1:]  # (Reverb keeps only its newest few)
    wait_until(lambda l=latest: _reverb_checkpoints(root)[-1:] not in ([], l), 60,
               f'the {which} Reverb checkpoint', programs, everyone, poll_s=0.1)
  programs.processes['reverb_server'].kill()
  assert programs.wait('reverb_server', timeout_s=30) == -signal.SIGKILL
  # Out long enough for everyone to notice: the collectors' 10 s write timeout, the
  # trainer's 3 s (probed every 5 s, each probe up to 5 s).
  time.sleep(15)

  before = {task: len(programs.log(f'collect_{task}')) for task in (0, 1)}
  programs.start_server('reverb_server_2', port, bindings, *server_flags)
  restored = replay.wait_for_server(address, timeout_s=10)['replay'].current_size
  assert restored >= size > 0, (restored, size)
  everyone[0] = 'reverb_server_2'
  # Each collector collects for the new server: it says so once its writes fail and
  # then go through, or, where the outage caught it between writes (in a variables pull,
  # which waits for the server and says nothing), its next progress line comes after the
  # restart.
  def collecting_again(task: int) -> bool:
    since = programs.log(f'collect_{task}')[before[task]:]
    return any(line in since for line in ('is back; collecting again',
                                          f'collector {task} | env steps'))

  for task in (0, 1):
    wait_until(lambda t=task: collecting_again(t), 180, f'collector {task} to collect again',
               programs, everyone)
  # The trainer goes on once the server is back: Reverb's sample stream resumes, or (if
  # it stays stuck) the trainer restarts itself from its latest checkpoint.
  recovered = ('is back and training goes on', 'restarting the trainer from its latest')
  wait_until(lambda: any(line in programs.log('train') for line in recovered), 180,
             'the trainer to go on', programs, everyone)
  how = [line for line in recovered if line in programs.log('train')]
  # Only now the evaluator, which ends the job at its target (and the trainer with it):
  # started earlier, it could end the job before the waits above saw their lines.
  programs.start('eval', 'eval', *common)
  assert programs.wait('eval', timeout_s=600) == 0, programs.tail('eval')
  with open(os.path.join(root, 'eval', 'results.json')) as f:
    last = json.load(f)[-1]
  assert last['reached_target'] and last['return'] >= TARGET, last
  assert programs.stop('train') == 0, programs.tail('train')
  state = final_state(root)
  assert set(state.values()) == {last['train_step']}, (state, last)
  # The export replays the confirmation's episodes as the evaluator did.
  config.parse(['dqn_cartpole.gin'], bindings)
  assert replay_confirmation(os.path.join(root, 'policies', 'greedy_policy'),
                             last['confirmation_seed']) >= TARGET
  print(f'server killed at table size {size}; restored {restored}; trainer: {how}; '
        f'final step {state["checkpoint"]}')


# -- 3. A collector killed under the launcher (and the end of a replay job) ----------------


def _job_processes(root_dir: str) -> list:
  found = []
  for process in psutil.process_iter(['pid', 'cmdline']):
    if process.info['pid'] != os.getpid() and any(
        root_dir in arg for arg in (process.info['cmdline'] or ())):
      found.append(process)
  return found


# `python -m learners.launch` as a terminal's foreground job starts it: with Ctrl-C's
# default action, whatever this test process inherited (pytest-xdist's workers, and
# anything started in the background of a non-interactive shell, ignore SIGINT, and the
# launcher keeps an inherited ignore, as `nohup` asks).
_AS_FROM_A_TERMINAL = ('import runpy, signal, sys; '
                       'signal.signal(signal.SIGINT, signal.default_int_handler); '
                       'sys.argv[0] = "launch"; '
                       'runpy.run_module("learners.launch", run_name="__main__", '
                       'alter_sys=True)')


def _launch(root: str, *args: str, **popen_kwargs) -> subprocess.Popen:
  command = [sys.executable, '-c', _AS_FROM_A_TERMINAL, f'--root_dir={root}', *args]
  return subprocess.Popen(command, cwd=REPO, env=program_env(
      PYTHONPATH=os.pathsep.join([REPO, HERE])), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **popen_kwargs)


def _finish(launcher: subprocess.Popen, root: str, timeout_s: float):
  """Waits for the launcher; kills (and reports) anything it left behind."""
  try:
    stdout, stderr = launcher.communicate(timeout=timeout_s)
  finally:
    if launcher.poll() is None:
      launcher.kill()
      launcher.communicate(timeout=60)
    leftovers = _job_processes(root)
    for process in leftovers:
      process.kill()
    psutil.wait_procs(leftovers, timeout=30)
  assert not leftovers, [p.info['cmdline'] for p in leftovers]
  return stdout, stderr


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_killed_collector_is_reported_and_the_job_ends_with_final_exports(tmp_path):
  root = str(tmp_path / 'job')
  launcher = _launch(root, GIN, f'--gin_bindings={TARGET_BINDING}',
                     f'--gin_bindings={CONFIRM_AT_ONCE}', '--num_collectors=2',
                     '--timeout_s=900', '--status_interval_s=5')
  victim_log = os.path.join(root, 'logs', 'collect_1.log')
  deadline = time.monotonic() + 300
  while launcher.poll() is None and time.monotonic() < deadline:
    if os.path.exists(victim_log) and 'acting with policy version' in open(victim_log).read():
      break
    time.sleep(0.5)
  victims = [p for p in _job_processes(root) if '--task_id=1' in p.info['cmdline']]
  assert len(victims) == 1, 'collector 1 never started acting'
  victims[0].kill()
  stdout, stderr = _finish(launcher, root, 1200)
  assert launcher.returncode == 0, stderr[-5000:]
  assert 'collect_1 was killed (SIGKILL) (exit status -9); the job goes on with collect_0' in \
      stderr, stderr[-5000:]
  assert 'Lost during the job (reported above): collect_1.' in stdout
  assert re.search(r'collect_1:exited\(-9\)', stdout), stdout[-3000:]
  with open(os.path.join(root, 'eval', 'results.json')) as f:
    last = json.load(f)[-1]
  assert last['reached_target'] and last['return'] >= TARGET, last
  # The end of the job: final checkpoint and exports at the trainer's final step, which
  # is the step the evaluator confirmed (the trainer held still there).
  final = int(re.findall(r'Trainer stopped at train step (\d+)',
                         open(os.path.join(root, 'logs', 'train.log')).read())[-1])
  assert final == last['train_step']
  assert final_state(root) == {'checkpoint': final, **{name: final for name in EXPORTS}}
  assert f'greedy policy (train step {final})' in stdout
  config.parse(['dqn_cartpole.gin'], [TARGET_BINDING, CONFIRM_AT_ONCE])
  assert replay_confirmation(os.path.join(root, 'policies', 'greedy_policy'),
                             last['confirmation_seed']) >= TARGET


# -- 4. Ctrl-C of the launcher: the same ordered stop --------------------------------------


@pytest.mark.timeout(600)
def test_ctrl_c_of_the_launcher_stops_in_order_with_final_saves(tmp_path):
  root = str(tmp_path / 'job')
  bindings = SMALL + ['Experiment.num_train_steps=1000000']
  launcher = _launch(root, GIN, *[f'--gin_bindings={b}' for b in bindings],
                     '--num_collectors=1', '--status_interval_s=2', start_new_session=True)
  checkpoint_dir = os.path.join(root, 'train', 'checkpoints')
  deadline = time.monotonic() + 300
  while checkpoint_step(checkpoint_dir) < 64:
    assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()
    time.sleep(0.5)
  # What a terminal does on Ctrl-C: SIGINT to the foreground process group.
  os.killpg(launcher.pid, signal.SIGINT)
  stdout, stderr = _finish(launcher, root, 240)
  assert launcher.returncode == 0, stderr[-5000:]
  assert 'Interrupted: stopping the job in order' in stdout
  train_log = open(os.path.join(root, 'logs', 'train.log')).read()
  final = int(re.findall(r'Trainer stopped at train step (\d+)', train_log)[-1])
  assert final_state(root) == {'checkpoint': final, **{name: final for name in EXPORTS}}
  assert final >= 64
  # Only the launcher got SIGINT; the children were stopped by its SIGTERMs.
  for name in ('train', 'collect_0', 'eval', 'reverb_server'):
    log = open(os.path.join(root, 'logs', f'{name}.log')).read()
    assert 'KeyboardInterrupt' not in log and 'killing it' not in stderr, name


# -- 5. A trainer stopped after its collectors are gone -----------------------------------


def test_trainer_stopped_without_collectors_still_saves_at_its_final_step(programs):
  root = programs.root_dir
  # A rate limiter: without collectors, sampling blocks once the error buffer is used up.
  bindings = SMALL + ['Experiment.num_train_steps=1000000',
                      'Experiment.samples_per_insert=8.0']
  address = programs.start_server('reverb_server', ports.free_port(), bindings)
  common = _common(root, address, bindings)
  programs.start('collect', 'collect', *common)
  programs.start('train', 'train', *common, '--log_interval_s=0', '--sample_timeout_s=2')
  wait_until(lambda: _last_logged_step(programs.log('train')) >= 64, 300, 'train step 64',
             programs, ['reverb_server', 'collect', 'train'])
  programs.processes['collect'].kill()  # nothing feeds the trainer any more
  programs.wait('collect', timeout_s=30)
  wait_until(lambda: 'Waiting for experience from replay at' in programs.log('train'), 120,
             'the trainer to wait for experience', programs, ['train'])
  # Status 0 inside the grace: it noticed the stop within --sample_timeout_s and saved (a
  # trainer blocked on the sample would be killed at the grace's end).
  assert programs.stop('train', grace_s=60) == 0, programs.tail('train')
  final = int(re.findall(r'Trainer stopped at train step (\d+)',
                         programs.log('train'))[-1])
  assert final_state(root) == {'checkpoint': final, **{name: final for name in EXPORTS}}


# -- 6. An environment that raises mid-episode --------------------------------------------


BROKEN_ENV = ['import faulty_env', 'Experiment.env_name = "tfrl_test/CartPoleThatRaises-v0"',
              'Experiment.initial_collect_steps=640']  # the warm-up meets the error


def test_env_error_ends_the_collector_with_that_error_and_no_retry(programs):
  root = programs.root_dir
  bindings = SMALL + BROKEN_ENV
  env = program_env(PYTHONPATH=os.pathsep.join([REPO, HERE]))
  port = ports.free_port()
  programs.start('reverb_server', 'reverb_server', f'--root_dir={root}', f'--port={port}',
                 *gin_args(bindings), env=env)
  address = f'127.0.0.1:{port}'
  wait_until(lambda: answers(address), 180, 'the server', programs, ['reverb_server'])
  programs.start('collect', 'collect', *_common(root, address, bindings), env=env)
  code = programs.wait('collect', timeout_s=180)
  log = programs.log('collect')
  assert code == 1, log[-3000:]
  assert 'RuntimeError: CartPoleThatRaises broke at step 30' in log, log[-3000:]
  assert 'Lost the Reverb server' not in log and 'reconnecting' not in log


@pytest.mark.timeout(600)
def test_launcher_reports_a_collector_that_fails_and_exits_1(tmp_path):
  root = str(tmp_path / 'job')
  launcher = _launch(root, GIN, *[f'--gin_bindings={b}' for b in SMALL + BROKEN_ENV],
                     '--num_collectors=2', '--status_interval_s=5')
  stdout, stderr = _finish(launcher, root, 300)
  assert launcher.returncode == 1, stdout[-3000:] + stderr[-3000:]
  assert 'failed (see its log) (exit status 1)' in stderr, stderr[-5000:]
  assert 'CartPoleThatRaises broke at step 30' in stderr, stderr[-5000:]


# -- Bad input and unreachable things: one line, exit 2, no hang ---------------------------


def test_reverb_checkpoint_of_other_tables_stops_the_server_naming_the_difference(programs):
  root = programs.root_dir
  port = ports.free_port()
  programs.start_server('reverb_server', port, SMALL)
  assert programs.stop('reverb_server') == 0  # a final checkpoint at the first capacity
  programs.start('reverb_server_2', 'reverb_server', f'--root_dir={root}',
                 f'--port={port}', *gin_args(SMALL + ['TransitionReplay.capacity=3200']))
  assert programs.wait('reverb_server_2', timeout_s=120) == 2
  log = programs.log('reverb_server_2')
  errors = [line for line in log.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1, log[-3000:]
  assert os.path.join(root, 'reverb') in errors[0] and 'max_size' in errors[0], errors


def test_launcher_status_does_not_wait_for_the_first_variables_push(tmp_path):
  from learners.processes import launcher as launcher_lib  # pylint: disable=g-import-not-at-top
  launcher = launcher_lib.Launcher(str(tmp_path), ['dqn_cartpole.gin'],
                             port=ports.free_port())
  experiment = Experiment()
  train_step, agent = experiment.build_agent()
  server = replay.ReplayServer(experiment.tables(agent, train_step), port=launcher.port)
  try:
    # Waiting for a push would block until the collectors' first-push bound (600 s): a
    # reading returns after its own 2 s sample bound; 120 s leaves room for any load.
    start = time.monotonic()
    status = launcher.status()
    assert time.monotonic() - start < 120
    assert status['train_step'] is None and status['env_steps'] == 0
    # What is not known yet is left out of the status line, not printed as nan or None.
    line = job_status.format_status(status)
    assert line.endswith('] env steps 0') and 'nan' not in line, line
    replay.VariableContainer(launcher.address,
                             experiment.pushed_variables(agent, train_step)).push()
    status = launcher.status()
    assert status['train_step'] == 0
    line = job_status.format_status(status)
    assert re.search(r' \| train step 0( \(\d+/s\))?$', line), line
  finally:
    server.stop()


def test_trainer_whose_server_never_returns_exits_naming_it(programs):
  root = programs.root_dir
  address = programs.start_server('reverb_server', ports.free_port(), SMALL)
  common = _common(root, address, SMALL + ['Experiment.num_train_steps=1000000'])
  # The collector's own stop grace (12 s) ends inside the 20 s this test gives it, so a
  # collector that cannot stop exits with status 3 and its threads' stacks in its log.
  programs.start('collect', 'collect', *common,
                 env=program_env(**{stop_plan.STOP_GRACE_ENV: '15'}))
  programs.start('train', 'train', *common, '--log_interval_s=0',
                 '--server_lost_after_s=2', '--reconnect_timeout_s=5')
  wait_until(lambda: _last_logged_step(programs.log('train')) > 0, 300, 'training',
             programs, ['reverb_server', 'collect', 'train'])
  programs.processes['reverb_server'].kill()
  # Status 4 and the 5-s message below say which wait ended it; the bound guards a hang.
  assert programs.wait('train', timeout_s=300) == 4, programs.tail('train')
  errors = [line for line in programs.log('train').splitlines()
            if line.startswith('error: ')]
  assert errors and address in errors[-1] and 'did not come back within 5 s' in errors[-1]
  # The collector, waiting on the same lost server, ends cleanly on the scheduler's SIGTERM.
  assert programs.stop('collect', grace_s=20) == 0, programs.tail('collect', lines=150)


_UP_AND_SLEEP = ('import signal, time; signal.signal(signal.SIGTERM, signal.{action}); '
                 'print("up", flush=True); time.sleep(600)')


def test_launcher_reports_what_did_not_stop_cleanly(tmp_path):
  from learners.processes import launcher as launcher_lib  # pylint: disable=g-import-not-at-top
  launcher = launcher_lib.Launcher(str(tmp_path), ['dqn_cartpole.gin'])
  scripts = {
      # SIGTERM's default action (set: pytest may have been started ignoring it): -15
      'eval': _UP_AND_SLEEP.format(action='SIG_DFL'),
      'train': _UP_AND_SLEEP.format(action='SIG_IGN'),
      'collect_0': 'raise SystemExit(1)',
  }
  for name, script in scripts.items():
    launcher.processes[name] = subprocess.Popen([sys.executable, '-c', script],
                                                stdout=subprocess.PIPE, text=True)
  for name in ('eval', 'train'):  # up, with their SIGTERM action set
    assert launcher.processes[name].stdout.readline() == 'up\n'
  launcher.processes['collect_0'].wait(timeout=120)  # failed before the stop, not by it
  problems = launcher.stop(grace_s=10)  # eval 1.5 s, train 5 s: ample on a loaded machine
  assert sorted(problems) == sorted([
      f'collect_0 failed (see its log) (exit status 1); see {launcher.log_path("collect_0")}',
      f'eval was ended by SIGTERM before it could handle it (exit status -15); see '
      f'{launcher.log_path("eval")}',
      f'train ignored SIGTERM and was killed (exit status -9); see '
      f'{launcher.log_path("train")}'])
  assert launcher.stop() is problems  # stopping again changes nothing

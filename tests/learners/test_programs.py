"""The separate programs (reverb_server, collect, train, eval, launch) as real processes.

Every program runs as `python -m learners.<program>` in a subprocess with its output in a
log file; the `programs` fixture stops (SIGTERM, then SIGKILL) whatever a test leaves
running, so no test orphans a process. Settings are small through --gin_bindings.
"""
import glob
import json
import os
import re
import signal
from typing import List

import numpy as np
import ports  # tests/ports.py
import tensorflow as tf

from programs import (GIN, SMALL, START_TIMEOUT_S, answers, checkpoint_step, gin_args,
                      program_env, wait_until)
from tfrl import replay


def _replay_info(address: str):
  return replay.wait_for_server(address, timeout_s=10)['replay']


def _train_steps_logged(log: str) -> List[int]:
  return [int(s) for s in re.findall(r'train step (\d+) \|', log)]


# -- 1. The whole job through the launcher: see test_faults.py (a collector is killed
# on the way, and the end's checkpoint and exports are checked). ----------------------


# -- 2. Multi-worker training ------------------------------------------------------------


def test_multi_worker_trainers_stay_in_sync(programs):
  root = programs.root_dir
  bindings = SMALL + ['Experiment.num_train_steps=48']
  server_port, port_0, port_1 = (ports.free_port() for _ in range(3))
  address = programs.start_server('reverb_server', server_port, bindings)
  common = [f'--root_dir={root}', f'--reverb_address={address}', *gin_args(bindings)]
  programs.start('collect', 'collect', *common)
  cluster = {'worker': [f'127.0.0.1:{port_0}', f'127.0.0.1:{port_1}']}
  for index in (0, 1):
    tf_config = json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': index}})
    programs.start(f'train_{index}', 'train', *common, '--strategy=multi_worker',
                   env=program_env(TF_CONFIG=tf_config))
  for index in (0, 1):
    code = programs.wait(f'train_{index}', timeout_s=420)
    assert code == 0, programs.tail(f'train_{index}')
  programs.check_alive('collect', 'reverb_server')

  chief_dir = os.path.join(root, 'train', 'checkpoints')
  worker_dir = os.path.join(root, 'worker_1', 'train', 'checkpoints')
  assert checkpoint_step(chief_dir) == 48
  assert checkpoint_step(worker_dir) == 48
  chief = tf.train.load_checkpoint(tf.train.latest_checkpoint(chief_dir))
  worker = tf.train.load_checkpoint(tf.train.latest_checkpoint(worker_dir))
  keys = sorted(k for k in chief.get_variable_to_shape_map() if 'agent/' in k)
  assert keys == sorted(k for k in worker.get_variable_to_shape_map() if 'agent/' in k)
  assert any('_q_network' in k for k in keys), keys
  for key in keys:
    np.testing.assert_allclose(chief.get_tensor(key), worker.get_tensor(key), rtol=1e-6,
                               err_msg=key)
  for reader in (chief, worker):
    assert reader.get_tensor('train_step/.ATTRIBUTES/VARIABLE_VALUE') == 48
  # They trained (in step): the Q-network moved away from the step-32 checkpoint.
  kernel = 'agent/_q_network/_q_value_layer/kernel/.ATTRIBUTES/VARIABLE_VALUE'
  at_32 = tf.train.load_checkpoint(os.path.join(chief_dir, 'ckpt-32'))
  assert not np.allclose(at_32.get_tensor(kernel), chief.get_tensor(kernel))
  # Only the chief exports policies.
  assert os.path.isdir(os.path.join(root, 'policies', 'greedy_policy'))
  assert not os.path.exists(os.path.join(root, 'worker_1', 'policies'))


# -- 3. A trainer killed with SIGKILL resumes from its checkpoint ------------------------


def test_killed_trainer_resumes_from_latest_checkpoint(programs):
  root = programs.root_dir
  bindings = SMALL + ['Experiment.num_train_steps=1000000']
  address = programs.start_server('reverb_server', ports.free_port(), bindings)
  common = [f'--root_dir={root}', f'--reverb_address={address}', *gin_args(bindings)]
  programs.start('collect', 'collect', *common)
  programs.start('train', 'train', *common, '--log_interval_s=0')
  checkpoint_dir = os.path.join(root, 'train', 'checkpoints')
  wait_until(lambda: checkpoint_step(checkpoint_dir) >= 64, 300,
             'a checkpoint at train step >= 64', programs, ['reverb_server', 'collect',
                                                           'train'])
  programs.processes['train'].kill()
  assert programs.wait('train', timeout_s=30) == -signal.SIGKILL
  step = checkpoint_step(checkpoint_dir)
  assert step >= 64 and step % 32 == 0, step

  programs.start('train_restarted', 'train', *common, '--log_interval_s=0')
  wait_until(lambda: checkpoint_step(checkpoint_dir) > step, 300,
             f'a checkpoint past train step {step}', programs,
             ['reverb_server', 'collect', 'train_restarted'])
  log = programs.log('train_restarted')
  assert re.search(rf'Restored \S+ckpt-{step} at train step {step}\.', log), log[-3000:]
  assert f'from train step {step} to' in log
  logged = _train_steps_logged(log)
  assert logged and min(logged) > step, logged
  # The newest complete checkpoint, by its files as the trainer restores it (the state
  # file may still name the one before: it is written after the checkpoint's files).
  later = checkpoint_step(checkpoint_dir)
  reader = tf.train.load_checkpoint(os.path.join(checkpoint_dir, f'ckpt-{later}'))
  assert reader.get_tensor('train_step/.ATTRIBUTES/VARIABLE_VALUE') == later > step
  programs.processes['train_restarted'].kill()  # (a SIGTERM would export policies first)


def test_a_starved_ppo_trainer_pushes_again_so_paced_collectors_get_a_turn(programs):
  """PPO's collectors act only after the trainer's pushes (learners/job/pacing.py). A batch
  that never reached the trainer (a launched LunarLander member's stream ended during
  an evaluator's hold; docs/results/pbt.md, "launched members") left trainer and
  collector waiting on each other for good. A paced trainer now pushes at each sample
  timeout, which gives the collectors a turn; here none runs, so the pushes pile up."""
  root, port = programs.root_dir, ports.free_port()
  ppo = ['--gin_file=ppo_cartpole.gin', '--gin_bindings=Experiment.num_train_steps=100']
  programs.start('reverb_server', 'reverb_server', f'--root_dir={root}', f'--port={port}',
                 *ppo)
  address = f'127.0.0.1:{port}'
  wait_until(lambda: answers(address), START_TIMEOUT_S, 'the server answering', programs,
             ['reverb_server'])
  programs.start('train', 'train', f'--root_dir={root}', f'--reverb_address={address}',
                 *ppo, '--sample_timeout_s=1')
  pushes = lambda: replay.inserted_items(address, replay.VARIABLES_TABLE)
  wait_until(lambda: pushes() >= 4, START_TIMEOUT_S, 'the starved trainer pushing again',
             programs, ['reverb_server', 'train'])
  assert 'Waiting for experience from queue' in programs.log('train')


# -- 4. Collectors survive a Reverb server restart ---------------------------------------


def _reverb_checkpoints(root: str) -> List[str]:
  return sorted(glob.glob(os.path.join(root, 'reverb', '*', 'DONE')))


def test_collector_survives_server_restart_and_data_is_restored(programs):
  root = programs.root_dir
  # No rate limiter: the collector must insert again once the trainer is done.
  bindings = SMALL + ['Experiment.num_train_steps=32', 'TransitionReplay.capacity=16000',
                      'Experiment.samples_per_insert=None']
  port = ports.free_port()
  address = programs.start_server('reverb_server', port, bindings,
                                  '--checkpoint_interval_s=2')
  common = [f'--root_dir={root}', f'--reverb_address={address}', *gin_args(bindings)]
  # The trainer pushes the variables the collector waits for, trains 32 steps, exits.
  programs.start('train', 'train', *common)
  # A short write timeout, so that a lost server is noticed in seconds; no variable
  # pulls after the first, so that it is the writer that notices.
  programs.start('collect', 'collect', *common, '--write_timeout_s=10',
                 '--variable_update_period=1000000000')
  assert programs.wait('train', timeout_s=300) == 0, programs.tail('train')
  wait_until(lambda: _replay_info(address).current_size > 0 and _reverb_checkpoints(root),
             60, 'replay items and a Reverb checkpoint', programs,
             ['reverb_server', 'collect'])
  # Replay's items so far are the random warm-up's; the server goes only once the
  # collector acts, so that its writer, not its first pull, meets the lost server (on a
  # loaded CI host the pull was still under way when the server stopped).
  wait_until(lambda: 'acting with policy version' in programs.log('collect'), 120,
             'the collector to act with the pushed policy', programs, ['collect'])
  collector_pid = programs.processes['collect'].pid
  before = _replay_info(address)

  assert programs.stop('reverb_server') == 0, programs.tail('reverb_server')
  assert 'final Reverb checkpoint' in programs.log('reverb_server')
  wait_until(lambda: 'Lost the Reverb server' in programs.log('collect'), 60,
             'the collector to notice the server is gone', programs, ['collect'])
  assert re.search(r'Lost the Reverb server at \S+ \(DeadlineExceededError: Items for '
                   r"\['replay'\] were not accepted within 10 s", programs.log('collect'))

  programs.start_server('reverb_server_restarted', port, bindings,
                        '--checkpoint_interval_s=2')
  info = replay.wait_for_server(address, timeout_s=10)
  # The contents came back from the checkpoint. Nobody pushes variables or samples any
  # more (the trainer is done), so the variables and the trainer's samples in the rate
  # limiter's counts can only come from it; and the items are all there.
  assert info['variables'].current_size == 1
  assert info['replay'].current_size >= before.current_size > 0
  stats = info['replay'].rate_limiter_info
  assert stats.sample_stats.completed >= before.rate_limiter_info.sample_stats.completed > 0
  assert stats.insert_stats.completed >= before.rate_limiter_info.insert_stats.completed
  assert re.search(r"sizes after restore: \{[^}]*'replay': [1-9]",
                   programs.log('reverb_server_restarted'))

  # The same collector process reconnects and inserts again.
  wait_until(lambda: 'is back; collecting again' in programs.log('collect'), 120,
             'the collector to reconnect', programs, ['reverb_server_restarted', 'collect'])
  inserted = replay.inserted_items(address, 'replay', timeout_s=10)
  wait_until(lambda: replay.inserted_items(address, 'replay', timeout_s=10) > inserted + 2,
             120, 'new inserts from the collector', programs,
             ['reverb_server_restarted', 'collect'])
  assert programs.processes['collect'].pid == collector_pid
  programs.check_alive('collect')
  # Inside its endless actor run the collector would only stop at SIGTERM's 20 s grace.
  programs.processes['collect'].kill()


# -- 5. Bad input fails fast with a message that names it --------------------------------


def test_unreachable_server_fails_within_seconds(programs):
  root = programs.root_dir
  address = f'127.0.0.1:{ports.free_port()}'
  for program in ('collect', 'train', 'eval'):
    programs.start(program, program, f'--root_dir={root}', f'--reverb_address={address}',
                   *gin_args(SMALL))
  for program in ('collect', 'train', 'eval'):
    # The 20 s connect timeout plus the import and set-up of three TF programs at once
    # (~30-50 s on a loaded 2-core machine); a program that waited on would sit out its
    # 600 s waits. The bound is the hang guard, the message says which wait ended it.
    code = programs.wait(program, timeout_s=300)
    log = programs.log(program)
    assert code != 0, log[-3000:]
    assert f"No Reverb server answered at '{address}' within 20 s" in log, log[-3000:]


def test_spec_mismatch_between_server_and_programs_fails_fast(programs):
  root = programs.root_dir
  address = programs.start_server('reverb_server', ports.free_port(), SMALL)
  common = [f'--root_dir={root}', f'--reverb_address={address}']
  # 8 envs: items of 8 envs instead of the server's 16.
  programs.start('collect', 'collect', *common,
                 *gin_args(SMALL + ['Experiment.num_envs=8']))
  # Another environment: 6 observations instead of 4.
  programs.start('train', 'train', *common,
                 *gin_args(SMALL + ['Experiment.env_name="Acrobot-v1"']))
  for name in ('collect', 'train'):
    code = programs.wait(name, timeout_s=300)  # the hang guard
    log = programs.log(name)
    assert code != 0, log[-3000:]
    assert f"error: Table 'replay' on {address} does not match this program" in log, \
        log[-3000:]
  assert ('experience/step_type: the table has int32[16, 2], this program expects '
          'int32[8, 2]') in programs.log('collect'), programs.log('collect')
  assert re.search(r'observation: the table has float32\[16, 2, 4\], this program expects '
                   r'float32\[16, 2, 6\]', programs.log('train')), programs.log('train')
  programs.check_alive('reverb_server')


PROGRAMS = ('reverb_server', 'collect', 'train', 'eval', 'launch')


BAD_INPUTS = {  # case -> (command-line argument, what its error line names)
    'missing gin file': ('--gin_file=no_such_config.gin',
                         "gin file 'no_such_config.gin' not found"),
    'malformed binding': ('--gin_bindings=Experiment.seed = (', 'Experiment.seed = ('),
    'failing import': ('--gin_bindings=import no_such_module_for_tfrl',
                       'no_such_module_for_tfrl'),
    'invalid Experiment value': ('--gin_bindings=TransitionReplay.n_step = 0',
                                 'TransitionReplay.n_step = 0: must be an integer >= 1'),
}
# Each case in at least one program: the four TF programs share config.parse_from_flags;
# the launcher parses on its own path, so it meets two cases. (Every case in every
# program cost 20 TensorFlow start-ups, ~50 s of the suite.)
BAD_INPUT_RUNS = [('reverb_server', 'missing gin file'), ('collect', 'malformed binding'),
                  ('train', 'failing import'), ('eval', 'invalid Experiment value'),
                  ('launch', 'missing gin file'), ('launch', 'invalid Experiment value')]


def test_bad_gin_input_is_one_line_and_status_2_in_every_program(programs):
  assert {program for program, _ in BAD_INPUT_RUNS} == set(PROGRAMS)
  assert {case for _, case in BAD_INPUT_RUNS} == set(BAD_INPUTS)
  for program, case in BAD_INPUT_RUNS:  # at once: each one's time is mostly TF's import
    argument = BAD_INPUTS[case][0]
    gin = [GIN] if argument.startswith('--gin_bindings') else []
    programs.start(f'{program}_{case}', program, f'--root_dir={programs.root_dir}', *gin,
                   argument)
  for program, case in BAD_INPUT_RUNS:
    name = f'{program}_{case}'
    code = programs.wait(name, timeout_s=300)
    log = programs.log(name)
    errors = [line for line in log.splitlines() if line.startswith('error: ')]
    assert code == 2, (name, log[-3000:])
    assert len(errors) == 1 and BAD_INPUTS[case][1] in errors[0], (name, log[-3000:])
    assert 'Traceback' not in log, (name, log[-3000:])


def test_the_launcher_uses_the_port_its_own_server_bound(tmp_path, reverb_server_factory):
  """The launcher lets its server pick the port as it binds it and reads it from the
  server: another job's server, named by a port file an earlier run left behind, is
  never the one its programs use (a port the launcher picked itself could be taken by
  another job in the seconds before its server bound it)."""
  from programs import run_launch  # pylint: disable=g-import-not-at-top
  foreign = reverb_server_factory([replay.uniform_table('other_job', 10, None)])
  root = tmp_path / 'job'
  root.mkdir()
  (root / 'reverb_server.port').write_text(str(foreign.port))  # stale
  result = run_launch(str(root), 'dqn_cartpole.gin', SMALL + ['Experiment.num_train_steps=32',
                                               'Experiment.target_return=None'], 1)
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  port = int((root / 'reverb_server.port').read_text())
  assert port != foreign.port
  assert f'on port {port} ' in (root / 'logs' / 'reverb_server.log').read_text()
  assert foreign.client.server_info()['other_job'].current_size == 0
  # The job spent its train steps: run again, it says so and starts no program.
  server_log = (root / 'logs' / 'reverb_server.log').read_text()
  again = run_launch(str(root), 'dqn_cartpole.gin', SMALL + ['Experiment.num_train_steps=32',
                                                            'Experiment.target_return=None'], 1)
  assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
  assert 'already ended at train step 32 (all its train steps)' in again.stderr, again.stderr
  assert 'Job already finished: last eval return' in again.stdout, again.stdout
  assert (root / 'logs' / 'reverb_server.log').read_text() == server_log

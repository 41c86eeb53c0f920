"""Sub-environments in worker processes (tfrl.envs.make(num_workers=...)): the same
TimeSteps and the same written experience as in-process envs, errors that name the
env, workers that end with the env."""
import json
import os
import sys

import numpy as np
import pytest
from tf_agents.trajectories import policy_step as policy_step_lib

import python_runs  # tests/python_runs.py

from tfrl import actors
import tfrl.envs
from tfrl.envs import worker_env

# A worker imports the module of a 'module:Id' env id itself, from the sys.path it
# inherits: tests/learners holds faulty_env.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), 'learners'))
BROKEN = 'faulty_env:tfrl_test/CartPoleThatRaises-v0'


def _assert_same(a, b, where):
  for x, y in zip(a, b):
    if isinstance(x, dict):
      for key in x:
        np.testing.assert_array_equal(x[key], y[key], err_msg=f'{where} {key}')
    else:
      np.testing.assert_array_equal(x, y, err_msg=where)


@pytest.mark.parametrize('env_id, num_envs, num_workers', [
    ('CartPole-v1', 8, 2),
    ('CartPole-v1', 7, 3),  # uneven shares: 3, 2, 2
    ('tfrl/PixelCatchDict-v0', 4, 2),  # a Dict of uint8 image and vector
])
def test_same_time_steps_as_in_process(env_id, num_envs, num_workers):
  local = tfrl.envs.make(env_id, num_envs=num_envs, seed=3)
  remote = tfrl.envs.make(env_id, num_envs=num_envs, seed=3, num_workers=num_workers)
  try:
    assert remote.time_step_spec() == local.time_step_spec()
    _assert_same(local.reset(seed=5), remote.reset(seed=5), 'reset')
    rng = np.random.default_rng(0)
    maximum = int(local.action_spec().maximum)
    for step in range(200):
      actions = rng.integers(0, maximum + 1, num_envs)
      _assert_same(local.step(actions), remote.step(actions), f'step {step}')
  finally:
    local.close()
    remote.close()


class Recorder:
  """Keeps every batched step a writer is given."""

  def __init__(self):
    self.steps = []

  def write(self, time_step, policy_step, next_time_step, policy_version, policy_state=()):
    self.steps.append((time_step, policy_step.action, next_time_step, policy_version))

  def reset(self):
    pass


def test_the_actor_writes_the_same_steps_with_workers():
  from tf_agents.policies import random_tf_policy  # pylint: disable=g-import-not-at-top
  recorded = []
  for num_workers in (0, 2):
    env = tfrl.envs.make('CartPole-v1', num_envs=6, seed=1, num_workers=num_workers)
    policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
    recorder = Recorder()
    actor = actors.Actor(env, policy, [recorder])
    # The random policy's actions differ between runs: feed both the same ones.
    rng = np.random.default_rng(7)
    actor._action_fn = lambda time_step, state: policy_step_lib.PolicyStep(  # pylint: disable=protected-access
        rng.integers(0, 2, 6), (), ())
    actor.run(40)
    actor.run(25)  # a second call goes on from where the first stopped
    env.close()
    recorded.append((recorder.steps, actor.env_steps))
  (local, local_env_steps), (remote, remote_env_steps) = recorded
  assert len(local) == len(remote) == 65 and local_env_steps == remote_env_steps
  for i, (a, b) in enumerate(zip(local, remote)):
    _assert_same(a[0], b[0], f'time_step {i}')
    np.testing.assert_array_equal(a[1], b[1])
    _assert_same(a[2], b[2], f'next_time_step {i}')


def test_an_env_error_in_a_worker_names_it():
  env = tfrl.envs.make(BROKEN, num_envs=2, seed=0, num_workers=1)
  try:
    with pytest.raises(worker_env.WorkerError,
                       match='(?s)failed while stepping.*CartPoleThatRaises broke at step'):
      for _ in range(40):
        env.step(np.zeros(2, np.int64))
  finally:
    env.close()


def test_close_ends_the_workers():
  env = tfrl.envs.make('CartPole-v1', num_envs=4, seed=0, num_workers=2)
  processes = list(env.vector_env._processes)  # pylint: disable=protected-access
  assert all(p.is_alive() for p in processes)
  env.close()
  assert not any(p.is_alive() for p in processes)


def test_a_close_with_a_timeout_kills_workers_that_are_still_busy():
  """A stopping collector gives its workers a moment, then kills them: here a worker
  still stepping when the close comes (the step sent, never waited for)."""
  env = tfrl.envs.make('CartPole-v1', num_envs=4, seed=0, num_workers=2)
  processes = list(env.vector_env._processes)  # pylint: disable=protected-access
  env.reset()
  env.vector_env.step_async(np.zeros(4, np.int64))
  env.close(timeout_s=0.0)
  assert not any(p.is_alive() for p in processes)


def test_worker_count_is_checked():
  with pytest.raises(ValueError, match='num_workers must be between 1 and num_envs'):
    tfrl.envs.make('CartPole-v1', num_envs=2, num_workers=3)


_PROBE_ENV = '''
import json, os, sys
import gymnasium as gym
from gymnasium.envs.classic_control import cartpole


class Probe(cartpole.CartPoleEnv):
  """CartPole that writes, as a worker builds it, whether TensorFlow is loaded there."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    with open(os.environ['PROBE_OUT'], 'w') as f:
      json.dump({'tensorflow': 'tensorflow' in sys.modules,
                 'main_imported': hasattr(sys.modules.get('__mp_main__'), 'MARKER')}, f)


gym.register('tfrl_test/Probe-v0', entry_point=Probe)
'''

_PROGRAM = '''
import sys
import tensorflow  # as every tfrl program's main module does
from tfrl.envs import worker_env
import tfrl.envs

MARKER = 'the main script ran here'

if __name__ == '__main__':
  if sys.argv[1] == 'program':
    worker_env.main_module_defines_no_envs()
  env = tfrl.envs.make('probe_env:tfrl_test/Probe-v0', num_envs=1, num_workers=1)
  env.close()
'''


@pytest.mark.integration
@pytest.mark.parametrize('declared', [True, False])
def test_workers_of_a_program_skip_its_main_module_and_tensorflow(tmp_path, declared):
  """A tfrl program (`learners/processes/program.py` declares it) spawns env workers that
  load no TensorFlow; a user's script, whose main module may define envs, still has it
  imported in its workers (and, importing TensorFlow, TensorFlow with it)."""
  (tmp_path / 'probe_env.py').write_text(_PROBE_ENV)
  script = tmp_path / 'main_script.py'
  script.write_text(_PROGRAM)
  out = tmp_path / 'probe.json'
  env = python_runs.base_env(PROBE_OUT=str(out),
                             PYTHONPATH=os.pathsep.join([python_runs.REPO, str(tmp_path)]))
  done = python_runs.run([str(script), 'program' if declared else 'script'], timeout=300,
                         env=env, cwd=str(tmp_path))
  assert done.returncode == 0, done.stderr[-3000:]
  probe = json.loads(out.read_text())
  assert probe == {'tensorflow': not declared, 'main_imported': not declared}, probe

"""The environment suites of tfrl's extras (atari, box2d, mujoco, minigrid) make through
`tfrl.envs.make` with the specs their configs expect, and a missing extra is one error
that names it."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tfrl import envs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _step_randomly(env, steps=20):
  spec = env.action_spec()
  rng = np.random.RandomState(0)
  shape = (env.num_envs,) + tuple(spec.shape)
  for _ in range(steps):
    if spec.dtype.is_integer:
      action = rng.randint(spec.minimum, spec.maximum + 1, shape)
    else:
      action = rng.uniform(spec.minimum, spec.maximum, shape).astype(np.float32)
    time_step = env.step(action)
  return time_step


def test_atari_ids_register_themselves_and_preprocess_to_stacked_uint8():
  env = envs.make('ALE/Pong-v5', num_envs=2, seed=0, atari=True)
  try:
    spec = env.observation_spec()
    assert (spec.shape, spec.dtype.name) == ((84, 84, 4), 'uint8')
    assert env.action_spec().maximum == 5  # Pong's 6 actions
    time_step = _step_randomly(env)
    assert time_step.observation.shape == (2, 84, 84, 4)
    assert time_step.observation.dtype == np.uint8
  finally:
    env.close()


def test_minigrid_keeps_the_image_and_direction_of_its_dict():
  env = envs.make('MiniGrid-DoorKey-5x5-v0', num_envs=2, seed=0,
                  observation_keys=('image', 'direction'))
  try:
    spec = env.observation_spec()
    assert set(spec) == {'image', 'direction'}
    assert (spec['image'].shape, spec['image'].dtype.name) == ((7, 7, 3), 'uint8')
    time_step = _step_randomly(env)
    assert time_step.observation['image'].shape == (2, 7, 7, 3)
  finally:
    env.close()
  with pytest.raises(ValueError, match=r"are not keys of the observation; it has \["):
    envs.make('MiniGrid-DoorKey-5x5-v0', observation_keys=('pixels',)).reset()


@pytest.mark.parametrize('env_id,observation_size,action_shape', [
    ('LunarLander-v3', 8, ()), ('HalfCheetah-v5', 17, (6,))])
def test_box2d_and_mujoco_envs(env_id, observation_size, action_shape):
  env = envs.make(env_id, num_envs=2, seed=0)
  try:
    assert env.observation_spec().shape == (observation_size,)
    assert tuple(env.action_spec().shape) == action_shape
    assert np.isfinite(_step_randomly(env).reward).all()
  finally:
    env.close()


_MISSING = textwrap.dedent('''
    import sys
    # As if the extras' packages were not installed: importing them fails.
    for name in ('Box2D', 'minigrid', 'ale_py'):
      sys.modules[name] = None
    from tfrl import envs
    for env_id in ('LunarLander-v3', 'MiniGrid-DoorKey-5x5-v0', 'ALE/Pong-v5'):
      try:
        envs.make(env_id)
      except envs.MissingExtraError as e:
        print('ERROR', str(e).splitlines()[0][:120])
''')


@pytest.mark.integration
def test_a_missing_extra_is_named():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = subprocess.run([sys.executable, '-c', _MISSING], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
  errors = [line for line in result.stdout.splitlines() if line.startswith('ERROR')]
  assert len(errors) == 3, result.stdout + result.stderr[-3000:]
  for error, extra in zip(errors, ('box2d', 'minigrid', 'atari')):
    assert f"pip install 'tfrl[{extra}]'" in error, error

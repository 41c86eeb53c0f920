"""Pixel environments: the toy catch envs, uint8 and Dict specs, frame stacking through
gymnasium's wrappers, and the Atari preset's wiring (without ale-py)."""
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl import envs
from tfrl.envs import toy

FIRST, MID, LAST = (int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST))


def test_pixel_catch_spec_is_a_uint8_image():
  with envs.make(toy.PIXEL_CATCH, num_envs=2, seed=0) as env:
    spec = env.observation_spec()
    assert isinstance(spec, tensor_spec.BoundedTensorSpec)
    assert (spec.shape, spec.dtype) == ((20, 10, 1), tf.uint8)
    # Uniform bounds become scalars (two numbers in specs and exports, not two images).
    assert (spec.minimum.shape, int(spec.minimum), int(spec.maximum)) == ((), 0, 255)
    assert env.action_spec().maximum == 2
    observation = env.reset().observation
    assert observation.dtype == np.uint8 and observation.shape == (2, 20, 10, 1)


def test_pixel_catch_dict_spec():
  with envs.make(toy.PIXEL_CATCH_DICT, num_envs=2, seed=0) as env:
    spec = env.observation_spec()
    assert set(spec) == {'image', 'paddle'}
    assert (spec['image'].shape, spec['image'].dtype) == ((20, 10, 1), tf.uint8)
    assert (spec['paddle'].shape, spec['paddle'].dtype) == ((1,), tf.float32)
    assert spec['image'].name == 'observation/image'
    observation = env.reset().observation
    assert observation['image'].dtype == np.uint8
    np.testing.assert_array_equal(observation['paddle'], [[0.5], [0.5]])
    # The image holds the ball only: one 2x2 block.
    assert (observation['image'] == 255).sum() == 2 * 4


def _columns(frame, cell=2):
  """(ball row, ball column, paddle column) read off a PixelCatch frame."""
  grid = frame[::cell, ::cell, 0] == 255
  ball = np.argwhere(grid[:-1])
  paddle = np.flatnonzero(grid[-1])
  return ball, paddle


@pytest.mark.parametrize('follow, reward', [(True, 1.0), (False, -1.0)])
def test_pixel_catch_game(follow, reward):
  toy.register()
  env = gym.make(toy.PIXEL_CATCH)
  frame, _ = env.reset(seed=3)
  ball, paddle = _columns(frame)
  ball_column = ball[0][1]
  total, steps, terminated = 0.0, 0, False
  while not terminated:
    if follow:
      action = toy.STAY + int(np.sign(ball_column - paddle[-1]))
    else:  # run to the wall farthest from the ball
      action = toy.LEFT if ball_column >= 2 else toy.RIGHT
    frame, r, terminated, truncated, _ = env.step(action)
    assert not truncated
    total += r
    steps += 1
    paddle = _columns(frame)[1] if steps < 9 else paddle
  assert steps == 9 and total == reward  # rows - 1 steps, one reward at the end


def test_frame_stack_is_channel_last_newest_last_and_keeps_uint8():
  with envs.make(toy.PIXEL_CATCH, num_envs=3, seed=0, frame_stack=3) as env:
    spec = env.observation_spec()
    assert (spec.shape, spec.dtype) == ((20, 10, 3), tf.uint8)
    first = env.reset().observation
    assert first.dtype == np.uint8
    # After a reset the stack holds the first frame three times.
    for k in (1, 2):
      np.testing.assert_array_equal(first[..., k], first[..., 0])
    second = env.step(np.ones(3, np.int64)).observation
    third = env.step(np.ones(3, np.int64)).observation
    np.testing.assert_array_equal(third[..., 1], second[..., 2])
    np.testing.assert_array_equal(third[..., 0], second[..., 1])
    assert not np.array_equal(third[..., 2], third[..., 1])  # the ball moved


def test_frame_stack_of_multichannel_images_groups_channels_by_frame():
  toy.register()
  env = gym.make(toy.PIXEL_CATCH, render_mode=None)
  rgb = gym.wrappers.TransformObservation(
      env, lambda x: np.repeat(x, 3, axis=-1),
      gym.spaces.Box(0, 255, (20, 10, 3), np.uint8))
  stacked = envs.stack_frames(rgb, 2)
  assert stacked.observation_space.shape == (20, 10, 6)
  assert stacked.observation_space.dtype == np.uint8
  stacked.reset(seed=0)
  previous = stacked.step(toy.STAY)[0]
  current = stacked.step(toy.STAY)[0]
  np.testing.assert_array_equal(current[..., :3], previous[..., 3:])


def test_frame_stack_of_vectors_and_bad_arguments():
  with envs.make('CartPole-v1', num_envs=2, seed=0, frame_stack=2) as env:
    assert env.observation_spec().shape == (2, 4)
  with pytest.raises(ValueError, match='frame_stack must be >= 0'):
    envs.make(toy.PIXEL_CATCH, frame_stack=-1)
  with pytest.raises(ValueError, match='frame_stack needs a Box observation'):
    envs.make(toy.PIXEL_CATCH_DICT, frame_stack=2)


class _FakeAle(gym.Env):
  """An env shaped like an ALE one (RGB 210 x 160 frames, NOOP first, `_frameskip`)."""

  def __init__(self, frameskip=4):
    self._frameskip = frameskip
    self.observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
    self.action_space = gym.spaces.Discrete(4)
    self._t = 0

  def get_action_meanings(self):
    return ['NOOP', 'FIRE', 'LEFT', 'RIGHT']

  def _frame(self):
    return np.full((210, 160, 3), self._t % 256, np.uint8)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._t = 0
    return self._frame(), {}

  def step(self, action):
    self._t += 1
    return self._frame(), 0.0, self._t >= 50, False, {}


class _StandInAtariPreprocessing(gym.ObservationWrapper):
  """What AtariPreprocessing makes of frames (84 x 84 grayscale uint8), without opencv;
  it checks what the real one checks of the env."""

  instances = []

  def __init__(self, env, **kwargs):
    super().__init__(env)
    assert not kwargs  # tfrl uses the wrapper's defaults
    if env.unwrapped._frameskip != 1:  # pylint: disable=protected-access
      raise ValueError('Disable frame-skipping in the original env.')
    self.observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    _StandInAtariPreprocessing.instances.append(self)

  def observation(self, observation):
    return np.full((84, 84), observation[0, 0, 0], np.uint8)


def test_atari_preset_wires_gymnasiums_preprocessing_and_stacks_four_frames(monkeypatch):
  if 'tfrl_test/FakeAle-v0' not in gym.registry:
    gym.register('tfrl_test/FakeAle-v0', entry_point=_FakeAle)
  monkeypatch.setattr(gym.wrappers, 'AtariPreprocessing', _StandInAtariPreprocessing)
  with envs.make('tfrl_test/FakeAle-v0', num_envs=2, seed=0, atari=True) as env:
    spec = env.observation_spec()
    assert (spec.shape, spec.dtype) == ((84, 84, 4), tf.uint8)
    assert len(_StandInAtariPreprocessing.instances) == 2  # one per sub-env
    env.reset()
    observation = env.step(np.zeros(2, np.int64)).observation
    assert observation.dtype == np.uint8
    np.testing.assert_array_equal(observation[0, 0, 0], [0, 0, 0, 1])  # newest last
  # Without the preset, the env keeps its own frame skip (which the wrapper refuses).
  with envs.make('tfrl_test/FakeAle-v0', num_envs=1) as env:
    assert env.vector_env.envs[0].unwrapped._frameskip == 4  # pylint: disable=protected-access


def test_importing_tfrl_envs_registers_nothing_until_an_id_names_a_toy_env():
  """As an env worker imports it (no TensorFlow): the package only defines; naming a
  'tfrl/' id registers the toy envs."""
  code = ('import sys; import gymnasium as gym; import tfrl.envs; '
          f'assert {toy.PIXEL_CATCH!r} not in gym.registry, "registered at import"; '
          'assert "tensorflow" not in sys.modules, "TensorFlow imported"; '
          f'tfrl.envs.check_registered({toy.PIXEL_CATCH!r}); '
          f'assert {toy.PIXEL_CATCH_DICT!r} in gym.registry')
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TFRL_NO_TENSORFLOW='1'))
  assert result.returncode == 0, result.stderr[-2000:]

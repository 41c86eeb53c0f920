"""Tests for tfrl.envs: gymnasium spaces as specs, vector envs as batched TimeSteps."""
import gymnasium as gym
import numpy as np
import psutil
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl import envs
from tfrl.envs import batched_env
from tfrl.envs import specs

FIRST, MID, LAST = (int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST))


def _reference_stream(env_id, seed, actions, **make_kwargs):
  """What one sub-env of `envs.make(env_id, seed=...)` must produce, from a plain env.

  The plain gymnasium env is stepped and reset by hand (no vector autoreset), following
  the tf-agents convention: after a LAST step comes a FIRST one (reward 0, discount 1)
  whose action is ignored; terminated ends have discount 0, truncated ones discount 1.

  Args:
    env_id: gymnasium id.
    seed: the seed of this sub-env (`seed + i` for sub-env i).
    actions: one action per step.
    **make_kwargs: passed to `gymnasium.make`.

  Returns:
    A list of (step_type, reward, discount, observation), the first from `reset()`.
  """
  env = gym.make(env_id, **make_kwargs)
  env.reset(seed=seed)  # What envs.make(..., seed=seed) does.
  observation, _ = env.reset()  # BatchedEnv.reset() continues the seeded stream.
  steps = [(FIRST, 0.0, 1.0, observation)]
  ended = False
  for action in actions:
    if ended:
      observation, _ = env.reset()
      steps.append((FIRST, 0.0, 1.0, observation))
      ended = False
    else:
      observation, reward, terminated, truncated, _ = env.step(action)
      ended = terminated or truncated
      steps.append((LAST if ended else MID, reward, 0.0 if terminated else 1.0, observation))
  env.close()
  return steps


def _run(env, actions):
  """Resets `env` and steps it with `actions` ([T, N, ...]); returns the T + 1 TimeSteps."""
  steps = [env.reset()]
  for action in actions:
    steps.append(env.step(action))
  return steps


def test_make_cartpole_specs_and_reset():
  with envs.make('CartPole-v1', num_envs=4, seed=0) as env:
    observation_spec = env.observation_spec()
    action_spec = env.action_spec()
    time_step = env.reset()

  assert env.num_envs == 4
  assert isinstance(observation_spec, tensor_spec.BoundedTensorSpec)
  assert observation_spec.shape == (4,)
  assert observation_spec.dtype == tf.float32
  assert isinstance(action_spec, tensor_spec.BoundedTensorSpec)
  assert action_spec.shape == ()
  assert action_spec.dtype == tf.int64
  assert (int(action_spec.minimum), int(action_spec.maximum)) == (0, 1)
  assert env.time_step_spec().observation == observation_spec
  np.testing.assert_array_equal(time_step.step_type, [FIRST] * 4)
  np.testing.assert_array_equal(time_step.reward, np.zeros(4, np.float32))
  np.testing.assert_array_equal(time_step.discount, np.ones(4, np.float32))
  assert time_step.reward.dtype == np.float32 and time_step.discount.dtype == np.float32
  assert time_step.observation.shape == (4, 4)
  assert time_step.observation.dtype == np.float32
  # CartPole starts every state variable uniformly in [-0.05, 0.05].
  assert np.all(np.abs(time_step.observation) <= 0.05)


@pytest.mark.parametrize('space, expected', [
    pytest.param(
        gym.spaces.Box(low=-1.0, high=2.0, shape=(2, 3), dtype=np.float64),
        tensor_spec.BoundedTensorSpec((2, 3), tf.float64, -1.0, 2.0, name='obs'),
        id='box'),
    pytest.param(
        gym.spaces.Box(low=np.array([0, -5]), high=np.array([255, 5]), dtype=np.int32),
        tensor_spec.BoundedTensorSpec((2,), tf.int32, [0, -5], [255, 5], name='obs'),
        id='box_int_per_dim_bounds'),
    pytest.param(
        gym.spaces.Discrete(3, start=-1),
        tensor_spec.BoundedTensorSpec((), tf.int64, -1, 1, name='obs'),
        id='discrete_with_start'),
    pytest.param(
        gym.spaces.MultiDiscrete([3, 5], start=[1, -2]),
        tensor_spec.BoundedTensorSpec((2,), tf.int64, [1, -2], [3, 2], name='obs'),
        id='multi_discrete'),
    pytest.param(
        gym.spaces.MultiBinary([2, 3]),
        tensor_spec.BoundedTensorSpec((2, 3), tf.int8, 0, 1, name='obs'),
        id='multi_binary'),
    pytest.param(
        gym.spaces.Dict({'position': gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                         'mode': gym.spaces.Discrete(4)}),
        {'position': tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0,
                                                   name='obs/position'),
         'mode': tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3, name='obs/mode')},
        id='dict'),
    pytest.param(
        gym.spaces.Tuple((gym.spaces.Discrete(2),
                          gym.spaces.Tuple((gym.spaces.MultiBinary(3),
                                            gym.spaces.Box(0.0, 1.0, (1,), np.float32))))),
        (tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1, name='obs/0'),
         (tensor_spec.BoundedTensorSpec((3,), tf.int8, 0, 1, name='obs/1/0'),
          tensor_spec.BoundedTensorSpec((1,), tf.float32, 0.0, 1.0, name='obs/1/1'))),
        id='nested_tuple'),
])
def test_space_to_spec(space, expected):
  spec = specs.space_to_spec(space, name='obs')

  tf.nest.assert_same_structure(spec, expected)
  for got, want in zip(tf.nest.flatten(spec), tf.nest.flatten(expected)):
    assert isinstance(got, tensor_spec.BoundedTensorSpec)
    assert (got.name, got.shape, got.dtype) == (want.name, want.shape, want.dtype)
    np.testing.assert_array_equal(got.minimum, want.minimum)
    np.testing.assert_array_equal(got.maximum, want.maximum)


@pytest.mark.parametrize('space, name', [
    (gym.spaces.Text(max_length=5), 'Text'),
    (gym.spaces.Sequence(gym.spaces.Discrete(2)), 'Sequence'),
    (gym.spaces.Dict({'ok': gym.spaces.Discrete(2), 'bad': gym.spaces.Text(3)}), 'Text'),
])
def test_space_to_spec_rejects_spaces_without_fixed_shape(space, name):
  with pytest.raises(TypeError, match=name):
    specs.space_to_spec(space)


def test_terminated_episode_ends_with_discount_zero_then_restarts():
  # Always pushing right makes the pole fall within a few dozen steps.
  actions = np.ones((60, 1), dtype=np.int64)
  with envs.make('CartPole-v1', num_envs=1, seed=3) as env:
    steps = _run(env, actions)
  step_types = np.array([s.step_type[0] for s in steps])
  end = int(np.flatnonzero(step_types == LAST)[0])
  reference = _reference_stream('CartPole-v1', 3, actions[:, 0])

  assert 1 < end < 60
  np.testing.assert_array_equal(step_types[1:end], MID)
  np.testing.assert_array_equal([s.reward[0] for s in steps[1:end + 1]], 1.0)
  np.testing.assert_array_equal([s.discount[0] for s in steps[:end]], 1.0)
  assert steps[end].discount[0] == 0.0  # terminated: do not bootstrap.
  after = steps[end + 1]
  assert (after.step_type[0], after.reward[0], after.discount[0]) == (FIRST, 0.0, 1.0)
  # The FIRST step is the next episode's reset observation, not a step from the end.
  assert reference[end + 1][0] == FIRST
  np.testing.assert_allclose(after.observation[0], reference[end + 1][3], rtol=1e-6)
  assert np.all(np.abs(after.observation) <= 0.05)
  assert steps[end + 2].step_type[0] == MID


def test_truncated_episode_ends_with_discount_one_then_restarts():
  # Alternating pushes keep the pole up well past the 5-step time limit.
  actions = np.tile(np.array([[0], [1]], dtype=np.int64), (4, 2))  # [8, 2]
  with envs.make('CartPole-v1', num_envs=2, seed=0, max_episode_steps=5) as env:
    steps = _run(env, actions)

  step_types = np.stack([s.step_type for s in steps])
  np.testing.assert_array_equal(step_types[:, 0], [FIRST, MID, MID, MID, MID, LAST,
                                                   FIRST, MID, MID])
  np.testing.assert_array_equal(step_types[:, 1], step_types[:, 0])
  np.testing.assert_array_equal(steps[5].reward, [1.0, 1.0])
  np.testing.assert_array_equal(steps[5].discount, [1.0, 1.0])  # truncated: bootstrap.
  np.testing.assert_array_equal(steps[6].reward, [0.0, 0.0])
  np.testing.assert_array_equal(steps[6].discount, [1.0, 1.0])
  for i in range(2):
    reference = _reference_stream('CartPole-v1', i, actions[:, i], max_episode_steps=5)
    np.testing.assert_allclose(steps[6].observation[i], reference[6][3], rtol=1e-6)
    assert not np.allclose(steps[6].observation[i], steps[0].observation[i])


def test_pendulum_time_limit_never_carries_reward_into_first_step():
  actions = np.zeros((7, 2, 1), dtype=np.float32)
  with envs.make('Pendulum-v1', num_envs=2, seed=1, max_episode_steps=3) as env:
    steps = _run(env, actions)

  step_types = np.stack([s.step_type for s in steps])
  rewards = np.stack([s.reward for s in steps])
  discounts = np.stack([s.discount for s in steps])
  expected_types = [FIRST, MID, MID, LAST, FIRST, MID, MID, LAST]
  np.testing.assert_array_equal(step_types, np.stack([expected_types] * 2, axis=1))
  np.testing.assert_array_equal(discounts, 1.0)  # Pendulum never terminates.
  np.testing.assert_array_equal(rewards[[0, 4]], 0.0)
  # Pendulum's rewards are strictly negative away from upright-and-still.
  assert np.all(rewards[[1, 2, 3, 5, 6, 7]] < 0.0)
  for i in range(2):
    reference = _reference_stream('Pendulum-v1', 1 + i, actions[:, i], max_episode_steps=3)
    np.testing.assert_allclose(rewards[:, i], [r for _, r, _, _ in reference], rtol=1e-5)
    np.testing.assert_allclose(steps[4].observation[i], reference[4][3], rtol=1e-5)


def test_envs_ending_on_different_steps_are_independent():
  num_steps = 40
  # Sub-env 0 pushes right, 1 pushes left (both fall quickly, at different steps),
  # 2 alternates and hits the time limit.
  actions = np.stack([np.ones(num_steps), np.zeros(num_steps),
                      np.arange(num_steps) % 2], axis=1).astype(np.int64)
  with envs.make('CartPole-v1', num_envs=3, seed=7, max_episode_steps=15) as env:
    steps = _run(env, actions)

  ends = []
  for i in range(3):
    reference = _reference_stream('CartPole-v1', 7 + i, actions[:, i], max_episode_steps=15)
    np.testing.assert_array_equal([s.step_type[i] for s in steps],
                                  [r[0] for r in reference], err_msg=f'env {i}')
    np.testing.assert_array_equal([s.reward[i] for s in steps], [r[1] for r in reference])
    np.testing.assert_array_equal([s.discount[i] for s in steps], [r[2] for r in reference])
    np.testing.assert_allclose(np.stack([s.observation[i] for s in steps]),
                               np.stack([r[3] for r in reference]), rtol=1e-6)
    ends.append(tuple(t for t, s in enumerate(steps) if s.step_type[i] == LAST))
  assert len(set(ends)) == 3, f'sub-envs should end on different steps: {ends}'
  assert all(ends), ends
  # Sub-env 2 was truncated (discount 1), the others terminated (discount 0).
  assert all(steps[t].discount[2] == 1.0 for t in ends[2])
  assert all(steps[t].discount[i] == 0.0 for i in (0, 1) for t in ends[i])


def test_unknown_environment_id_names_it_and_close_ids():
  with pytest.raises(envs.UnknownEnvironmentError) as error:
    envs.make('CartPole-v7')

  assert isinstance(error.value, ValueError)
  assert 'CartPole-v7' in str(error.value)
  assert 'CartPole-v1' in str(error.value)


def test_num_envs_below_one_is_rejected():
  with pytest.raises(ValueError, match='num_envs'):
    envs.make('CartPole-v1', num_envs=0)


def test_asynchronous_env_matches_synchronous_one():
  actions = np.array([[0, 1], [1, 0], [1, 1]], dtype=np.int64)
  with envs.make('CartPole-v1', num_envs=2, seed=5, asynchronous=True) as async_env:
    assert isinstance(async_env.vector_env, gym.vector.AsyncVectorEnv)
    # Spawned, not forked from this TensorFlow-threaded process (a forked worker died
    # before sending its spaces in CI), and without TensorFlow (it starts in a second).
    workers = [psutil.Process(p.pid) for p in async_env.vector_env.processes]
    assert all('spawn_main' in ' '.join(p.cmdline()) for p in workers), [
        p.cmdline() for p in workers]
    assert not any('tensorflow' in m.path for p in workers for m in p.memory_maps()), (
        'an async env worker loaded TensorFlow')
    async_steps = _run(async_env, actions)
  with envs.make('CartPole-v1', num_envs=2, seed=5) as sync_env:
    sync_steps = _run(sync_env, actions)

  for async_step, sync_step in zip(async_steps, sync_steps):
    assert async_step.observation.shape == (2, 4)
    assert async_step.step_type.shape == (2,)
    tf.nest.map_structure(np.testing.assert_array_equal, async_step, sync_step)


class NonFiniteEnv(gym.Env):
  """Observations {'pixels': uint8, 'pos': float32}, reward 1; NaN or inf on cue.

  Sub-env i of `envs.make(..., seed=0)` is first reset with seed i, which it keeps as
  its index. The sub-envs whose index is in `bad_envs` put `value` into `what`
  ('reward' or 'pos') at step `bad_step` (0: in the reset observation).
  """

  def __init__(self, bad_step=3, bad_envs=(0,), what='reward', value=np.nan):
    self.observation_space = gym.spaces.Dict({
        'pixels': gym.spaces.Box(0, 255, (2, 2), np.uint8),
        'pos': gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)})
    self.action_space = gym.spaces.Discrete(2)
    self._bad_step, self._bad_envs, self._what, self._value = (
        bad_step, bad_envs, what, value)
    self._index = None
    self._steps = 0

  def _obs(self):
    pos = np.zeros(2, np.float32)
    if self._what == 'pos' and self._is_bad():
      pos[1] = self._value
    return {'pixels': np.zeros((2, 2), np.uint8), 'pos': pos}

  def _is_bad(self):
    return self._steps == self._bad_step and self._index in self._bad_envs

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    if self._index is None:
      self._index = seed
    self._steps = 0
    return self._obs(), {}

  def step(self, action):
    self._steps += 1
    reward = self._value if self._what == 'reward' and self._is_bad() else 1.0
    return self._obs(), reward, False, False, {}


NON_FINITE_ID = 'TfrlTest/NonFinite-v0'
if NON_FINITE_ID not in gym.registry:
  gym.register(NON_FINITE_ID, entry_point=NonFiniteEnv, disable_env_checker=True)


@pytest.mark.parametrize('make_kwargs, message', [
    (dict(what='reward', bad_step=3, bad_envs=(2,)),
     "Env 'TfrlTest/NonFinite-v0' returned a non-finite reward (nan) in sub-env 2 at "
     'vector step 3; check the environment (tfrl stops here rather than train on it).'),
    (dict(what='reward', bad_step=2, bad_envs=(1, 3), value=-np.inf),
     'non-finite reward (-inf) in sub-envs 1, 3 at vector step 2;'),
    (dict(what='pos', bad_step=4, bad_envs=(0,), value=np.inf),
     "non-finite observation['pos'] (inf) in sub-env 0 at vector step 4;"),
], ids=['nan_reward', 'inf_reward_two_envs', 'inf_observation'])
def test_non_finite_reward_or_observation_raises_naming_where(make_kwargs, message):
  with envs.make(NON_FINITE_ID, num_envs=4, seed=0, **make_kwargs) as env:
    env.reset()
    actions = np.zeros(4, np.int64)
    for _ in range(make_kwargs['bad_step'] - 1):
      env.step(actions)  # Finite until then.
    with pytest.raises(batched_env.NonFiniteEnvError) as error:
      env.step(actions)

  assert isinstance(error.value, ValueError)
  assert message in str(error.value)


def test_non_finite_observation_at_reset_raises():
  with pytest.raises(batched_env.NonFiniteEnvError,
                     match=r"observation\['pos'\] \(nan\) in sub-env 1 at reset"):
    envs.make(NON_FINITE_ID, num_envs=2, seed=0, what='pos', bad_step=0, bad_envs=(1,))

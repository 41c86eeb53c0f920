"""The env case table (docs/architecture.md, Environments), run on both backends of
tfrl.envs.make.

Each case states what learners rely on from a batched env (step types, discounts,
rewards at episode boundaries, seeding, asynchronous stepping, Atari games and lives)
without comparing simulators: EnvPool's C++ envs and gymnasium's draw different random
streams, so observations are compared with each backend's own.
"""
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from learners import train_eval
from tfrl import actors
from tfrl import envs
from tfrl import export

FIRST, MID, LAST = (int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST))
BACKENDS = list(envs.BACKENDS)
ATARI_OPTIONS = dict(atari=True, terminal_on_life_loss=True, fire_reset=True,
                     clip_reward=True)


def _run(env, actions):
  """Resets `env`, steps it with `actions` ([T, N, ...]); stacks the T + 1 TimeSteps."""
  steps = [env.reset()]
  for action in actions:
    steps.append(env.step(action))
  return tf.nest.map_structure(lambda *xs: np.stack(xs), *steps)


@pytest.mark.parametrize('backend', BACKENDS)
def test_reset_gives_first_steps_with_zero_reward_and_discount_one(backend):
  with envs.make('CartPole-v1', num_envs=4, seed=0, backend=backend) as env:
    time_step = env.reset()
  np.testing.assert_array_equal(time_step.step_type, [FIRST] * 4)
  np.testing.assert_array_equal(time_step.reward, np.zeros(4, np.float32))
  np.testing.assert_array_equal(time_step.discount, np.ones(4, np.float32))
  assert time_step.observation.shape == (4, 4) and time_step.observation.dtype == np.float32
  assert np.all(np.abs(time_step.observation) <= 0.05)  # CartPole's initial states


@pytest.mark.parametrize('backend', BACKENDS)
def test_terminal_step_has_discount_zero_and_next_step_is_a_fresh_episode(backend):
  actions = np.ones((60, 1), np.int64)  # always right: the pole falls
  with envs.make('CartPole-v1', num_envs=1, seed=3, backend=backend) as env:
    steps = _run(env, actions)
  step_types = steps.step_type[:, 0]
  end = int(np.flatnonzero(step_types == LAST)[0])
  assert 1 < end < 60
  np.testing.assert_array_equal(step_types[1:end], MID)
  np.testing.assert_array_equal(steps.reward[1:end + 1, 0], 1.0)
  assert steps.discount[end, 0] == 0.0
  # The action after the end is ignored: a FIRST step from reset, reward 0, discount 1.
  assert (step_types[end + 1], steps.reward[end + 1, 0], steps.discount[end + 1, 0]) == (
      FIRST, 0.0, 1.0)
  assert np.all(np.abs(steps.observation[end + 1]) <= 0.05)
  assert step_types[end + 2] == MID


@pytest.mark.parametrize('backend', BACKENDS)
def test_time_limit_ends_with_discount_one(backend):
  actions = np.tile(np.array([[0], [1]], np.int64), (4, 2))  # alternate: stays up
  with envs.make('CartPole-v1', num_envs=2, seed=0, max_episode_steps=5,
                 backend=backend) as env:
    steps = _run(env, actions)
  np.testing.assert_array_equal(
      steps.step_type, np.stack([[FIRST, MID, MID, MID, MID, LAST, FIRST, MID, MID]] * 2, 1))
  np.testing.assert_array_equal(steps.discount[5], [1.0, 1.0])  # truncated: bootstrap
  np.testing.assert_array_equal(steps.reward[5:7], [[1.0, 1.0], [0.0, 0.0]])
  assert not np.allclose(steps.observation[6], steps.observation[0])  # a new episode


@pytest.mark.parametrize('backend', BACKENDS)
def test_no_reward_carried_into_the_first_step_after_a_time_limit(backend):
  actions = np.zeros((7, 2, 1), np.float32)
  with envs.make('Pendulum-v1', num_envs=2, seed=1, max_episode_steps=3,
                 backend=backend) as env:
    steps = _run(env, actions)
  np.testing.assert_array_equal(
      steps.step_type, np.stack([[FIRST, MID, MID, LAST, FIRST, MID, MID, LAST]] * 2, 1))
  np.testing.assert_array_equal(steps.discount, 1.0)  # Pendulum never terminates
  np.testing.assert_array_equal(steps.reward[[0, 4]], 0.0)
  assert np.all(steps.reward[[1, 2, 3, 5, 6, 7]] < 0.0)


@pytest.mark.parametrize('backend', BACKENDS)
def test_sub_envs_end_independently_and_boundaries_come_only_after_ends(backend):
  num_steps = 300
  actions = np.random.default_rng(0).integers(0, 2, (num_steps, 3))
  with envs.make('CartPole-v1', num_envs=3, seed=7, max_episode_steps=25,
                 backend=backend) as env:
    steps = _run(env, actions)
  step_types = steps.step_type
  # A FIRST step (after the reset) follows a LAST one, and only then: the pair is the
  # boundary writers skip, so no transition spans two episodes.
  np.testing.assert_array_equal(step_types[1:] == FIRST, step_types[:-1] == LAST)
  np.testing.assert_array_equal(steps.reward[1:][step_types[1:] == FIRST], 0.0)
  np.testing.assert_array_equal(steps.discount[step_types == FIRST], 1.0)
  ends = [tuple(np.flatnonzero(step_types[:, i] == LAST)) for i in range(3)]
  assert all(len(e) >= 10 for e in ends) and len(set(ends)) == 3, ends
  # Episode lengths never pass the limit; terminated ones have discount 0.
  for i in range(3):
    starts = np.flatnonzero(step_types[:, i] == FIRST)
    for start, end in zip(starts, ends[i]):
      assert end - start <= 25
      assert steps.discount[end, i] == (1.0 if end - start == 25 else 0.0)


@pytest.mark.parametrize('backend', BACKENDS)
def test_seeds_repeat_streams_and_give_each_sub_env_its_own(backend):
  actions = np.random.default_rng(1).integers(0, 2, (30, 3))

  def observations(seed):
    with envs.make('CartPole-v1', num_envs=3, seed=seed, backend=backend) as env:
      first = _run(env, actions).observation
      second = _run(env, actions).observation  # an unseeded reset continues the stream
    return first, second

  first, second = observations(5)
  again, _ = observations(5)
  other, _ = observations(6)
  np.testing.assert_array_equal(first, again)
  assert not np.allclose(first[0], second[0])
  assert not np.allclose(first[0, 0], first[0, 1])
  # Sub-env i of seed s starts as sub-env i - 1 of seed s + 1 (seeds s + i).
  np.testing.assert_array_equal(first[0, 1:], other[0, :2])


@pytest.mark.parametrize('backend', BACKENDS)
def test_asynchronous_steps_equal_synchronous_ones(backend):
  actions = np.random.default_rng(2).integers(0, 2, (40, 2))
  with envs.make('CartPole-v1', num_envs=2, seed=4, max_episode_steps=12,
                 backend=backend) as env:
    synchronous = _run(env, actions)
  with envs.make('CartPole-v1', num_envs=2, seed=4, max_episode_steps=12,
                 backend=backend) as env:
    steps = [env.reset()]
    for action in actions:
      env.step_async(action)
      steps.append(env.step_wait())
  tf.nest.map_structure(np.testing.assert_array_equal, synchronous,
                        tf.nest.map_structure(lambda *xs: np.stack(xs), *steps))


@pytest.mark.parametrize('backend', BACKENDS)
def test_mujoco_time_limit_and_float32_actions(backend):
  with envs.make('HalfCheetah-v5', num_envs=2, seed=0, max_episode_steps=10,
                 backend=backend) as env:
    assert env.action_spec().dtype == tf.float32 and env.action_spec().shape == (6,)
    steps = _run(env, np.zeros((12, 2, 6), np.float32))
  assert steps.observation.shape == (13, 2, 17)
  np.testing.assert_array_equal(steps.step_type[10], [LAST, LAST])
  np.testing.assert_array_equal(steps.discount[10], [1.0, 1.0])  # truncated
  np.testing.assert_array_equal(steps.step_type[11], [FIRST, FIRST])


@pytest.mark.parametrize('backend', BACKENDS)
def test_atari_lives_end_episodes_and_games_report_raw_scores(backend):
  num_steps = 700
  actions = np.random.default_rng(3).integers(0, 4, (num_steps, 2))
  with envs.make('ALE/Breakout-v5', num_envs=2, seed=0, backend=backend,
                 **ATARI_OPTIONS) as env:
    assert env.observation_spec().shape == (84, 84, 4)
    assert env.observation_spec().dtype == tf.uint8
    time_step = env.reset()
    lives_lost, clipped, games = np.zeros(2, int), np.zeros(2), []
    for action in actions:
      time_step = env.step(action)
      assert time_step.observation.shape == (2, 84, 84, 4)
      assert set(np.unique(time_step.reward)) <= {-1.0, 0.0, 1.0}  # clip_reward
      last = time_step.step_type == LAST
      np.testing.assert_array_equal(time_step.discount[last], 0.0)  # lost lives too
      lives_lost += last
      clipped += time_step.reward
      for i in np.flatnonzero(env.game_ends.ended):
        games.append((lives_lost[i], env.game_ends.returns[i], clipped[i],
                      env.game_ends.lengths[i]))
        lives_lost[i], clipped[i] = 0, 0.0
  assert len(games) >= 2, games
  for lives, raw_return, clipped_return, length in games:
    assert lives == 5  # a game of Breakout is 5 lives, each its own training episode
    assert raw_return >= clipped_return >= 0  # Breakout's bricks score 1, 4 or 7
    assert length >= 5 * 10


@pytest.mark.parametrize('backend', BACKENDS)
def test_atari_fire_reset_starts_every_life_for_a_policy_that_never_fires(backend):
  # NOOP only: without FIRE after each reset (a lost life's too) Breakout never
  # launches the ball and the game runs to its 108,000-frame limit.
  with envs.make('ALE/Breakout-v5', num_envs=2, seed=1, backend=backend,
                 **ATARI_OPTIONS) as env:
    env.reset()
    lives_lost, games = np.zeros(2, int), []
    for _ in range(600):
      time_step = env.step(np.zeros(2, np.int64))
      lives_lost += time_step.step_type == LAST
      games += [(lives_lost[i], env.game_ends.lengths[i])
                for i in np.flatnonzero(env.game_ends.ended)]
      lives_lost[env.game_ends.ended] = 0
  assert len(games) >= 2, games
  for lives, length in games:
    # 5 lives, each a ball launched and (mostly) missed: a few dozen steps each, where
    # a stalled game would run to 27,000.
    assert lives == 5 and 5 * 20 <= length <= 1000, games


@pytest.mark.parametrize('backend', BACKENDS)
def test_atari_clipped_rewards_alone_keep_lives_in_one_episode_and_score_games(backend):
  actions = np.random.default_rng(5).integers(0, 4, (900, 2))
  with envs.make('ALE/Breakout-v5', num_envs=2, seed=2, backend=backend, atari=True,
                 clip_reward=True) as env:
    env.reset()
    clipped, episodes, games = np.zeros(2), [], []
    for action in actions:
      time_step = env.step(action)
      clipped += time_step.reward
      episodes += [clipped[i] for i in np.flatnonzero(time_step.step_type == LAST)]
      games += list(env.game_ends.returns[env.game_ends.ended])
      clipped[time_step.step_type == LAST] = 0.0
  # No life ends an episode here: each episode is a whole game, scored raw.
  assert len(games) == len(episodes) >= 1, (games, episodes)
  assert all(raw >= clipped_sum for raw, clipped_sum in zip(games, episodes))


def test_envpool_specs_equal_gymnasium_ones():
  # Shapes and dtypes of both; the action bounds too (a squashed policy scales to
  # them). Observation bounds may differ: EnvPool's LunarLander has none.
  for env_id, options in [('CartPole-v1', {}), ('Pendulum-v1', {}),
                          ('LunarLander-v3', {}), ('HalfCheetah-v5', {}),
                          ('ALE/Pong-v5', ATARI_OPTIONS)]:
    with envs.make(env_id, seed=0, **options) as gymnasium_env, envs.make(
        env_id, seed=0, backend='envpool', **options) as envpool_env:
      for spec, other in [(gymnasium_env.observation_spec(), envpool_env.observation_spec()),
                          (gymnasium_env.action_spec(), envpool_env.action_spec())]:
        assert (spec.shape, spec.dtype) == (other.shape, other.dtype), env_id
      np.testing.assert_array_equal(gymnasium_env.action_spec().minimum,
                                    envpool_env.action_spec().minimum, err_msg=env_id)
      np.testing.assert_array_equal(gymnasium_env.action_spec().maximum,
                                    envpool_env.action_spec().maximum, err_msg=env_id)


def test_envpool_atari_takes_gymnasium_v5_sticky_actions_and_game_length():
  with envs.make('ALE/Pong-v5', backend='envpool', **ATARI_OPTIONS) as env:
    config = env.vector_env._pool.config  # pylint: disable=protected-access
  assert config['repeat_action_probability'] == 0.25
  assert config['max_episode_steps'] * config['frame_skip'] == 108_000
  assert gym.spec('ALE/Pong-v5').kwargs['repeat_action_probability'] == 0.25


@pytest.mark.parametrize('make_kwargs, message', [
    (dict(env_id='tfrl/PixelCatch-v0'), "EnvPool has no env 'tfrl/PixelCatch-v0'"),
    (dict(env_id='CartPole-v2'), 'Close ones it has: CartPole-v1'),
    (dict(env_id='ALE/Pong-v5'), 'use atari=True with the envpool backend'),
    (dict(env_id='CartPole-v1', num_workers=2), 'takes none of num_workers'),
    (dict(env_id='CartPole-v1', observation_indices=(0, 2)),
     'takes none of observation_indices'),
    (dict(env_id='CartPole-v1', frame_stack=4), 'stacks frames of Atari envs only'),
    (dict(env_id='CartPole-v1', not_an_option=1), 'has no option not_an_option'),
    (dict(env_id='CartPole-v1', clip_reward=True), 'clips Atari rewards only'),
    (dict(env_id='Pendulum-v1', normalize_reward=0.99), 'takes none of normalize_reward'),
    (dict(env_id=lambda: gym.make('CartPole-v1')), 'takes env ids only'),
], ids=['unknown_suite', 'close_id', 'atari_needs_atari', 'workers', 'indices',
        'frame_stack', 'option', 'clip_reward', 'normalize_reward', 'factory'])
def test_envpool_refuses_what_it_cannot_do_in_one_line(make_kwargs, message):
  env_id = make_kwargs.pop('env_id')
  with pytest.raises(envs.EnvPoolUnsupportedError, match=message) as error:
    envs.make(env_id, backend='envpool', **make_kwargs)
  assert '\n' not in str(error.value)


def test_unknown_backend_is_refused():
  with pytest.raises(ValueError, match="backend must be one of gymnasium, envpool"):
    envs.make('CartPole-v1', backend='brax')


@pytest.mark.integration
def test_a_ppo_job_on_envpool_solves_cartpole_and_its_export_plays_gymnasium_cartpole(
    tmp_path):
  result = train_eval.run(str(tmp_path / 'job'), ['ppo_cartpole.gin'], env_backend='envpool')
  assert result['reached_target'], result['history'][-3:]
  # The exported policy is the same SavedModel as from the gymnasium backend: it plays
  # gymnasium's own CartPole.
  with envs.make('CartPole-v1', num_envs=5, seed=1) as env:
    played = actors.Evaluator(env, export.load_policy(result['greedy_policy_dir']), 5,
                              seed=1).run()
  assert played['AverageReturn'] >= 475, played


@pytest.mark.integration
def test_a_ppo_atari_job_on_envpool_trains_reports_games_and_exports(tmp_path):
  result = train_eval.run(
      str(tmp_path / 'job'), ['ppo_atari.gin'], env_name='ALE/Breakout-v5',
      env_backend='envpool', env_workers=0, num_envs=4, num_train_steps=2,
      eval_interval=2, num_eval_episodes=1, target_return=None)
  assert result['train_step'] == 2
  final = result['history'][-1]
  assert final['env_steps'] >= 2 * 4 * 128 and np.isfinite(final['eval_return'])
  policy = export.load_policy(result['greedy_policy_dir'])
  with envs.make('ALE/Breakout-v5', seed=0, **ATARI_OPTIONS) as env:  # gymnasium's
    played = actors.Evaluator(env, policy, 1, seed=0).run()
  # One whole game (5 lives) of raw score.
  assert played['AverageEpisodeLength'] >= 5 * 10 and played['AverageReturn'] >= 0


class _ShuffledPool:
  """An EnvPool pool whose batches come back in another env order each time (as an
  asynchronous pool may return them)."""

  def __init__(self, pool):
    self._pool, self._rng = pool, np.random.default_rng(0)

  def __getattr__(self, name):
    return getattr(self._pool, name)

  def _shuffled(self, *outputs):
    order = self._rng.permutation(len(outputs[-1]['env_id']))
    info = {key: value[order] for key, value in outputs[-1].items() if key != 'players'}
    return tuple(x[order] for x in outputs[:-1]) + (info,)

  def reset(self):
    return self._shuffled(*self._pool.reset())

  def recv(self):
    return self._shuffled(*self._pool.recv())


def test_envpool_batches_are_put_back_in_env_order():
  actions = np.random.default_rng(4).integers(0, 2, (40, 4))
  with envs.make('CartPole-v1', num_envs=4, seed=2, max_episode_steps=9,
                 backend='envpool') as env:
    in_order = _run(env, actions)
  with envs.make('CartPole-v1', num_envs=4, seed=2, max_episode_steps=9,
                 backend='envpool') as env:
    vector_env = env.vector_env
    vector_env._pool = _ShuffledPool(vector_env._pool)  # pylint: disable=protected-access
    shuffled = _run(env, actions)
  tf.nest.map_structure(np.testing.assert_array_equal, in_order, shuffled)

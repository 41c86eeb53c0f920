"""RL-Zoo's AtariWrapper options (`tfrl.envs.atari_wrappers`) on a real ALE game:
a lost life ends the training episode but not the game, FIRE (then action 2) follows
every reset, rewards clip to their sign, and what tfrl reports (EpisodeStats through
the Actor, the Evaluator) is whole games' raw scores."""
import gymnasium as gym
import numpy as np
import pytest
from tf_agents.policies import fixed_policy
from tf_agents.trajectories import time_step as ts

from tfrl import actors
from tfrl import envs
from tfrl.envs import atari_wrappers

FIRST, MID, LAST = int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST)
BREAKOUT = 'ALE/Breakout-v5'
LIFE_OPTIONS = dict(atari=True, terminal_on_life_loss=True, fire_reset=True)
STEPS = 800  # NOOP Breakout: FIRE launches the ball; a game lasts 200-350 steps


def noop_policy(env, action=0):
  return fixed_policy.FixedPolicy(np.array(action, env.action_spec().dtype.as_numpy_dtype),
                                  env.time_step_spec(), env.action_spec())


def play(env, steps, seed=None):
  """NOOP steps of one env from a reset: per step its TimeStep, the ALE's lives and
  frame number after it, and the games `env.game_ends` reported."""
  ale = env.vector_env.envs[0].unwrapped.ale
  env.reset(seed=seed)
  records = []
  for _ in range(steps):
    step = env.step(np.zeros(1, np.int64))
    records.append(dict(step_type=int(step.step_type[0]), reward=float(step.reward[0]),
                        discount=float(step.discount[0]), lives=ale.lives(),
                        frame=ale.getEpisodeFrameNumber(), game=env.game_ends))
  return records


def games_of(records):
  """(return, length) of each whole game, from the time steps: rewards of its steps,
  and its agent steps, the wrappers' own included (2 at its start: FIRE and action
  2; 3 after each lost life: NOOP, FIRE, action 2)."""
  games, total, length = [], 0.0, 2
  for r in records:
    if r['step_type'] == FIRST:
      continue
    total += r['reward']
    length += 1
    if r['step_type'] == LAST and r['lives'] > 0:
      length += 3
    elif r['step_type'] == LAST:
      games.append((total, length))
      total, length = 0.0, 2
  return games


def test_a_lost_life_is_terminal_but_the_game_goes_on_and_scores_are_whole_games():
  with envs.make(BREAKOUT, num_envs=1, seed=0, **LIFE_OPTIONS) as env:
    records = play(env, STEPS)
  losses = [i for i, r in enumerate(records[:-1])
            if r['step_type'] == LAST and r['lives'] > 0]
  assert len(losses) >= 8
  for i in losses:
    lost, after = records[i], records[i + 1]
    assert lost['discount'] == 0.0 and lost['lives'] == records[i - 1]['lives'] - 1
    # The autoreset continues the game: same lives, 3 agent steps (12 frames) on.
    assert after['step_type'] == FIRST and after['lives'] == lost['lives']
    assert after['frame'] == lost['frame'] + 12
  games = games_of(records)
  assert len(games) >= 2
  reported = [(r['game'].returns[0], r['game'].lengths[0])
              for r in records if r['game'].ended[0]]
  assert reported == games
  # The game ends exactly where the ALE's lives run out.
  assert [i for i, r in enumerate(records) if r['game'].ended[0]] == [
      i for i, r in enumerate(records) if r['step_type'] == LAST and r['lives'] == 0]

  # The Actor's training-episode metrics count games, not lives.
  with envs.make(BREAKOUT, num_envs=1, seed=0, **LIFE_OPTIONS) as env:
    actor = actors.Actor(env, noop_policy(env))
    metrics = actor.run(STEPS)
  assert metrics['NumberOfEpisodes'] == len(games)
  assert metrics['AverageReturn'] == np.mean([g[0] for g in games])
  assert metrics['AverageEpisodeLength'] == np.mean([g[1] for g in games])


def test_the_evaluator_scores_whole_games():
  with envs.make(BREAKOUT, num_envs=1, **LIFE_OPTIONS) as env:
    result = actors.Evaluator(env, noop_policy(env), num_episodes=2, seed=3).run()
    games = games_of(play(env, STEPS, seed=3))  # the same two games
  assert result['returns'] == [g[0] for g in games[:2]]
  assert result['AverageEpisodeLength'] == np.mean([g[1] for g in games[:2]])


class _ActionRecorder(gym.Wrapper):

  def __init__(self, env):
    super().__init__(env)
    self.actions = []

  def step(self, action):
    self.actions.append(int(action))
    return self.env.step(action)


def test_fire_reset_presses_fire_then_action_2_after_every_reset():
  import ale_py  # pylint: disable=g-import-not-at-top,unused-import
  recorder = _ActionRecorder(gym.wrappers.AtariPreprocessing(
      gym.make(BREAKOUT, frameskip=1, repeat_action_probability=0.0)))
  env = atari_wrappers.wrap(recorder, terminal_on_life_loss=True, fire_reset=True)
  env.reset(seed=0)
  assert recorder.actions == [1, 2]
  recorder.actions.clear()
  while True:
    _, _, terminated, _, _ = env.step(0)
    if terminated:
      break
  assert env.unwrapped.ale.lives() == 4  # a life lost, the game on
  recorder.actions.clear()
  env.reset()
  assert recorder.actions == [0, 1, 2]  # the no-op of a lost life, then FIRE
  recorder.actions.clear()
  env.reset(seed=1)  # a seeded reset is a new game
  assert recorder.actions == [1, 2] and env.unwrapped.ale.lives() == 5
  # Life losses and FIRE are the ALE's: other envs refuse them.
  with pytest.raises(ValueError, match='terminal_on_life_loss and fire_reset need atari'):
    envs.make('CartPole-v1', fire_reset=True)


def test_clip_reward_trains_on_signs_and_reports_raw_returns():
  """Pendulum's rewards (-16 to 0): the time steps carry their sign, the returns
  reported are those of the same episodes unclipped."""
  runs = {}
  for clip in (False, True):
    with envs.make('Pendulum-v1', num_envs=2, seed=0, clip_reward=clip) as env:
      rewards = []

      class Recorder:
        def write(self, time_step, policy_step, next_time_step, *args, **kwargs):
          rewards.append(next_time_step.reward.copy())

        def reset(self):
          pass

      actor = actors.Actor(env, noop_policy(env, [0.5]), [Recorder()])
      metrics = actor.run(450)  # 2 episodes of 200 steps per env
      runs[clip] = np.array(rewards), metrics
  raw, raw_metrics = runs[False]
  clipped, reported = runs[True]
  assert set(np.unique(clipped)) <= {-1.0, 0.0, 1.0}
  np.testing.assert_array_equal(clipped, np.sign(raw))
  assert reported['NumberOfEpisodes'] == 4
  np.testing.assert_allclose(reported['AverageReturn'], raw_metrics['AverageReturn'],
                             rtol=1e-6)
  # Raw scores: every clipped episode's return is -200 at most, so a mean below that
  # can only come from the raw rewards.
  assert reported['AverageReturn'] < -200


def test_game_scores_travel_through_env_workers():
  kinds = {}
  for workers in (0, 2):
    with envs.make(BREAKOUT, num_envs=2, seed=0, num_workers=workers,
                   **LIFE_OPTIONS) as env:
      env.reset()
      ends = []
      for _ in range(STEPS):
        env.step(np.zeros(2, np.int64))
        ends.append(tuple(np.where(env.game_ends.ended, env.game_ends.returns, np.nan)))
      kinds[workers] = ends
  assert np.sum(~np.isnan(kinds[0])) >= 2
  np.testing.assert_array_equal(kinds[2], kinds[0])

"""RL-Zoo's Atari training options (SB3's AtariWrapper), and whole-game scores.

`tfrl.envs.make(atari=True, ...)` takes three options of SB3's AtariWrapper on top of
gymnasium's AtariPreprocessing (which already does its no-op starts, frame skip with
max-pooling and 84 x 84 grayscale):

- `terminal_on_life_loss` (EpisodicLifeEnv): a lost life ends the training episode
  (terminated: the learner does not bootstrap past it) while the game goes on: the
  autoreset that follows takes one no-op step instead of resetting the game, which is
  reset only when it is really over.
- `fire_reset` (FireResetEnv): for games whose action 1 is FIRE (Breakout, Pong...),
  every reset, a life loss's included, is followed by FIRE and action 2, so the game
  starts without waiting on the agent to launch it.
- `clip_reward` (ClipRewardEnv): rewards are their sign, -1, 0 or 1.

Scores stay whole games' raw scores, as SB3's Monitor (under its AtariWrapper) reports
them: `GameScore`, the innermost of these wrappers, sums the game's unclipped rewards
and steps (the wrappers' own reset steps included) and puts them in the info of the
step that ends the game. `BatchedEnv.game_ends` reads them, and tfrl's episode metrics
(`tfrl.metrics.EpisodeStats`, `tfrl.actors.Evaluator`) count games, not lives.

Only the reset that follows a lost life continues the game, and only when it has no
seed or options: a reset with either (a vector env's own `reset(seed=...)`), or at any
other time, starts a new game.
"""
from typing import Any, Dict, NamedTuple

import gymnasium as gym
import numpy as np

GAME_RETURN = 'game_return'
GAME_LENGTH = 'game_length'
# The info keys a vector env makes of them (values and gymnasium's presence masks).
GAME_INFO_KEYS = (GAME_RETURN, '_' + GAME_RETURN, GAME_LENGTH, '_' + GAME_LENGTH)
_FIRE = 1


class GameEnds(NamedTuple):
  """The games that ended at one vector step.

  Attributes:
    ended: bool [num_envs], True where a game ended.
    returns: float64 [num_envs], the game's raw return where it ended.
    lengths: int64 [num_envs], its length in agent steps where it ended.
  """
  ended: np.ndarray
  returns: np.ndarray
  lengths: np.ndarray


def game_ends(infos: Dict[str, Any], num_envs: int) -> GameEnds:
  """The games that ended, read from a vector env step's infos."""
  mask = infos.get('_' + GAME_RETURN)
  if mask is None:
    return GameEnds(np.zeros(num_envs, bool), np.zeros(num_envs), np.zeros(num_envs, int))
  return GameEnds(np.asarray(mask, bool), np.asarray(infos[GAME_RETURN], np.float64),
                  np.asarray(infos[GAME_LENGTH], np.int64))


def _with_game_end(info: Dict[str, Any], step_info: Dict[str, Any]) -> Dict[str, Any]:
  """`info` plus the game end a wrapper's own step reported (else it would be lost)."""
  if GAME_RETURN not in step_info:
    return info
  return dict(info, **{key: step_info[key] for key in (GAME_RETURN, GAME_LENGTH)})


class GameScore(gym.Wrapper):
  """Sums the game's raw rewards and steps; the step that ends it reports both in its
  info (`GAME_RETURN`, `GAME_LENGTH`)."""

  def __init__(self, env: gym.Env):
    super().__init__(env)
    self._return, self._length = 0.0, 0

  def reset(self, **kwargs):
    self._return, self._length = 0.0, 0
    return self.env.reset(**kwargs)

  def step(self, action):
    observation, reward, terminated, truncated, info = self.env.step(action)
    self._return += float(reward)
    self._length += 1
    if terminated or truncated:
      info = dict(info, **{GAME_RETURN: self._return, GAME_LENGTH: self._length})
    return observation, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
  """A lost life is terminal; the game is reset only when it is over (see the module
  docstring)."""

  def __init__(self, env: gym.Env):
    super().__init__(env)
    self._lives = 0
    self._life_lost = False  # the last step lost a life and the game goes on

  def _ale_lives(self) -> int:
    return int(self.env.unwrapped.ale.lives())

  def step(self, action):
    observation, reward, terminated, truncated, info = self.env.step(action)
    lives = self._ale_lives()
    # Lives above 0 only: some games sit at 0 lives for frames before the game ends.
    self._life_lost = 0 < lives < self._lives and not (terminated or truncated)
    self._lives = lives
    return observation, reward, terminated or self._life_lost, truncated, info

  def reset(self, **kwargs):
    if not self._life_lost or kwargs.get('seed') is not None or kwargs.get('options'):
      observation, info = self.env.reset(**kwargs)
    else:  # a lost life: one no-op step on from where it was lost
      observation, _, terminated, truncated, step_info = self.env.step(0)
      info = _with_game_end({}, step_info)
      if terminated or truncated:
        observation, reset_info = self.env.reset()
        info = _with_game_end(reset_info, step_info)
    self._life_lost = False
    self._lives = self._ale_lives()
    return observation, info


def check_fire_is_action_one(meanings, name: str) -> None:
  """Raises ValueError unless action 1 of `meanings` (at least 3) is FIRE, as
  FireResetEnv requires."""
  if len(meanings) < 3 or meanings[_FIRE] != 'FIRE':
    raise ValueError(f'fire_reset needs FIRE as action 1 of at least 3 actions; '
                     f'{name} has {meanings}.')


class FireReset(gym.Wrapper):
  """Presses FIRE, then action 2, after every reset (see the module docstring).

  Raises:
    ValueError: (at construction) action 1 is not FIRE or there are fewer than 3
      actions.
  """

  def __init__(self, env: gym.Env):
    super().__init__(env)
    check_fire_is_action_one(env.unwrapped.get_action_meanings(),
                             env.spec.id if env.spec else str(env))

  def reset(self, **kwargs):
    observation, info = self.env.reset(**kwargs)
    for action in (_FIRE, 2):
      observation, _, terminated, truncated, step_info = self.env.step(action)
      info = _with_game_end(info, step_info)
      if terminated or truncated:
        observation, reset_info = self.env.reset()
        info = _with_game_end(reset_info, step_info)
    return observation, info


class ClipReward(gym.RewardWrapper):
  """Rewards become their sign: -1, 0 or 1."""

  def reward(self, reward):
    return float(np.sign(reward))


def has_fire(env: gym.Env) -> bool:
  """Whether the game has a FIRE action (SB3 presses it on reset only for those)."""
  return 'FIRE' in env.unwrapped.get_action_meanings()


def wrap(env: gym.Env, terminal_on_life_loss: bool = False, fire_reset: bool = False,
         clip_reward: bool = False) -> gym.Env:
  """Wraps an (AtariPreprocessing'd) env with the options asked for, in AtariWrapper's
  order. Put a `GameScore` under them to keep scores whole raw games (`tfrl.envs.make`
  does).

  Args:
    env: the env; terminal_on_life_loss and fire_reset need an ALE env under it.
    terminal_on_life_loss: see `EpisodicLife`.
    fire_reset: see `FireReset`; games without FIRE are left as they are.
    clip_reward: see `ClipReward`.

  Returns:
    The wrapped env (`env` itself when no option is set).
  """
  if terminal_on_life_loss:
    env = EpisodicLife(env)
  if fire_reset and has_fire(env):
    env = FireReset(env)
  if clip_reward:
    env = ClipReward(env)
  return env

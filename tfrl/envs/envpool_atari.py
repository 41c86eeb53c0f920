"""RL-Zoo's AtariWrapper on EnvPool's Atari envs, as the gymnasium backend has it.

`tfrl.envs.atari_wrappers` gives the gymnasium backend SB3's EpisodicLifeEnv,
FireResetEnv and ClipRewardEnv. EnvPool's own options differ where it matters: its
`use_fire_reset` presses FIRE for a single frame, which Breakout ignores (measured: a
policy that never fires never starts the game, and its evaluation runs to the
108,000-frame limit), and its `episodic_life` resets straight after a lost life, where
SB3 takes a no-op step and then FIRE. So `AtariGames` steps EnvPool's plain Atari envs
(no episodic life, no fire reset; rewards clipped by EnvPool, which also reports the raw
ones) and does what the wrappers do itself, sub-env by sub-env:

- a lost life (lives dropping, and above 0) ends the training episode (terminated)
  while the game goes on; the next step, whose action the autoreset ignores, is one
  no-op step (EpisodicLifeEnv's reset);
- after every reset (a game's start, and that no-op step after a lost life) FIRE and
  then action 2 are pressed, in games whose action 1 is FIRE (FireResetEnv);
- each game's raw return and length (every env step of it, these wrapper steps
  included) are reported when it ends, as `atari_wrappers.GameScore` reports them.

Those extra steps belong to one sub-env only, so the pool returns one env per `recv`
(EnvPool's batch_size 1) and the extra steps go to the sub-envs that need them after
each vector step. The TimeSteps follow the env case table on both backends
(tests/envs/test_env_backends.py).
"""
from typing import Any, Dict, List, Optional, Sequence, Union

import gymnasium as gym
import numpy as np

from tfrl.envs import atari_wrappers
from tfrl.envs import envpool_env
from tfrl.envs import registry

_NOOP, _FIRE = 0, 1


class _Result:
  """One sub-env's step as the pool returned it (arrays of one row)."""
  __slots__ = ('observation', 'reward', 'raw_reward', 'game_over', 'truncated', 'lives')

  def __init__(self, observation, reward, terminated, truncated, info):
    self.observation = observation[0]
    self.reward = float(reward[0])
    self.raw_reward = float(info['reward'][0])
    # Without EnvPool's episodic life, terminated is the game's end.
    self.game_over = bool(terminated[0]) or bool(info['terminated'][0])
    self.truncated = bool(truncated[0])
    self.lives = int(info['lives'][0])

  @property
  def ended(self) -> bool:
    """The game ended (over, or at the frame limit): EnvPool resets it next step."""
    return self.game_over or self.truncated


def _game_has_fire(env_id: str) -> bool:
  """Whether the game's action 1 is FIRE (of at least 3), as FireResetEnv requires;
  read from ale-py's minimal action set (the 'atari' extra).

  Raises:
    ValueError: the game has FIRE elsewhere than action 1 (as FireReset raises).
  """
  registry.check_registered(env_id)  # imports ale_py (or names the extra to install)
  env = gym.make(env_id)
  try:
    meanings = env.unwrapped.get_action_meanings()
  finally:
    env.close()
  if 'FIRE' not in meanings:
    return False
  atari_wrappers.check_fire_is_action_one(meanings, env_id)
  return True


class AtariGames(envpool_env.EnvPoolVectorEnv):
  """EnvPool Atari envs with RL-Zoo's AtariWrapper options; see the module docstring."""

  game_scores = True
  _per_env = True

  def __init__(self, env_id: str, num_envs: int, terminal_on_life_loss: bool = False,
               fire_reset: bool = False, seed: Optional[int] = None, **kwargs):
    """Makes the pool.

    Args:
      env_id: an ALE id ('ALE/Breakout-v5').
      num_envs: sub-environments.
      terminal_on_life_loss: a lost life ends the training episode.
      fire_reset: FIRE, then action 2, after every reset (games with FIRE only).
      seed: the pool's seed (sub-env i: seed + i).
      **kwargs: `EnvPoolVectorEnv`'s (atari, frame_stack, clip_reward, EnvPool's own).

    Raises:
      ValueError: fire_reset on a game whose FIRE is not action 1.
    """
    super().__init__(env_id, num_envs, seed=seed, **kwargs)
    self._life_loss_ends = terminal_on_life_loss
    self._fire = fire_reset and _game_has_fire(env_id)
    n = self.num_envs
    self._lives = np.zeros(n, np.int64)
    self._game_return = np.zeros(n)
    self._game_length = np.zeros(n, np.int64)
    # What the last step left each sub-env: its game ended (EnvPool resets it at the
    # next send), or a life was lost (the next step is the no-op step).
    self._game_ended = np.zeros(n, bool)
    self._life_lost = np.zeros(n, bool)
    self._sent: Optional[np.ndarray] = None

  # -- the pool, one sub-env per result -----------------------------------------------

  def _receive(self, count: int) -> Dict[int, _Result]:
    results = {}
    for _ in range(count):
      observation, reward, terminated, truncated, info = self._pool.recv()
      results[int(info['env_id'][0])] = _Result(observation, reward, terminated,
                                                 truncated, info)
    return results

  def _step_some(self, env_ids: List[int], action: int) -> Dict[int, _Result]:
    self._pool.send(np.full(len(env_ids), action, np.int32),
                    np.asarray(env_ids, np.int32))
    return self._receive(len(env_ids))

  # -- the wrappers' own steps ---------------------------------------------------------

  def _count(self, i: int, result: _Result, ended: Dict[int, tuple]) -> None:
    """Adds an env step of sub-env i's game to its score; a game that ended with it
    goes to `ended` (sub-env -> (raw return, length)) and the next starts at 0."""
    self._game_return[i] += result.raw_reward
    self._game_length[i] += 1
    self._lives[i] = result.lives
    if result.ended:
      ended[i] = (self._game_return[i], int(self._game_length[i]))
      self._game_return[i], self._game_length[i] = 0.0, 0

  def _after_reset(self, env_ids: List[int], results: Dict[int, _Result],
                   ended: Dict[int, tuple]) -> None:
    """FIRE then action 2 for `env_ids`, whose results (in `results`) are resets;
    a game that ends meanwhile is reset and fired again (FireResetEnv's loop)."""
    pending = list(env_ids)
    while self._fire and pending:
      for action in (_FIRE, 2):
        stepped = self._step_some(pending, action)
        for i, result in stepped.items():
          self._count(i, result, ended)
          results[i] = result
        over = [i for i in pending if stepped[i].ended]
        if over:  # reset those (EnvPool ignores the action), then fire again
          for i, result in self._step_some(over, _NOOP).items():
            results[i] = result
            self._lives[i] = result.lives
          pending = over
          break
      else:
        pending = []

  # -- the gymnasium vector env ---------------------------------------------------------

  def reset(self, *, seed: Union[int, Sequence[int], None] = None,
            options: Optional[Dict[str, Any]] = None):
    """Resets every sub-env (a new game each, fired where fire_reset); a seed starts a
    fresh pool with it (see `EnvPoolVectorEnv.reset`)."""
    self._reseed(seed, options)
    self._pool.async_reset()
    results = self._receive(self.num_envs)
    self._game_return[:], self._game_length[:] = 0.0, 0
    self._game_ended[:], self._life_lost[:] = False, False
    self._lives[:] = [results[i].lives for i in range(self.num_envs)]
    self._after_reset(list(range(self.num_envs)), results, {})
    return self._observations(results), {}

  def step_async(self, actions) -> None:
    """Sends each sub-env its action: the agent's, or the no-op step after a lost life
    (the autoreset step, whose action tfrl ignores)."""
    self._stepped = True
    actions = np.where(self._life_lost, _NOOP, np.asarray(actions)).astype(np.int32)
    self._pool.send(actions, self._env_ids)
    self._sent = actions

  def step_wait(self):
    """Receives the step, takes the wrappers' steps, and returns (obs, reward,
    terminated, truncated, infos) with the games that ended in the infos."""
    if self._sent is None:
      raise RuntimeError('step_wait called without step_async.')
    self._sent = None
    results = self._receive(self.num_envs)
    ended: Dict[int, tuple] = {}
    n = self.num_envs
    reward, terminated, truncated = np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(
        n, bool)
    restarted = []  # sub-envs whose step was a reset: fired after
    for i in range(n):
      result = results[i]
      if self._game_ended[i]:  # EnvPool reset this game: a new one starts
        self._lives[i] = result.lives
        self._game_ended[i] = False
        restarted.append(i)
        continue
      lives_before = self._lives[i]
      self._count(i, result, ended)
      if self._life_lost[i]:  # the no-op step after a lost life: the reset of the game
        self._life_lost[i] = False
        if result.ended:  # (rare) the no-op step ended the game: a new one, at once
          results[i] = self._step_some([i], _NOOP)[i]
          self._lives[i] = results[i].lives
        restarted.append(i)
        continue
      reward[i] = result.reward
      truncated[i] = result.truncated
      terminated[i] = result.game_over
      if result.ended:
        self._game_ended[i] = True
      elif self._life_loss_ends and 0 < result.lives < lives_before:
        terminated[i] = True
        self._life_lost[i] = True
    self._after_reset(restarted, results, ended)
    return self._observations(results), reward, terminated, truncated, self._infos(ended)

  def _observations(self, results: Dict[int, _Result]) -> np.ndarray:
    stacked = np.stack([results[i].observation for i in range(self.num_envs)])
    return np.ascontiguousarray(stacked.transpose(0, 2, 3, 1))  # [N, 84, 84, frames]

  def _infos(self, ended: Dict[int, tuple]) -> Dict[str, Any]:
    """The games that ended at this step, as `atari_wrappers.GameScore` reports them."""
    mask = np.zeros(self.num_envs, bool)
    returns, lengths = np.zeros(self.num_envs), np.zeros(self.num_envs, np.int64)
    for i, (game_return, length) in ended.items():
      mask[i], returns[i], lengths[i] = True, game_return, length
    return {atari_wrappers.GAME_RETURN: returns, '_' + atari_wrappers.GAME_RETURN: mask,
            atari_wrappers.GAME_LENGTH: lengths,
            '_' + atari_wrappers.GAME_LENGTH: mask.copy()}

"""EnvPool as a backend of `tfrl.envs.make` (`backend='envpool'`, the 'envpool' extra).

EnvPool steps a batch of C++ environments in its own thread pool. `EnvPoolVectorEnv`
shows such a pool as a gymnasium vector env with the semantics tfrl's `BatchedEnv`
reads from gymnasium's own (the env case table in docs/architecture.md, tested on both
backends in tests/envs/test_env_backends.py):

- next-step autoreset: the step after an episode's end ignores its action and returns
  the new episode's first observation with reward 0 (EnvPool does this natively);
- `terminated` and `truncated` kept apart, so a time limit bootstraps and a true
  terminal does not;
- seeds: `reset(seed=s)` seeds sub-env i with s + i (EnvPool's own rule, gymnasium's
  too), a list seeds each; an unseeded reset continues the stream;
- `step_async` sends the actions and returns at once, so the envs step in EnvPool's
  threads while the Actor's policy and Reverb writer run; `step_wait` receives.

Atari ids ('ALE/Breakout-v5') need `atari=True`: EnvPool's Atari envs preprocess
themselves as gymnasium's AtariPreprocessing does (no-op starts up to 30, frame skip 4
with max-pooling, 84 x 84 grayscale with area interpolation, 4 stacked frames). Their
frames come channel-first and are transposed here to tfrl's [84, 84, 4]. ALE's v5 ids
keep sticky actions (repeat_action_probability 0.25, EnvPool's default is 0) and end
games at 108,000 frames, as gymnasium's do. RL-Zoo's AtariWrapper options are
`tfrl.envs.envpool_atari`'s, not EnvPool's own: its `use_fire_reset` presses FIRE for
one frame, which Breakout ignores (an untrained policy then never starts a game, and an
evaluation runs to the 108,000-frame limit), and its `episodic_life` cannot be followed
by the no-op and FIRE steps SB3's wrappers take after a lost life.
"""
import difflib
import warnings
from typing import Any, Dict, List, Optional, Sequence, Union

import gymnasium as gym
import numpy as np

from tfrl.envs import registry

ATARI_PREFIX = 'ALE/'
# gymnasium's ALE v5 ids: sticky actions with this probability (ale-py's registration).
_V5_STICKY_ACTIONS = 0.25


class EnvPoolUnsupportedError(ValueError):
  """An env id or an option that the EnvPool backend does not have."""


def import_envpool():
  """Imports envpool, or raises MissingExtraError naming the 'envpool' extra."""
  try:
    import envpool  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise registry.missing_extra("backend='envpool'", 'envpool', e) from e
  return envpool


def task_id(env_id: str, atari: bool) -> str:
  """EnvPool's id of a gymnasium id ('ALE/Breakout-v5' -> 'Breakout-v5').

  Raises:
    MissingExtraError: envpool is not installed.
    EnvPoolUnsupportedError: EnvPool has no such env (names close ids it has), or an
      Atari id without atari=True.
  """
  envpool = import_envpool()
  is_atari = env_id.startswith(ATARI_PREFIX)
  if is_atari and not atari:
    raise EnvPoolUnsupportedError(
        f"{env_id}: EnvPool's Atari envs are always preprocessed (84 x 84 grayscale, "
        'frame skip 4, 4 stacked frames): use atari=True with the envpool backend.')
  if atari and not is_atari:
    raise EnvPoolUnsupportedError(f'atari=True needs an ALE id (ALE/<Game>-v5), got '
                                  f'{env_id!r}.')
  name = env_id[len(ATARI_PREFIX):] if is_atari else env_id
  known = envpool.list_all_envs()
  if name not in known:
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = f' Close ones it has: {", ".join(close)}.' if close else ''
    raise EnvPoolUnsupportedError(
        f'EnvPool has no env {env_id!r}.{hint} Use the gymnasium backend for it.')
  return name


def _float32_actions(space: gym.Space) -> gym.Space:
  """A float64 Box action space as float32 (gymnasium's MuJoCo envs take float32
  actions; the specs, hence the exported policies, stay the same on both backends)."""
  if isinstance(space, gym.spaces.Box) and space.dtype == np.float64:
    return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32),
                          space.shape, np.float32)
  return space


class EnvPoolVectorEnv(gym.vector.VectorEnv):
  """A gymnasium vector env (next-step autoreset) over an EnvPool pool; see the module
  docstring."""

  metadata = {'autoreset_mode': gym.vector.AutoresetMode.NEXT_STEP}

  # Whether whole games' scores are reported (`BatchedEnv.game_ends`): with the
  # AtariWrapper options (`envpool_atari.AtariGames`).
  game_scores = False
  # Results the pool returns per recv: all envs, or one (AtariGames steps envs alone).
  _per_env = False

  def __init__(self, env_id: str, num_envs: int, atari: bool = False,
               frame_stack: int = 0, clip_reward: bool = False,
               seed: Optional[int] = None, **kwargs):
    """Makes the pool.

    Args:
      env_id: a gymnasium id EnvPool has ('CartPole-v1', 'HalfCheetah-v5',
        'ALE/Pong-v5').
      num_envs: sub-environments.
      atari: required for (and only for) ALE ids; see the module docstring.
      frame_stack: (atari) frames stacked, 4 when 0.
      clip_reward: (atari) rewards clipped to their sign (EnvPool's reward_clip).
      seed: the pool's seed (sub-env i: seed + i); None: EnvPool's default.
      **kwargs: EnvPool's own options (`envpool.make_spec(id).config`), e.g.
        max_episode_steps, num_threads, repeat_action_probability.

    Raises:
      MissingExtraError: envpool is not installed.
      EnvPoolUnsupportedError: EnvPool has no such env, or an option it cannot take.
    """
    envpool = import_envpool()
    self._task = task_id(env_id, atari)
    self._atari = atari
    options = dict(kwargs)
    if atari:
      options.setdefault('repeat_action_probability', _V5_STICKY_ACTIONS)
      options.update(stack_num=frame_stack or 4, episodic_life=False,
                     use_fire_reset=False, reward_clip=clip_reward)
    elif clip_reward:
      raise EnvPoolUnsupportedError(
          f'clip_reward on {env_id}: the envpool backend clips Atari rewards only; use '
          'the gymnasium backend.')
    elif frame_stack:
      raise EnvPoolUnsupportedError(
          f'frame_stack={frame_stack} on {env_id}: the envpool backend stacks frames '
          'of Atari envs only; use the gymnasium backend.')
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      known = envpool.make_spec(self._task).config._fields
    unknown = sorted(set(options) - set(known))
    if unknown:
      raise EnvPoolUnsupportedError(
          f'EnvPool\'s {self._task} has no option {", ".join(unknown)} (its options: '
          f'{", ".join(known)}).')
    self._options = options
    self._envpool = envpool
    self.num_envs = int(num_envs)
    self._seed: Union[int, List[int], None] = seed
    self._pool = self._make_pool(seed)
    self._stepped = False  # the pool stepped or reset since it was made
    self._env_ids = np.arange(self.num_envs, dtype=np.int32)
    observation_space = self._pool.observation_space
    self.single_action_space = _float32_actions(self._pool.action_space)
    if atari:  # channel-first stacks -> tfrl's channel-last
      height, width = observation_space.shape[1:]
      observation_space = gym.spaces.Box(
          0, 255, (height, width, observation_space.shape[0]), np.uint8)
    self.single_observation_space = observation_space
    self.observation_space = gym.vector.utils.batch_space(observation_space, num_envs)
    self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
    self._action_dtype = np.int32 if isinstance(
        self.single_action_space, gym.spaces.Discrete) else np.float64

  def _make_pool(self, seed: Union[int, Sequence[int], None]):
    options = dict(self._options, num_envs=self.num_envs,
                   batch_size=1 if self._per_env else self.num_envs)
    if isinstance(seed, (list, tuple, np.ndarray)):
      if len(seed) != self.num_envs:
        raise ValueError(f'{len(seed)} seeds for {self.num_envs} envs.')
      options['env_seed'] = [int(s) for s in seed]
    elif seed is not None:
      options['seed'] = int(seed)
    # EnvPool builds its spaces (float32 Boxes from float64 bounds, which gymnasium
    # warns of) on first use, from its first recv on: built here, quietly.
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      pool = self._envpool.make(self._task, env_type='gymnasium', **options)
      pool.observation_space, pool.action_space  # pylint: disable=pointless-statement
    return pool

  def _observation(self, observation: Any, order: Optional[np.ndarray]) -> Any:
    observation = _take(observation, order)
    if self._atari:
      return np.ascontiguousarray(observation.transpose(0, 2, 3, 1))
    return observation

  def _order(self, info: Dict[str, Any]) -> Optional[np.ndarray]:
    """The permutation that puts a batch the pool returned in env-id order (None when
    it already is, as it mostly is: no copy then)."""
    env_ids = info['env_id']
    return None if np.array_equal(env_ids, self._env_ids) else np.argsort(env_ids)

  def reset(self, *, seed: Union[int, Sequence[int], None] = None,
            options: Optional[Dict[str, Any]] = None):
    """Resets every sub-env; a seed (int: sub-env i gets seed + i, or one per env)
    starts a fresh pool with it.

    Raises:
      ValueError: options (EnvPool's reset takes none), or a seed list of another length.
    """
    self._reseed(seed, options)
    observation, info = self._pool.reset()
    return self._observation(observation, self._order(info)), {}

  def _reseed(self, seed: Union[int, Sequence[int], None],
              options: Optional[Dict[str, Any]]) -> None:
    """Before a reset: a fresh pool with `seed` where one is given (EnvPool seeds at
    construction), unless the pool was just made with it and never used.

    Raises:
      EnvPoolUnsupportedError: reset options (EnvPool's reset takes none).
    """
    if options:
      raise EnvPoolUnsupportedError('EnvPool envs take no reset options.')
    if seed is not None and (self._stepped or not _same_seed(seed, self._seed)):
      self._pool = self._make_pool(seed)
      self._seed = seed
    self._stepped = True

  def step(self, actions):
    self.step_async(actions)
    return self.step_wait()

  def step_async(self, actions) -> None:
    """Sends the actions; the pool's threads step while the caller goes on."""
    self._stepped = True
    self._pool.send(np.asarray(actions, self._action_dtype), self._env_ids)

  def step_wait(self):
    """Receives the step `step_async` sent: (obs, reward, terminated, truncated, info)."""
    observation, reward, terminated, truncated, info = self._pool.recv()
    order = self._order(info)
    observation = self._observation(observation, order)
    reward, terminated, truncated = (_take(x, order) for x in (reward, terminated, truncated))
    return observation, reward, terminated, truncated, {}

  def render(self):
    raise EnvPoolUnsupportedError('The envpool backend does not render; record videos '
                                  'with the gymnasium backend.')

  def close(self, **kwargs):
    del kwargs
    self._pool = None


def _take(batch: Any, order: Optional[np.ndarray]) -> Any:
  """`batch` (an array or a dict of them) reordered by `order` (None: as it is)."""
  if order is None:
    return batch
  if isinstance(batch, dict):
    return {key: _take(value, order) for key, value in batch.items()}
  return batch[order]


def _same_seed(a, b) -> bool:
  """Whether two seeds (ints, per-env lists or None) are the same."""
  if a is None or b is None:
    return a is b
  return np.array_equal(np.atleast_1d(a), np.atleast_1d(b))

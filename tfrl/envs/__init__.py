"""gymnasium environments as batched tf-agents TimeStep environments.

    env = tfrl.envs.make('CartPole-v1', num_envs=64, seed=0)
    time_step = env.reset()          # TimeStep with arrays of shape [64, ...]
    time_step = env.step(actions)    # actions: [64] ints

Pixels: `frame_stack=k` stacks an image env's last k frames channel-last ([H, W, k * C],
uint8 kept), `atari=True` applies gymnasium's AtariPreprocessing and stacks 4 frames
([84, 84, 4] uint8; needs ale-py and opencv), with RL-Zoo's AtariWrapper options
`terminal_on_life_loss`, `fire_reset` and `clip_reward` (`tfrl.envs.atari_wrappers`;
scores stay whole games' raw scores). tfrl's toy pixel envs ('tfrl/PixelCatch-v0',
'tfrl/PixelCatchDict-v0', `tfrl.envs.toy`) are registered with gymnasium when an id
names them (`registry.import_registering_package`); `tfrl.envs.toy.register()` registers
them for `gymnasium.make` directly. Importing this package registers nothing and imports
no TensorFlow (env worker processes import it): the batched env lives in
`tfrl.envs.batched_env`, the specs in `tfrl.envs.specs`.
"""
import contextlib
import dataclasses
import functools
from typing import Optional, Sequence, Tuple

import gymnasium as gym

from tfrl import logs
from tfrl.envs import atari_wrappers
from tfrl.envs import envpool_backend
from tfrl.envs import envpool_env
from tfrl.envs import observation_wrappers
from tfrl.envs import registry
from tfrl.envs import reward_normalization
from tfrl.envs import sources
from tfrl.envs import video
from tfrl.envs import worker_env
from tfrl.envs.observation_wrappers import stack_frames
from tfrl.envs.registry import MissingExtraError, UnknownEnvironmentError, check_registered
from tfrl.envs.shape_check import ObservationShapeError
from tfrl.envs.shape_check import ShapeCheckWrappers
from tfrl.envs.step_watchdog import timed_vector_env
from tfrl.envs.worker_env import EnvStepTimeoutError, WorkerError, WorkerVectorEnv

__all__ = ['make', 'UnknownEnvironmentError', 'MissingExtraError', 'ObservationShapeError',
           'stack_frames', 'WorkerError', 'EnvStepTimeoutError', 'check_registered',
           'BACKENDS', 'EnvPoolUnsupportedError']
EnvPoolUnsupportedError = envpool_env.EnvPoolUnsupportedError


# AtariPreprocessing's default: 4 frames stacked.
ATARI_FRAME_STACK = 4
# What steps the envs: gymnasium's vector envs, or EnvPool's pools (tfrl.envs.envpool_env).
BACKENDS = ('gymnasium', 'envpool')



def action_space(env: 'sources.EnvLike') -> gym.Space:
  """The action space of the env `env` names (one env made and closed; tfrl's env
  options change observations and rewards, never the actions).

  Args:
    env: what `make` takes: an id, 'module:function', a factory or an env object.

  Returns:
    The gymnasium space.

  Raises:
    Whatever making the env raises (an unknown id, a missing extra, the factory's own).
  """
  if isinstance(env, gym.Env):
    return env.action_space
  source = sources.resolve(env)
  if source.env_id is not None:
    registry.import_registering_package(source.env_id)
    made = gym.make(registry.split_module(source.env_id)[1])
  else:
    made = source.factory()
  try:
    return made.action_space
  finally:
    made.close()


def make(env_id: 'sources.EnvLike',
         num_envs: int = 1,
         seed: Optional[int] = None,
         asynchronous: bool = False,
         vectorization_mode: Optional[str] = None,
         observation_indices: Optional[Sequence[int]] = None,
         observation_keys: Optional[Sequence[str]] = None,
         frame_stack: int = 0,
         atari: bool = False,
         terminal_on_life_loss: bool = False,
         fire_reset: bool = False,
         clip_reward: bool = False,
         normalize_reward: Optional[float] = None,
         num_workers: int = 0,
         step_timeout_s: float = 0.0,
         video_dir: Optional[str] = None,
         video_episodes: Optional[int] = None,
         backend: str = 'gymnasium',
         **kwargs) -> 'BatchedEnv':
  """Makes a batched environment of `num_envs` copies of a gymnasium env.

  Args:
    env_id: a registered gymnasium id, e.g. 'CartPole-v1'; or 'module:function', a
      function returning a gymnasium env, or an env object to copy
      (`tfrl.envs.sources`).
    num_envs: how many sub-environments step together.
    seed: when given, the environment is reset once with it (sub-env i gets seed + i)
      so that the first `reset()` without a seed continues a reproducible stream.
    asynchronous: run sub-environments in worker processes, one each
      (`gymnasium.vector.AsyncVectorEnv`, its workers spawned without TensorFlow),
      worth it for costly environments; `num_workers` shares fewer processes. As
      with `num_workers`, a script that makes one at its top level needs the
      `if __name__ == '__main__':` guard (spawned processes import the main module).
    vectorization_mode: overrides `asynchronous`: 'sync', 'async' or
      'vector_entry_point' (an environment's own vectorized implementation).
    observation_indices: keep only these entries of a flat Box observation, in this
      order (e.g. (0, 2): CartPole's cart position and pole angle, without the
      velocities, a partially observed task that needs memory).
    observation_keys: keep only these entries of a Dict observation (gymnasium's
      FilterObservation), e.g. ('image', 'direction') of MiniGrid, whose 'mission'
      text no encoder takes.
    frame_stack: stack each sub-env's last `frame_stack` observations (0: none) with
      gymnasium's FrameStackObservation; images ([H, W] or [H, W, C]) come out
      channel-last, [H, W, frame_stack * C] with the newest frame last, in their own
      dtype (uint8 stays uint8); other Box observations as [frame_stack, ...].
    atari: apply gymnasium's AtariPreprocessing with its defaults (no-op starts,
      frame skip 4 with max-pooling, 84 x 84 grayscale) to an ALE env, made with
      frameskip=1 unless given (the wrapper skips frames itself), then stack
      `frame_stack` frames (4 when 0): observations uint8 [84, 84, 4]. Needs the
      'atari' extra (ale-py, whose 'ALE/...' ids this function registers, and
      opencv-python).
    terminal_on_life_loss: (atari) a lost life ends the training episode (terminated)
      while the game goes on; the game resets only when over (SB3's EpisodicLifeEnv).
    fire_reset: (atari) press FIRE, then action 2, after each reset, a lost life's
      included, in games with a FIRE action (SB3's FireResetEnv).
    clip_reward: rewards become their sign, -1, 0 or 1 (SB3's ClipRewardEnv).
      With any of these three, the env reports whole games' raw scores
      (`BatchedEnv.game_ends`), which tfrl's episode metrics and Evaluator count
      instead of its episodes (see `tfrl.envs.atari_wrappers`).
    normalize_reward: None (off), or a discount: rewards are divided by the running
      standard deviation of the return discounted by it and clipped to [-10, 10], as
      SB3's VecNormalize(norm_reward=True) (`tfrl.envs.reward_normalization`); the env
      reports episodes' raw returns, as with clip_reward.
    num_workers: step the sub-environments in this many worker processes, each a
      synchronous vector env of its share (`tfrl.envs.worker_env`), so an Actor's
      policy and writer run while they step; 0 keeps them in this process (as
      `asynchronous` / `vectorization_mode` say). Workers start fresh: an env your
      own module registers needs the id 'your_module:YourEnv-v0', which imports it
      there (and here).
    step_timeout_s: the longest a step may take; 0 disables. With num_workers the
      workers are then killed and the step raises EnvStepTimeoutError naming
      `env_id`; in this process the error is printed and the process exits with
      status 5 (`tfrl.envs.step_watchdog`: a blocked step cannot be interrupted).
    video_dir: record the episodes every sub-env plays to the end as MP4s there
      (`tfrl.envs.video`; needs the 'video' extra and an env that renders 'rgb_array');
      in this process only (no num_workers or async mode).
    video_episodes: with video_dir, record exactly the K episodes an evaluation of K
      plays on these envs (`tfrl.actors.Evaluator`); None: every episode that ends.
    backend: 'gymnasium', or 'envpool' (the 'envpool' extra): EnvPool's C++ envs
      stepped in its own threads, asynchronously while the policy acts, for the
      classic-control, Box2D, MuJoCo and Atari ids it has, with the same TimeStep
      semantics (`tfrl.envs.envpool_env`). It takes registered ids only, and none of
      num_workers, asynchronous, vectorization_mode, observation_indices,
      observation_keys or video_dir; frame_stack for Atari only.
    **kwargs: passed to the environment's constructor or factory (e.g. `render_mode`);
      with the envpool backend, EnvPool's own options (e.g. `num_threads`).

  Returns:
    A `BatchedEnv`.

  Raises:
    UnknownEnvironmentError: if `env_id` is not registered (lists close ids).
    ValueError: a 'module:name' naming neither a registered id nor a function; env
      workers with a factory that does not pickle (see `tfrl.envs.sources`).
    MissingExtraError: the env needs a package of a tfrl extra (atari, box2d, mujoco,
      minigrid) that is not installed; the message names the extra.
    ValueError: if `num_envs` < 1, observation_keys that are not keys of a Dict
      observation, observation_indices that do not index the
      environment's flat Box observation, a negative frame_stack, frame_stack on
      an observation that is not a Box, terminal_on_life_loss or fire_reset without
      atari, or fire_reset on a game whose FIRE is not action 1 (WorkerError from
      env workers); an unknown backend; a normalize_reward discount outside [0, 1].
    EnvPoolUnsupportedError: (a ValueError) an env or option the envpool backend does
      not have.
  """
  if num_envs < 1:
    raise ValueError(f'num_envs must be >= 1, got {num_envs}.')
  if frame_stack < 0:
    raise ValueError(f'frame_stack must be >= 0, got {frame_stack}.')
  if (terminal_on_life_loss or fire_reset) and not atari:
    raise ValueError('terminal_on_life_loss and fire_reset need atari=True (an ALE game).')
  if normalize_reward is not None and not 0.0 <= normalize_reward <= 1.0:
    raise ValueError('normalize_reward is the running return\'s discount, in [0, 1]; '
                     f'got {normalize_reward}.')
  if backend not in BACKENDS:
    raise ValueError(f'backend must be one of {", ".join(BACKENDS)}, got {backend!r}.')
  if backend == 'envpool':
    vector_env = envpool_backend.make_vector_env(
        env_id, num_envs, seed, atari=atari, frame_stack=frame_stack,
        terminal_on_life_loss=terminal_on_life_loss, fire_reset=fire_reset,
        clip_reward=clip_reward, gymnasium_only=dict(
            num_workers=num_workers, asynchronous=asynchronous,
            vectorization_mode=vectorization_mode, observation_indices=observation_indices,
            observation_keys=observation_keys, video_dir=video_dir,
            normalize_reward=normalize_reward is not None), **kwargs)
    return _batched(vector_env, env_id, seed, step_timeout_s, vector_env.game_scores)
  source = sources.resolve(env_id)
  mode = vectorization_mode or ('async' if asynchronous else 'sync')
  recorder = None
  if video_dir is not None:
    if num_workers or mode != 'sync':
      raise ValueError('video_dir records in this process: use num_workers=0 and the '
                       'sync vectorization mode.')
    video.check_video_packages()
    kwargs['render_mode'] = 'rgb_array'
    recorder = video.RecordEveryEnv(video_dir, num_envs, video_episodes)
  if source.env_id is not None:
    check_registered(source.env_id)
    if atari:
      # AtariPreprocessing skips (and max-pools) frames itself and refuses an env that
      # skips frames too, which ALE's v5 ids do by default.
      kwargs.setdefault('frameskip', 1)
  elif num_workers:
    source.check_picklable()
  env_id = source.name
  wrapping = _Wrapping(
      None if observation_indices is None else tuple(observation_indices),
      None if observation_keys is None else tuple(observation_keys),
      atari, frame_stack or (ATARI_FRAME_STACK if atari else 0),
      terminal_on_life_loss, fire_reset, clip_reward, normalize_reward)
  try:
    if num_workers:
      # Built in each worker, from names and values only (workers are spawned).
      factory = functools.partial(_make_vector_env, source, 'sync', wrapping, kwargs)
      vector_env = WorkerVectorEnv(factory, num_envs, num_workers,
                                   step_timeout_s=step_timeout_s, env_id=env_id)
    else:
      vector_env = _make_vector_env(source, mode, wrapping, kwargs, num_envs,
                                    index_offset=0 if mode == 'sync' else None,
                                    recorder=recorder)
  except (gym.error.DependencyNotInstalled, ImportError) as e:
    extra = ((registry.simulator_extra(source.env_id) if source.env_id is not None else None) or
             ('atari' if atari else None))
    if extra is None:
      raise
    raise registry.missing_extra(env_id, extra, e) from e
  return _batched(vector_env, env_id, seed, 0.0 if num_workers else step_timeout_s,
                  wrapping.game_scores)


def _batched(vector_env: gym.vector.VectorEnv, env_id: str, seed: Optional[int],
             step_timeout_s: float, game_scores: bool) -> 'BatchedEnv':
  """The BatchedEnv over an in-process vector env (timed when step_timeout_s > 0),
  reset once with `seed` when given."""
  if step_timeout_s > 0:
    vector_env = timed_vector_env(vector_env, env_id, step_timeout_s)
  from tfrl.envs.batched_env import BatchedEnv  # pylint: disable=g-import-not-at-top
  env = BatchedEnv(vector_env, env_id=env_id, game_scores=game_scores)
  if seed is not None:
    env.reset(seed=seed)
    # Later unseeded resets continue from here; also seed action-space sampling.
    vector_env.action_space.seed(seed)
  return env


@dataclasses.dataclass(frozen=True)
class _Wrapping:
  """The observation wrappers `make` applies to each sub-environment, as values (so a
  worker process can rebuild them)."""
  observation_indices: Optional[Tuple[int, ...]]
  observation_keys: Optional[Tuple[str, ...]]
  atari: bool
  frame_stack: int
  terminal_on_life_loss: bool = False
  fire_reset: bool = False
  clip_reward: bool = False
  normalize_reward: Optional[float] = None

  @property
  def game_scores(self) -> bool:
    """Whether the env reports whole games' scores (`atari_wrappers.GameScore`): its
    training episodes or rewards are not the game's."""
    return (self.terminal_on_life_loss or self.fire_reset or self.clip_reward or
            self.normalize_reward is not None)

  def __call__(self, env: gym.Env) -> gym.Env:
    if self.observation_indices is not None:
      env = observation_wrappers.keep_observation_entries(env, self.observation_indices)
    if self.observation_keys is not None:
      env = observation_wrappers.keep_observation_keys(env, self.observation_keys)
    if self.atari:
      env = gym.wrappers.AtariPreprocessing(env)
    if self.game_scores:
      env = atari_wrappers.GameScore(env)
    env = atari_wrappers.wrap(env, self.terminal_on_life_loss, self.fire_reset,
                              self.clip_reward)
    if self.normalize_reward is not None:
      env = reward_normalization.normalize_reward(env, self.normalize_reward)
    if self.frame_stack:
      env = stack_frames(env, self.frame_stack)
    return env


def _make_vector_env(source: sources.EnvSource, mode: str, wrapping: _Wrapping,
                     kwargs: dict, num_envs: int, index_offset: Optional[int] = None,
                     recorder: Optional[video.RecordEveryEnv] = None
                    ) -> gym.vector.VectorEnv:
  """The gymnasium vector env of `num_envs` wrapped sub-environments.

  Each sub-env's observation shapes are checked (`shape_check`); `index_offset` is the
  first sub-env's index in the batch, None where it is not known here (a worker's
  share, gymnasium's async mode): messages then name no index. `recorder`, innermost,
  records the raw env's frames.
  """
  # ALE prints two lines per env it creates (in a worker process too: this runs there).
  # gymnasium's async mode starts its processes here, which must keep the real stderr.
  quiet = logs.native_stderr_filtered() if mode == 'sync' else contextlib.nullcontext()
  # gymnasium's async workers fork by default; forking a process that runs TensorFlow's
  # threads is unsafe (a forked worker died before sending its spaces): spawn them, as
  # tfrl's own workers are, without TensorFlow.
  spawned = worker_env.spawned_without_tensorflow() if mode == 'async' else (
      contextlib.nullcontext())
  vector_kwargs = {'context': 'spawn'} if mode == 'async' else {}
  shape_check = ShapeCheckWrappers(source.name, index_offset if mode == 'sync' else None)
  wrappers = ([recorder] if recorder is not None else []) + [wrapping, shape_check]
  if source.env_id is not None:
    registry.import_registering_package(source.env_id)  # in a worker process too
    make_all = functools.partial(gym.make_vec, source.env_id, num_envs=num_envs,
                                 vectorization_mode=mode, vector_kwargs=vector_kwargs,
                                 wrappers=wrappers, **kwargs)
  else:
    vector_classes = {'sync': gym.vector.SyncVectorEnv, 'async': gym.vector.AsyncVectorEnv}
    if mode not in vector_classes:
      raise ValueError(f'vectorization_mode {mode!r} needs a registered id; the env '
                       f'factory {source.name} makes single envs (use sync or async).')
    make_one = functools.partial(_wrapped, source.factory, kwargs, wrappers)
    make_all = functools.partial(vector_classes[mode], [make_one] * num_envs,
                                 **vector_kwargs)
  with quiet, spawned:
    try:
      return make_all()
    except TypeError as e:
      if recorder is None:
        raise
      raise video.VideoUnsupportedError(
          f"{source.name} could not be made with render_mode='rgb_array', the frames a "
          f'video records ({e}); record no video, or give the env a render_mode.') from e


def _wrapped(factory, kwargs: dict, wrappers) -> gym.Env:
  """One env from `factory`, checked to be a gymnasium env, then wrapped."""
  env = factory(**kwargs)
  if not isinstance(env, gym.Env):
    raise ValueError(f'The env factory {sources.EnvSource(factory=factory).name} returned '
                     f'{type(env).__name__}, not a gymnasium.Env.')
  for wrapper in wrappers:
    env = wrapper(env)
  return env

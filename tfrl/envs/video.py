"""Videos of episodes: gymnasium's `RecordVideo` on every sub-env of a batched env.

`tfrl.envs.make(..., video_dir=DIR)` records the episodes its sub-envs play to the end
as `DIR/eval<k>-env<j>-episode-<i>.mp4` (k numbers the envs that recorded there, j the
sub-env), with `video_episodes=K` exactly those of an evaluation of K episodes
(`tfrl.quotas`: each sub-env's quota, counted again from each seeded reset), the
reset's frame and one per step (the env renders 'rgb_array' frames, before any of
tfrl's observation wrappers, so an Atari video shows the game, not 84x84 grey frames);
`tfrl.actors.record_video(policy, env, DIR)` plays episodes of a policy into such a
directory, and
`tfrl-eval --video_dir=DIR` records its evaluation episodes. gymnasium's `RecordVideo`
captures the frames; the MP4 is written with imageio's ffmpeg writer, every frame of
it (moviepy, which RecordVideo writes with, dropped an episode's last frame at
CartPole's 50 frames per second). tfrl's 'video' extra installs both (pip install
'tfrl[video]'; RecordVideo insists on moviepy). pygame, which renders the classic
control envs, gets SDL's dummy audio and video drivers unless the process chose its own.
"""
import glob
import os
from typing import List, Optional
import warnings

import gymnasium as gym

from tfrl import quotas

EXTRA = 'video'


# SDL's dummy drivers, pygame without its greeting: started with real drivers on a
# machine without a sound card or a display, SDL fills stderr (ALSA's lines, an
# XDG_RUNTIME_DIR error) while it renders the same frames.
_QUIET_PYGAME = {'SDL_AUDIODRIVER': 'dummy', 'SDL_VIDEODRIVER': 'dummy',
                 'PYGAME_HIDE_SUPPORT_PROMPT': '1'}


class VideoUnsupportedError(ValueError):
  """An env that cannot give a video its frames (no 'rgb_array' render mode)."""


def check_video_packages() -> None:
  """Raises ImportError naming the extra unless moviepy (RecordVideo checks for it) and
  imageio's ffmpeg writer import."""
  try:
    import imageio_ffmpeg  # pylint: disable=g-import-not-at-top,unused-import
    import moviepy  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise ImportError(f"Videos need tfrl's {EXTRA!r} extra: pip install "
                      f"'tfrl[{EXTRA}]' (in a clone: .venv/bin/pip install -e "
                      f'".[{EXTRA}]"); {e}') from e


class _WholeEpisodeVideo(gym.wrappers.RecordVideo):
  """RecordVideo that writes only episodes that ended, at most `limit` of them from each
  seeded reset on: a recording cut short by a reset (`make`'s seeding reset, an
  evaluator's reseed while this env was mid-episode) or by `close` is dropped, and so
  are the episodes a sub-env plays past its quota while the others finish theirs."""

  def __init__(self, env: gym.Env, video_dir: str, name_prefix: str,
               limit: Optional[int] = None):
    with warnings.catch_warnings():  # 'Overwriting existing videos': it never does
      warnings.simplefilter('ignore')
      super().__init__(env, video_dir, name_prefix=name_prefix, disable_logger=True,
                       episode_trigger=lambda _: limit is None or self._written < limit)
    self._episode_ended = False
    self._written = 0

  def reset(self, **kwargs):
    if kwargs.get('seed') is not None:  # a new evaluation: a new quota
      if self.recording:
        self.stop_recording()
      self._written = 0
    observation, info = super().reset(**kwargs)  # ends (or drops) the last recording
    self._episode_ended = False
    return observation, info

  def step(self, action):
    observation, reward, terminated, truncated, info = super().step(action)
    self._episode_ended = self._episode_ended or terminated or truncated
    return observation, reward, terminated, truncated, info

  def stop_recording(self):
    if self._episode_ended and self.recorded_frames:
      import imageio  # pylint: disable=g-import-not-at-top (the video extra's)
      # Dimensions rounded to even (what yuv420p needs), not to 16, which resized
      # CartPole's 600 x 400 frames.
      imageio.mimwrite(os.path.join(self.video_folder, f'{self._video_name}.mp4'),
                       self.recorded_frames, fps=self.frames_per_sec, macro_block_size=2)
      self._written += 1
    self.recorded_frames, self.recording, self._video_name = [], False, None


class RecordEveryEnv:
  """A `gym.make_vec` wrapper that records the episodes of each sub-env it wraps."""

  def __init__(self, video_dir: str, num_envs: int, episodes: Optional[int] = None,
               name_prefix: str = 'eval'):
    """Args:
      video_dir: where the MP4s go.
      num_envs: the sub-envs it will wrap, in order.
      episodes: the episodes of one evaluation (K), spread as `tfrl.quotas` spreads
        them; None records every episode that ends.
      name_prefix: files are `<name_prefix><k>-env<j>-episode-<i>.mp4`, k the first
        number no earlier recorder in `video_dir` took (a later run adds files, never
        overwrites).
    """
    taken = set(os.listdir(video_dir)) if os.path.isdir(video_dir) else set()
    k = 1
    while any(name.startswith(f'{name_prefix}{k}-') for name in taken):
      k += 1
    self.video_dir, self.name_prefix = video_dir, f'{name_prefix}{k}'
    self._limits = (quotas.episode_quotas(episodes, num_envs) if episodes is not None
                    else [None] * num_envs)
    self._wrapped = 0
    # Before pygame starts (see the module docstring): 'rgb_array' frames need neither
    # a sound card nor a display.
    for variable, value in _QUIET_PYGAME.items():
      os.environ.setdefault(variable, value)

  def __call__(self, env: gym.Env) -> gym.Env:
    if getattr(env, 'render_mode', None) != 'rgb_array':
      raise VideoUnsupportedError(
          f'{env.spec.id if env.spec else type(env.unwrapped).__name__} renders no '
          f"'rgb_array' frames (render_mode {getattr(env, 'render_mode', None)!r}), which "
          'a video records: give it render_mode, or record no video.')
    index = self._wrapped
    self._wrapped += 1
    return _WholeEpisodeVideo(env, self.video_dir, f'{self.name_prefix}-env{index}',
                              self._limits[index] if index < len(self._limits) else None)


def videos(video_dir: str) -> List[str]:
  """The MP4s in `video_dir`, oldest first."""
  return sorted(glob.glob(os.path.join(video_dir, '*.mp4')), key=os.path.getmtime)

"""Videos of episodes (tfrl/envs/video.py): one MP4 per whole episode, with the reset's
frame and one per step; from Python (`tfrl.actors.record_video`) and from `tfrl-eval --video_dir`."""
import os

import gymnasium as gym
import imageio
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.policies import fixed_policy
from tf_agents.policies import random_tf_policy

from tfrl import actors
from tfrl import envs
from tfrl import export
from tfrl.envs import video

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _always_right(env):
  return fixed_policy.FixedPolicy(tf.constant(1, tf.int64), env.time_step_spec(),
                                  env.action_spec())


def _episode_length_pushing_right(seed):
  env = gym.make('CartPole-v1')
  env.reset(seed=seed)
  length, done = 0, False
  while not done:
    _, _, terminated, truncated, _ = env.step(1)
    length, done = length + 1, terminated or truncated
  return length


def test_record_video_writes_each_episode_with_its_frames(tmp_path):
  specs = envs.make('CartPole-v1')
  policy = _always_right(specs)
  specs.close()
  paths = actors.record_video(policy, 'CartPole-v1', str(tmp_path), num_episodes=1, seed=3)
  assert len(paths) == 1 and paths[0].endswith('.mp4')
  with imageio.get_reader(paths[0]) as reader:
    frames = reader.count_frames()
  assert frames == _episode_length_pushing_right(3) + 1  # the reset's frame, then steps
  # A second call adds its own files and returns only those.
  again = actors.record_video(policy, 'CartPole-v1', str(tmp_path), num_episodes=2, seed=4)
  assert len(again) == 2 and not set(again) & set(paths)


def test_video_dir_is_refused_where_it_cannot_record():
  with pytest.raises(ValueError, match='video_dir records in this process'):
    envs.make('CartPole-v1', num_envs=2, num_workers=1, video_dir='/tmp/unused')


def test_an_evaluation_records_exactly_its_episodes_each_time(tmp_path):
  """7 episodes on 3 envs: quotas 3, 2, 2, counted again from each seeded reset, so a
  second evaluation records its own 7; the envs that finish early play on unrecorded."""
  env = envs.make('CartPole-v1', num_envs=3, video_dir=str(tmp_path), video_episodes=7)
  evaluator = actors.Evaluator(env, _always_right(env), 7, seed=0)
  evaluator.run()
  evaluator.run()
  env.close()
  recorded = [os.path.basename(p) for p in video.videos(str(tmp_path))]
  assert len(recorded) == 14, recorded
  assert sorted({name.split('-episode-')[0] for name in recorded}) == [
      'eval1-env0', 'eval1-env1', 'eval1-env2']
  assert sum(name.startswith('eval1-env0-') for name in recorded) == 6


class _NoFrames(gym.Env):
  """An env whose constructor takes no render_mode."""
  observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
  action_space = gym.spaces.Discrete(2)

  def reset(self, *, seed=None, options=None):
    return self.observation_space.sample(), {}

  def step(self, action):
    return self.observation_space.sample(), 0.0, True, False, {}


def test_an_env_that_cannot_render_is_refused_in_one_line(tmp_path):
  with pytest.raises(video.VideoUnsupportedError,
                     match=r"could not be made with render_mode='rgb_array'.*record no "
                           r'video') as raised:
    envs.make(_NoFrames, video_dir=str(tmp_path))
  assert '\n' not in str(raised.value)
  with pytest.raises(video.VideoUnsupportedError, match=r"renders no 'rgb_array' frames"):
    envs.make(lambda render_mode=None: _NoFrames(), video_dir=str(tmp_path))


@pytest.mark.integration
def test_tfrl_eval_records_its_evaluation_episodes(tmp_path):
  specs = envs.make('CartPole-v1')
  path = export.export_policy(random_tf_policy.RandomTFPolicy(specs.time_step_spec(),
                                                              specs.action_spec()),
                              str(tmp_path / 'policy'))
  specs.close()
  videos_dir = tmp_path / 'videos'
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = python_runs.run(
               ['-m', 'learners.eval', f'--root_dir={tmp_path / "run"}', '--gin_file=dqn_cartpole.gin', f'--saved_model_dir={path}', f'--video_dir={videos_dir}', '--gin_bindings=Experiment.num_eval_episodes = 5'],
               timeout=300,
               env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  # Five episodes on five envs: one video each, whatever the envs played past theirs
  # (episode 0 is the seeding reset's, cut short).
  recorded = sorted(os.path.basename(p) for p in video.videos(str(videos_dir)))
  assert recorded == [f'eval1-env{j}-episode-1.mp4' for j in range(5)], recorded
  assert f'Videos of its episodes in {videos_dir}' in result.stderr
  # Nothing from SDL's audio and video stacks or pygame, nor gymnasium's warning about
  # overwriting.
  for noise in ('ALSA', 'XDG_RUNTIME_DIR', 'Overwriting', 'pygame'):
    assert noise not in result.stderr, result.stderr

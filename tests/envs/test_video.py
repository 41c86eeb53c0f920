"""Videos of episodes (tfrl/envs/video.py): one MP4 per whole episode, with the reset's
frame and one per step; from Python (`record_video`) and from `tfrl-eval --video_dir`."""
import os

import gymnasium as gym
import imageio
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.policies import fixed_policy
from tf_agents.policies import random_tf_policy

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
  paths = video.record_video(policy, 'CartPole-v1', str(tmp_path), num_episodes=1, seed=3)
  assert len(paths) == 1 and paths[0].endswith('.mp4')
  with imageio.get_reader(paths[0]) as reader:
    frames = reader.count_frames()
  assert frames == _episode_length_pushing_right(3) + 1  # the reset's frame, then steps
  # A second call adds its own files and returns only those.
  again = video.record_video(policy, 'CartPole-v1', str(tmp_path), num_episodes=2, seed=4)
  assert len(again) == 2 and not set(again) & set(paths)


def test_video_dir_is_refused_where_it_cannot_record():
  with pytest.raises(ValueError, match='video_dir records in this process'):
    envs.make('CartPole-v1', num_envs=2, num_workers=1, video_dir='/tmp/unused')


def test_tfrl_eval_records_its_evaluation_episodes(tmp_path):
  specs = envs.make('CartPole-v1')
  path = export.export_policy(random_tf_policy.RandomTFPolicy(specs.time_step_spec(),
                                                              specs.action_spec()),
                              str(tmp_path / 'policy'))
  specs.close()
  videos_dir = tmp_path / 'videos'
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = python_runs.run(
               ['-m', 'learners.eval', f'--root_dir={tmp_path / "run"}', '--gin_file=dqn_cartpole.gin', f'--saved_model_dir={path}', f'--video_dir={videos_dir}', '--gin_bindings=Experiment.num_eval_episodes = 3'],
               timeout=300,
               env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  # Three episodes on three envs: the first env plays at least one to its end.
  assert video.videos(str(videos_dir))
  assert f'Videos of its episodes in {videos_dir}' in result.stderr

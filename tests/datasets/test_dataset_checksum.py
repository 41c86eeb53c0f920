"""`rlds.checksum`: a dataset's content, not its files; equal for a data job made twice.

The checksum hashes episodes (observations, actions, rewards, discounts, the episode
flags, with dtypes and shapes), so two writes of the same episodes agree whatever TFDS
puts beside them, and one changed reward tells them apart. A `train_eval` job with
`Experiment.deterministic = True` and a fixed seed records the same dataset each time
as long as all it records was collected before its first gradient step (the random
warm-up and the untrained policy's iteration): replay sampling is not seeded (Reverb's
selectors), so what a job collects after training on sampled batches may differ from
one run to the next (docs/guides/datasets.md, "Checksums"). `tfrl-eval --record_dir` of
one exported policy records the same dataset each time (its envs and noise are seeded).
"""
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

import python_runs  # tests/python_runs.py
from tfrl.datasets import rlds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def episodes(reward_offset: float = 0.0, observation_key: str = 'position'
             ) -> rlds.EpisodeArrays:
  """Two short episodes (3 and 4 steps, the first terminated) with Dict observations."""
  is_first = np.array([1, 0, 0, 1, 0, 0, 0], bool)
  is_last = np.array([0, 0, 1, 0, 0, 0, 1], bool)
  rng = np.random.default_rng(0)
  observation = {observation_key: rng.normal(size=(7, 3)).astype(np.float32),
                 'count': np.arange(7, dtype=np.int32)}
  reward = np.where(is_last, 0.0, np.arange(7) + reward_offset).astype(np.float32)
  specs = {'observation': {key: tf.TensorSpec(x.shape[1:], tf.as_dtype(x.dtype))
                           for key, x in observation.items()},
           'action': tf.TensorSpec((), tf.int64)}
  return rlds.EpisodeArrays(
      observation=observation, action=np.arange(7, dtype=np.int64) % 2, reward=reward,
      discount=np.where(is_last, 0.0, 1.0).astype(np.float32), is_first=is_first,
      is_last=is_last, is_terminal=np.array([0, 0, 1, 0, 0, 0, 0], bool), specs=specs)


def write(arrays: rlds.EpisodeArrays, directory: str, **recorder_args) -> str:
  scalar = tf.TensorSpec((), tf.float32)
  time_step_spec = ts.TimeStep(tf.TensorSpec((), tf.int32), scalar, scalar,
                               arrays.specs['observation'])
  recorder = rlds.RldsRecorder(directory, time_step_spec, arrays.specs['action'],
                               **recorder_args)
  recorder.add_episodes(arrays)
  recorder.close()
  return directory


def test_two_writes_of_the_same_episodes_have_one_checksum(tmp_path):
  # Other metadata, other sharding (one episode per file against one file).
  first = write(episodes(), str(tmp_path / 'a'), metadata={'job': 'a'}, episodes_per_file=1)
  second = write(episodes(), str(tmp_path / 'b'), metadata={'job': 'b', 'seed': 3})
  assert sorted(os.listdir(first)) != sorted(os.listdir(second))
  assert rlds.checksum(first) == rlds.checksum(second) == episodes().checksum()
  assert len(rlds.checksum(first)) == rlds.CHECKSUM_HEX_DIGITS
  int(rlds.checksum(first), 16)  # hex


def test_the_checksum_ignores_the_files_metadata(tmp_path):
  directory = write(episodes(), str(tmp_path / 'a'))
  before = rlds.checksum(directory)
  info_path = os.path.join(directory, 'dataset_info.json')
  with open(info_path) as f:
    info = json.load(f)
  info['description'] = 'rewritten'
  with open(info_path, 'w') as f:
    json.dump(info, f)
  with open(os.path.join(directory, 'metadata.json'), 'w') as f:
    json.dump({'tfrl': {'job': 'elsewhere'}}, f)
  os.utime(info_path, (0, 0))
  assert rlds.checksum(directory) == before


def test_one_changed_reward_changes_the_checksum(tmp_path):
  base = write(episodes(), str(tmp_path / 'a'))
  changed = episodes()
  changed.reward[4] += 1e-3
  other = write(changed, str(tmp_path / 'b'))
  assert rlds.checksum(base) != rlds.checksum(other)


@pytest.mark.parametrize('change', ['action', 'boundary', 'key', 'dtype'])
def test_actions_boundaries_keys_and_dtypes_change_the_checksum(change):
  arrays = episodes()
  if change == 'action':
    arrays.action[1] = 1 - arrays.action[1]
  elif change == 'boundary':  # one episode cut in two: same steps, other flags
    arrays.is_last[4], arrays.is_first[5] = True, True
  elif change == 'key':
    arrays = episodes(observation_key='velocity')
  else:
    arrays.action = arrays.action.astype(np.int32)
  assert arrays.checksum() != episodes().checksum()


# -- A data job recorded twice -----------------------------------------------------------

# dqn_cartpole.gin at its smallest: 4 envs, 200 random warm-up steps and one iteration
# (64 env steps of the untrained epsilon-greedy policy, then 8 gradient steps), so every
# recorded episode was collected before the first gradient step.
TINY_DQN = ['Experiment.num_envs = 4', 'Experiment.initial_collect_steps = 200',
            'Experiment.collect_steps_per_iteration = 16',
            'Experiment.train_steps_per_iteration = 8', 'Experiment.num_train_steps = 8',
            'Experiment.batch_size = 16', 'Experiment.eval_interval = 8',
            'Experiment.num_eval_episodes = 1', 'Experiment.target_return = None',
            'Experiment.deterministic = True']


def run(args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = python_runs.run(['-m', *args], timeout=600, env=env)
  assert result.returncode == 0, result.stderr[-3000:]


def record_job(root: str, seed: int) -> str:
  """A deterministic dqn_cartpole.gin job that records what it collects; its dataset."""
  data = root + '_data'
  bindings = [*TINY_DQN, f'Experiment.seed = {seed}', f"Experiment.record_dir = '{data}'"]
  run(['learners.train_eval', f'--root_dir={root}', '--gin_file=dqn_cartpole.gin',
       *[f'--gin_bindings={b}' for b in bindings]])
  return data


def record_policy(policy_dir: str, out: str) -> str:
  """`tfrl-eval` records 5 episodes of the policy with epsilon 0.3 (seed 0)."""
  run(['learners.eval', '--gin_file=dqn_cartpole.gin', f'--root_dir={out}_root',
       f'--saved_model_dir={policy_dir}', f'--record_dir={out}', '--num_episodes=5',
       '--record_noise=0.3'])
  return out


@pytest.mark.integration
def test_a_deterministic_data_job_records_the_same_dataset_twice(tmp_path):
  first = record_job(str(tmp_path / 'first'), seed=5)
  second = record_job(str(tmp_path / 'second'), seed=5)
  other_seed = record_job(str(tmp_path / 'other'), seed=6)
  arrays = rlds.read(first)
  assert arrays.num_episodes >= 4  # random CartPole episodes last about 20 steps
  assert rlds.checksum(first) == rlds.checksum(second)
  # The seed reaches the data: another seed's envs and actions make other episodes.
  assert rlds.checksum(other_seed) != rlds.checksum(first)
  # A recording of one exported policy, exploring, is seeded too (offline.py's medium
  # and mixed sets are such recordings).
  policy = str(tmp_path / 'first' / 'policies' / 'greedy_policy')
  assert (rlds.checksum(record_policy(policy, str(tmp_path / 'rec1'))) ==
          rlds.checksum(record_policy(policy, str(tmp_path / 'rec2'))))

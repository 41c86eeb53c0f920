"""Datasets end to end: `tfrl-eval` records an exported policy's episodes, an offline
`train_eval` job trains from them (no collection) and exports a policy that plays."""
import json
import os
import re
import subprocess

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

from tfrl import actors
from tfrl import envs
from tfrl import export
from tfrl.datasets import behaviour
from tfrl.datasets import feeder
from tfrl.datasets import rlds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class BalancingPolicy(tf_policy.TFPolicy):
  """CartPole's textbook controller: push toward where the pole falls (returns 500)."""

  def _distribution(self, time_step, policy_state):
    raise NotImplementedError

  def _action(self, time_step, policy_state, seed):
    obs = time_step.observation
    push_right = obs[:, 2] + 0.5 * obs[:, 3] + 0.05 * obs[:, 1] > 0
    return policy_step.PolicyStep(tf.cast(push_right, tf.int64), policy_state, ())


@pytest.fixture(scope='module')
def demonstrator(tmp_path_factory):
  env = envs.make('CartPole-v1', num_envs=1)
  path = str(tmp_path_factory.mktemp('demo') / 'policy')
  export.export_policy(BalancingPolicy(env.time_step_spec(), env.action_spec()), path)
  env.close()
  return path


def run(args, timeout=600):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  return python_runs.run(['-m', *args], timeout=timeout, env=env)


@pytest.fixture(scope='module')
def recording(demonstrator, tmp_path_factory):
  """`tfrl-eval` plays 30 episodes of the controller with epsilon 0.2 and records them."""
  root = tmp_path_factory.mktemp('recording')
  record = str(root / 'data')
  result = run(['learners.eval', '--gin_file=bc_cartpole.gin', f'--root_dir={root}',
                f'--saved_model_dir={demonstrator}', f'--record_dir={record}',
                '--num_episodes=30', '--record_noise=0.2'])
  return result, record


def test_eval_records_the_episodes_it_evaluates(recording, demonstrator, tmp_path):
  result, record = recording
  assert result.returncode == 0, result.stderr[-3000:]
  data = rlds.read(record)
  assert data.num_episodes == 30
  logged = float(result.stderr.split('average return ')[1].split()[0])
  assert np.mean(data.episode_returns()) == pytest.approx(logged, abs=0.051)  # 1 decimal
  # Epsilon 0.2 shortens some episodes of a controller that balances for 500 steps.
  assert data.episode_returns().min() < 500
  assert rlds.read_metadata(record)['noise'] == 0.2
  # Recording again into the same directory is refused in one line.
  again = run(['learners.eval', '--gin_file=bc_cartpole.gin', f'--root_dir={tmp_path}',
               f'--saved_model_dir={demonstrator}', f'--record_dir={record}'])
  assert again.returncode != 0 and 'error: --record_dir: ' in again.stderr
  assert 'already holds files' in again.stderr


def test_noisy_policy_explores_at_its_rate():
  env = envs.make('CartPole-v1', num_envs=1)
  policy = behaviour.NoisyPolicy(BalancingPolicy(env.time_step_spec(), env.action_spec()),
                                 0.5, seed=1)
  time_step = env.reset()
  batch = tf.nest.map_structure(lambda x: tf.repeat(x, 4000, axis=0), time_step)
  greedy = BalancingPolicy(env.time_step_spec(), env.action_spec()).action(batch).action
  noisy = policy.action(batch).action.numpy()
  # Half the actions are random, and half of those differ from the greedy one.
  assert np.mean(noisy != greedy.numpy()) == pytest.approx(0.25, abs=0.03)
  env.close()
  with pytest.raises(ValueError, match='epsilon in'):
    behaviour.NoisyPolicy(policy, 1.5)


def test_behaviour_cloning_offline_reaches_the_demonstrators_return(recording, tmp_path):
  """BC (bc_cartpole.gin) from the recording alone: nothing collected, and the clone
  acts greedily, so it plays at least as well as the recorded (noisy) demonstrator, at
  475+, in the job's confirmed evaluation and in the export's fresh episodes."""
  _, record = recording
  data = rlds.read(record)
  root = str(tmp_path / 'bc')
  result = run(['learners.train_eval', f'--root_dir={root}', '--gin_file=bc_cartpole.gin',
                f"--gin_bindings=Experiment.dataset_dir = '{record}'"])
  assert result.returncode == 0, result.stderr[-3000:]  # a confirmed 475 was reached
  assert f'Loaded {data.num_transitions} transitions ({data.num_episodes} episodes' in \
      result.stderr
  lines = [l for l in result.stderr.splitlines() if '| env steps ' in l]
  assert lines and all('| env steps         0 |' in l for l in lines), lines
  final_step = int(result.stdout.split('Trained to step ')[1].split()[0])
  env = envs.make('CartPole-v1', num_envs=10, seed=777)
  policy = export.load_policy(os.path.join(root, 'policies', 'greedy_policy'))
  assert policy.get_train_step() == final_step
  played = actors.Evaluator(env, policy, 10).run()['AverageReturn']
  env.close()
  assert played >= max(float(np.mean(data.episode_returns())), 475.0), played


def test_cql_learns_from_the_dataset_where_plain_offline_dqn_does_not(recording, tmp_path):
  """cql_cartpole.gin reaches a confirmed 475 from the recording alone; the same job
  without the conservative term (offline Double DQN) stays near the floor: the values
  of the actions the data never takes run away. (In this process: the command line's
  offline path is the BC test's.)"""
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  dataset = f"Experiment.dataset_dir = '{recording[1]}'"
  cql = train_eval.run(str(tmp_path / 'cql'), ['cql_cartpole.gin'], [dataset])
  assert cql['reached_target'] and cql['env_steps'] == 0, cql['history']
  plain = train_eval.run(str(tmp_path / 'dqn'), ['cql_cartpole.gin'], [
      dataset, 'create_dqn_agent.cql_alpha = 0.0', 'Experiment.num_train_steps = 1500'])
  returns = [row['eval_return'] for row in plain['history']]
  assert not plain['reached_target'] and returns and max(returns) < 100, returns


def test_a_hybrid_job_collects_and_trains_on_both_halves(recording, tmp_path):
  """dqn_cartpole.gin with the recording mixed 50/50 into each batch (RLPD's symmetric
  sampling): the job collects as usual and reaches its confirmed target."""
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  result = train_eval.run(str(tmp_path / 'hybrid'), ['dqn_cartpole.gin'], [
      f"Experiment.dataset_dir = '{recording[1]}'", 'TransitionReplay.dataset_fraction = 0.5'])
  assert result['reached_target'] and result['env_steps'] > 0, result['history']


def _status_env_steps(stdout: str) -> list:
  """The env steps of each of the launcher's status lines."""
  return [int(m.group(1)) for m in re.finditer(r'^\[.*\] env steps (\d+)', stdout, re.M)]


def launch_offline(root: str, dataset_dir: str) -> subprocess.CompletedProcess:
  """`tfrl-launch` of bc_cartpole.gin on `dataset_dir`, which must end with status 0."""
  result = run(['learners.launch', f'--root_dir={root}', '--gin_file=bc_cartpole.gin',
                f"--gin_bindings=Experiment.dataset_dir = '{dataset_dir}'",
                '--status_interval_s=2'])
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  return result


def test_offline_job_as_separate_programs_has_no_collectors(recording, tmp_path):
  """`tfrl-launch` on an offline config: the server loads the dataset (its table
  samples only once all of it is in), the trainer and the evaluator run, no collector
  starts, and the job ends at its confirmed target with an export that plays."""
  _, record = recording
  root = str(tmp_path / 'launched')
  result = launch_offline(root, record)
  assert 'Offline job: no collectors' in result.stderr
  programs = set(os.listdir(os.path.join(root, 'logs'))) - {'fork_server.log'}
  assert sorted(programs) == ['eval.log', 'reverb_server.log', 'train.log']
  with open(os.path.join(root, 'logs', 'reverb_server.log')) as f:
    assert 'training offline' in f.read()
  statuses = _status_env_steps(result.stdout)
  assert statuses and set(statuses) == {0}, result.stdout[-3000:]
  env = envs.make('CartPole-v1', num_envs=10, seed=778)
  policy = export.load_policy(os.path.join(root, 'policies', 'greedy_policy'))
  assert actors.Evaluator(env, policy, 10).run()['AverageReturn'] >= 475.0
  env.close()


def test_a_hybrid_job_as_separate_programs_reaches_its_target(recording, tmp_path):
  """dqn_cartpole.gin with the recording mixed 50/50, under `tfrl-launch`: the server
  loads the dataset into its own table, two collectors fill the replay table, and the
  trainer's batches take both; the evaluator confirms the target."""
  _, record = recording
  root = str(tmp_path / 'hybrid')
  result = run(['learners.launch', f'--root_dir={root}', '--gin_file=dqn_cartpole.gin',
                f"--gin_bindings=Experiment.dataset_dir = '{record}'",
                '--gin_bindings=TransitionReplay.dataset_fraction = 0.5',
                '--num_collectors=2', '--status_interval_s=5'])
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  with open(os.path.join(root, 'logs', 'reverb_server.log')) as f:
    assert "32 of each batch's 64 rows come from it" in f.read()
  statuses = _status_env_steps(result.stdout)
  assert statuses and statuses[-1] > 0, result.stdout[-3000:]
  with open(os.path.join(root, 'eval', 'results.json')) as f:
    assert json.load(f)[-1]['reached_target']


def test_a_dataset_of_another_env_fails_the_job_in_one_line_naming_both(recording,
                                                                         tmp_path):
  _, record = recording
  result = run(['learners.train_eval', f'--root_dir={tmp_path / "job"}',
                '--gin_file=bc_cartpole.gin',
                "--gin_bindings=Experiment.env_name = 'Acrobot-v1'",
                f"--gin_bindings=Experiment.dataset_dir = '{record}'"])
  assert result.returncode != 0
  error = [l for l in result.stderr.splitlines() if l.startswith('error: ')]
  assert error and error[-1].startswith('error: Experiment.dataset_dir: ')
  assert 'float32[4]' in error[-1] and 'float32[6]' in error[-1], result.stderr[-2000:]


def test_fewer_episodes_than_envs_is_refused_naming_the_setting(recording):
  data = rlds.read(recording[1])
  with pytest.raises(rlds.DatasetError, match=r'The dataset has 30 episodes, fewer than '
                     r'the 32 envs it is written as: use Experiment.num_envs <= 30\.'):
    feeder.padded_indices(data, 32)


def test_a_job_records_every_episode_it_collects(tmp_path):
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  record = str(tmp_path / 'experience')
  # One collect iteration after the warm-up (128 train steps) already ends episodes in
  # both phases; nothing here depends on what the agent learns.
  result = train_eval.run(str(tmp_path / 'job'), ['dqn_cartpole.gin'], [
      f"Experiment.record_dir = '{record}'", 'Experiment.num_train_steps = 128',
      'Experiment.eval_interval = 128', 'Experiment.num_eval_episodes = 1',
      'Experiment.target_return = None'])
  data = rlds.read(record)
  # Every episode that ended, random warm-up included; at most one unfinished episode
  # per env (16 envs, CartPole's 500 steps) is left out.
  assert data.num_episodes > 16
  assert result['env_steps'] - 16 * 500 <= data.num_transitions <= result['env_steps']
  assert rlds.read_metadata(record)['env'] == 'CartPole-v1'

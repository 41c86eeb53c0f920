"""Continuous actions from a dataset: CQL-SAC (cql_pendulum.gin) and IQL
(iql_pendulum.gin) trained offline on a noisy swing-up controller's episodes play better
than the data they learned from."""
import functools
import os

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

from learners.configuration.experiment import Experiment
from tfrl import envs
from tfrl import export
from tfrl.agents import iql
from tfrl.datasets import rlds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SwingUpPolicy(tf_policy.TFPolicy):
  """Pendulum-v1's energy-based swing-up: pump energy toward the upright state's, then
  balance with a PD controller (returns about -140 on its own)."""

  def _distribution(self, time_step, policy_state):
    raise NotImplementedError

  def _action(self, time_step, policy_state, seed):
    cos, sin, velocity = tf.unstack(time_step.observation, axis=-1)
    angle = tf.atan2(sin, cos)  # 0: upright
    # theta'' = 15 sin(theta) + 3 u: 0.5 theta'^2 + 15 cos(theta) is 15 at the top.
    energy = 0.5 * velocity * velocity + 15.0 * cos
    pump = 2.0 * tf.sign(velocity * (15.0 - energy) + 1e-6)
    torque = tf.where(cos > 0.85, -(12.0 * angle + 2.5 * velocity), pump)
    return policy_step.PolicyStep(tf.clip_by_value(torque, -2.0, 2.0)[:, None],
                                  policy_state, ())


@pytest.fixture(scope='module')
def noisy_swing_ups(tmp_path_factory):
  """200 episodes of the controller with Gaussian noise of the whole half-range (std 2
  on a torque in [-2, 2]), recorded by `tfrl-eval`: a mean return near -390."""
  root = tmp_path_factory.mktemp('pendulum')
  env = envs.make('Pendulum-v1', num_envs=1)
  export.export_policy(SwingUpPolicy(env.time_step_spec(), env.action_spec()),
                       str(root / 'policy'))
  env.close()
  record = str(root / 'data')
  result = python_runs.run(
               ['-m', 'learners.eval', '--gin_file=cql_pendulum.gin', f'--root_dir={root / "rec"}', f'--saved_model_dir={root / "policy"}', f'--record_dir={record}', '--num_episodes=200', '--record_noise=1.0'],
               timeout=600,
               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO))
  assert result.returncode == 0, result.stderr[-3000:]
  return record


@pytest.mark.slow
@pytest.mark.parametrize('config', ['cql_pendulum.gin', 'iql_pendulum.gin'])
def test_offline_agent_beats_the_datasets_return(noisy_swing_ups, tmp_path, config):
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  data_return = float(np.mean(rlds.read(noisy_swing_ups).episode_returns()))
  assert -450 < data_return < -250, data_return  # a medium dataset, far from -140
  result = train_eval.run(str(tmp_path / 'run'), [config],
                          [f"Experiment.dataset_dir = '{noisy_swing_ups}'"])
  # reached_target: an evaluation and its confirmation on fresh seeds at -200 or more.
  assert result['reached_target'] and result['env_steps'] == 0, result['history']
  assert result['eval_return'] >= -200.0 > data_return, result['history']


def iql_experiment(dataset_dir, **builder_settings) -> Experiment:
  return Experiment(env_name='Pendulum-v1', num_envs=4, dataset_dir=dataset_dir,
                    agent_fn=functools.partial(iql.create_iql_agent, **builder_settings))


@pytest.mark.integration  # the dataset: 200 episodes recorded by tfrl-eval
def test_iql_scales_rewards_by_its_datasets_return_range_unless_told(noisy_swing_ups):
  """The IQL authors' locomotion scale, 1000 / (highest - lowest episode return), comes
  from the job's dataset; a set scale wins, and without a dataset rewards stay as
  they are."""
  returns = rlds.read(noisy_swing_ups).episode_returns()
  assert returns.max() - returns.min() > 100, returns  # a spread the scale depends on
  _, agent = iql_experiment(noisy_swing_ups).build_agent()
  assert agent.reward_scale_factor == pytest.approx(1000.0 / (returns.max() - returns.min()))
  _, agent = iql_experiment(noisy_swing_ups, reward_scale_factor=0.5).build_agent()
  assert agent.reward_scale_factor == 0.5
  _, agent = iql_experiment(None).build_agent()
  assert agent.reward_scale_factor == 1.0


def test_iql_on_a_reverb_checkpoint_asks_for_its_reward_scale(tmp_path):
  """A finished job's Reverb checkpoint (ALF's offline_buffer_dir) holds items, not
  episodes with their returns: the one-line error names the setting to give."""
  checkpoint = tmp_path / 'checkpoint'
  checkpoint.mkdir()
  for name in ('DONE', 'tables.tfrecord'):  # what marks a complete Reverb checkpoint
    (checkpoint / name).write_bytes(b'')
  with pytest.raises(rlds.DatasetError,
                     match=r'holds a Reverb checkpoint: set '
                           r'create_iql_agent\.reward_scale_factor'):
    iql_experiment(str(checkpoint)).build_agent()
  _, agent = iql_experiment(str(checkpoint), reward_scale_factor=2.0).build_agent()
  assert agent.reward_scale_factor == 2.0

"""TFLite conversion of exported policies (tfrl/tflite.py, tfrl-export --tflite): the
converted model's actions equal the SavedModel's; a recurrent policy is refused with
the reason, by the library and by the program."""
import os

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf

from tfrl import envs
from tfrl import export
from tfrl import learner as learner_lib
from tfrl import tflite
from tfrl import triggers
from tfrl.agents import ppo
from tfrl.agents import sac

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _greedy_export(env_id, create, path, **kwargs):
  env = envs.make(env_id, num_envs=1)
  tf.keras.utils.set_random_seed(0)
  agent = create(env.time_step_spec(), env.action_spec(), learner_lib.new_train_step(),
                 **kwargs)
  observations = np.random.RandomState(0).uniform(
      -1, 1, [8] + env.observation_spec().shape.as_list()).astype(np.float32)
  env.close()
  return export.export_policy(triggers.greedy(agent), path), observations


def _tflite_actions(model_path, observations):
  interpreter = tf.lite.Interpreter(model_path=model_path)
  runner = interpreter.get_signature_runner('serving_default')
  return runner(observation=observations)['action']


@pytest.mark.parametrize('env_id, create, kwargs', [
    ('CartPole-v1', ppo.create_ppo_agent, dict(fc_layer_params=(16,))),
    ('Pendulum-v1', ppo.create_ppo_agent, dict(fc_layer_params=(16,))),
    ('Pendulum-v1', sac.create_sac_agent, dict(actor_fc_layer_params=(16,),
                                               critic_joint_fc_layer_params=(16,))),
], ids=['ppo_discrete', 'ppo_continuous', 'sac'])
def test_converted_policy_acts_as_the_saved_model(tmp_path, env_id, create, kwargs):
  path, observations = _greedy_export(env_id, create, str(tmp_path / 'greedy'), **kwargs)
  served = tf.saved_model.load(path).signatures['serving_default'](
      observation=tf.constant(observations))['action'].numpy()
  model = tflite.convert(path, str(tmp_path / 'policy.tflite'))
  np.testing.assert_allclose(_tflite_actions(model, observations), served, rtol=1e-5,
                             atol=1e-6)


def _run_program(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  return python_runs.run(['-m', 'learners.export_policy', *args], timeout=300, env=env)


def test_the_program_writes_the_model(tmp_path):
  path, observations = _greedy_export('CartPole-v1', ppo.create_ppo_agent,
                                      str(tmp_path / 'greedy'), fc_layer_params=(16,))
  model = tmp_path / 'policy.tflite'
  result = _run_program(f'--saved_model_dir={path}', f'--tflite={model}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'TFLite model of {path} written to {model}.' in result.stderr
  assert _tflite_actions(str(model), observations).shape == (8,)


def test_a_recurrent_policy_is_refused_with_the_reason(tmp_path):
  path, _ = _greedy_export('CartPole-v1', ppo.create_ppo_agent, str(tmp_path / 'lstm'),
                           fc_layer_params=(16,), lstm_size=8)
  with pytest.raises(tflite.NotConvertibleError, match='recurrent policy'):
    tflite.convert(path, str(tmp_path / 'lstm.tflite'))
  # The program says the same in one line, with status 2.
  result = _run_program(f'--saved_model_dir={path}', f'--tflite={tmp_path / "x.tflite"}')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith(
      f'error: --saved_model_dir: {path} is a recurrent policy')

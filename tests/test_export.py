"""Tests for tfrl.export: SavedModels that plain TensorFlow and tf-agents both load.

The loading side of the main export runs in fresh interpreters: one with nothing but
TensorFlow imported, one with tf-agents' `SavedModelPyTFEagerPolicy`. Both start as soon
as the export exists (the `exported` fixture) and run while the in-process tests do.
"""
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from typing import Dict, List

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.policies import random_tf_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl import export

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBS_DIM, NUM_ACTIONS = 4, 3
OBSERVATIONS = np.random.RandomState(5).randn(3, OBS_DIM).astype(np.float32)
PLAIN_TF_TEST = 'test_plain_tensorflow_process_loads_and_serves_the_export'
TF_AGENTS_TEST = 'test_tf_agents_saved_model_policy_loads_acts_and_updates'

# Imports TensorFlow only, loads the export and calls it three ways.
_PLAIN_TF_SCRIPT = textwrap.dedent('''
    import collections, json, sys
    import numpy as np
    import tensorflow as tf

    path, observations = sys.argv[1], np.array(json.loads(sys.argv[2]), np.float32)
    model = tf.saved_model.load(path)
    n = len(observations)
    inputs = dict(step_type=tf.zeros([n], tf.int32), reward=tf.zeros([n], tf.float32),
                  discount=tf.ones([n], tf.float32), observation=tf.constant(observations))
    # A namedtuple with the name and fields of tf-agents' TimeStep, defined here.
    TimeStep = collections.namedtuple('TimeStep',
                                      ['step_type', 'reward', 'discount', 'observation'])
    result = {
        'action_signature': model.signatures['action'](**inputs)['action'].numpy().tolist(),
        # TF Serving's default: the observation alone (step type, reward, discount
        # defaulted).
        'serving_default': model.signatures['serving_default'](
            observation=inputs['observation'])['action'].numpy().tolist(),
        'serving_default_inputs': sorted(
            model.signatures['serving_default'].structured_input_signature[1]),
        'action_attribute': model.action(TimeStep(**inputs), ()).action.numpy().tolist(),
        'get_train_step': int(model.get_train_step()),
        'train_step_signature': int(model.signatures['get_train_step']()['train_step']),
        'metadata_signature': {k: int(v) for k, v in
                               model.signatures['get_metadata']().items()},
        'modules': sorted(m for m in sys.modules if m.split('.')[0] in
                          ('tf_agents', 'tensorflow_probability', 'tfrl')),
    }
    print('RESULT ' + json.dumps(result))
''')

# Loads the export with tf-agents' loader, acts on unbatched time steps, then applies a
# variables-only checkpoint.
_TF_AGENTS_SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    from tf_agents.policies import py_tf_eager_policy
    from tf_agents.trajectories import time_step as ts

    path, checkpoint = sys.argv[1], sys.argv[2]
    observations = np.array(json.loads(sys.argv[3]), np.float32)
    policy = py_tf_eager_policy.SavedModelPyTFEagerPolicy(path, load_specs_from_pbtxt=True)

    def act():
      actions = []
      for observation in observations:
        time_step = ts.TimeStep(np.array(0, np.int32), np.array(0, np.float32),
                                np.array(1, np.float32), observation)
        action = policy.action(time_step).action
        assert np.shape(action) == (), np.shape(action)
        actions.append(int(action))
      return actions

    result = {'actions': act(), 'train_step': int(policy.get_train_step()),
              'metadata': {k: int(v) for k, v in policy.get_metadata().items()}}
    policy.update_from_checkpoint(checkpoint)
    result.update({
        'updated_actions': act(), 'updated_train_step': int(policy.get_train_step()),
        'updated_metadata': {k: int(v) for k, v in policy.get_metadata().items()},
        'updated_variables': [v.numpy().tolist() for v in policy.variables()]})
    print('RESULT ' + json.dumps(result))
''')


def make_agent(fc_layer_params=(8,), seed=0):
  time_step_spec = ts.time_step_spec(tensor_spec.TensorSpec([OBS_DIM], tf.float32))
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, NUM_ACTIONS - 1)
  tf.random.set_seed(seed)
  network = q_network.QNetwork(time_step_spec.observation, action_spec,
                               fc_layer_params=fc_layer_params)
  agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=network,
                             optimizer=tf.keras.optimizers.Adam(1e-3))
  agent.initialize()
  return agent


def batched_time_step(observations=OBSERVATIONS):
  return ts.restart(tf.constant(observations), batch_size=len(observations))


def greedy_actions(policy) -> List[int]:
  return policy.action(batched_time_step()).action.numpy().tolist()


@dataclasses.dataclass
class Exported:
  path: str
  checkpoint: str  # A variables-only checkpoint of other weights, train step and metadata.
  actions: List[int]  # The greedy actions on OBSERVATIONS with the exported weights.
  updated_actions: List[int]  # ... and with the checkpoint's weights.
  updated_variables: List[np.ndarray]
  processes: Dict[str, subprocess.Popen]


def start_script(script, *args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
  return subprocess.Popen([sys.executable, '-c', script] + list(args), cwd=REPO_ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def script_result(process):
  stdout, stderr = process.communicate(timeout=300)
  assert process.returncode == 0, stderr[-5000:]
  return json.loads(stdout.split('RESULT ', 1)[1])


@pytest.fixture(scope='module')
def exported(request, tmp_path_factory):
  """A DqnAgent's greedy policy exported at train step 7 with env_steps=123 metadata."""
  root = tmp_path_factory.mktemp('export')
  agent = make_agent()
  train_step = tf.Variable(7, dtype=tf.int64)
  env_steps = tf.Variable(123, dtype=tf.int64)
  path = export.export_policy(agent.policy, str(root / 'greedy_policy'), train_step,
                              {'env_steps': env_steps})
  actions = greedy_actions(agent.policy)

  # New weights: negated Q-values, so every greedy action changes (argmax -> argmin).
  for variable in agent.policy.variables()[-2:]:
    variable.assign(-variable)
  train_step.assign(9)
  env_steps.assign(456)
  module = export.PolicyModule(agent.policy, train_step, {'env_steps': env_steps})
  checkpoint = export.write_policy_checkpoint(module, str(root / 'policy_checkpoint_9'))
  updated_actions = greedy_actions(agent.policy)
  assert all(a != b for a, b in zip(actions, updated_actions))

  selected = {item.name for item in request.session.items}
  observations = json.dumps(OBSERVATIONS.tolist())
  processes = {}
  if PLAIN_TF_TEST in selected:
    processes[PLAIN_TF_TEST] = start_script(_PLAIN_TF_SCRIPT, path, observations)
  if TF_AGENTS_TEST in selected:
    processes[TF_AGENTS_TEST] = start_script(_TF_AGENTS_SCRIPT, path, checkpoint,
                                             observations)
  yield Exported(path, checkpoint, actions, updated_actions,
                 [v.numpy() for v in agent.policy.variables()], processes)
  for process in processes.values():
    if process.poll() is None:
      process.kill()
      process.communicate()


# In-process loading with tfrl.export.


def test_export_writes_a_saved_model_with_the_spec_file(exported):
  assert tf.saved_model.contains_saved_model(exported.path)
  assert os.path.isfile(os.path.join(exported.path, export.POLICY_SPECS_PBTXT))
  # The atomic write leaves no temporary directories next to the export.
  assert sorted(os.listdir(os.path.dirname(exported.path))) == [
      'greedy_policy', 'policy_checkpoint_9']


def test_load_policy_acts_like_the_policy_and_updates_from_checkpoint(exported):
  loaded = export.load_policy(exported.path)

  assert loaded.action(batched_time_step()).action.numpy().tolist() == exported.actions
  assert loaded.get_train_step() == 7
  assert loaded.get_metadata() == {'env_steps': 123}

  loaded.update_from_checkpoint(exported.checkpoint)

  assert loaded.action(batched_time_step()).action.numpy().tolist() == (
      exported.updated_actions)
  assert len(loaded.model_variables) == len(exported.updated_variables)
  for variable, expected in zip(loaded.model_variables, exported.updated_variables):
    np.testing.assert_array_equal(variable.numpy(), expected)
  assert loaded.get_train_step() == 9
  assert loaded.get_metadata() == {'env_steps': 456}


def test_predict_acts_on_numpy_observations_single_or_batched(exported):
  loaded = export.load_policy(exported.path)

  actions, state = loaded.predict(OBSERVATIONS)
  assert actions.tolist() == exported.actions and state is None
  # One observation, as the env returns it (float64 here): an action without batch.
  action, state = loaded.predict(OBSERVATIONS[1].astype(np.float64))
  assert np.shape(action) == () and int(action) == exported.actions[1] and state is None
  with pytest.raises(ValueError, match=r'shape \(3, 5\) does not fit .*\[4\]'):
    loaded.predict(np.zeros([3, 5]))
  with pytest.raises(ValueError, match='structure of the policy'):
    loaded.predict({'a': OBSERVATIONS})


def _other_network_policy(fc_layer_params):
  return lambda: make_agent(fc_layer_params=fc_layer_params).policy


def _policy_without_variables():
  agent = make_agent()
  return random_tf_policy.RandomTFPolicy(agent.time_step_spec, agent.action_spec)


@pytest.mark.parametrize('make_policy', [
    _other_network_policy((5,)),
    # Its first variable has the export's shape, the second does not.
    _other_network_policy((8, 4)),
    _policy_without_variables,
], ids=['other_shapes', 'first_shape_matches', 'no_model_variables'])
def test_update_from_checkpoint_of_another_policy_raises_and_changes_nothing(
    make_policy, exported, tmp_path):
  checkpoint = export.write_policy_checkpoint(
      export.PolicyModule(make_policy(), tf.Variable(99, dtype=tf.int64)),
      str(tmp_path / 'other_checkpoint'))
  loaded = export.load_policy(exported.path)
  before = [v.numpy().copy() for v in loaded.model_variables]

  with pytest.raises(ValueError, match='other_checkpoint'):
    loaded.update_from_checkpoint(checkpoint)

  # A failed update leaves the loaded policy as it was: no mix of old and new values.
  for variable, value in zip(loaded.model_variables, before):
    np.testing.assert_array_equal(variable.numpy(), value)
  assert loaded.get_train_step() == 7
  assert loaded.action(batched_time_step()).action.numpy().tolist() == exported.actions


def test_a_module_exported_again_serves_the_values_it_has_then(tmp_path):
  """A job exports one module at every saved-model interval and at its end: the
  signatures traced for the first export serve each later export's own weights, train
  step and metadata."""
  agent = make_agent()
  train_step, env_steps = tf.Variable(3, dtype=tf.int64), tf.Variable(10, dtype=tf.int64)
  module = export.PolicyModule(agent.policy, train_step, {'env_steps': env_steps})
  first = export.save_module(module, str(tmp_path / 'first'))
  actions = greedy_actions(agent.policy)
  for variable in agent.policy.variables()[-2:]:
    variable.assign(-variable)
  train_step.assign(4)
  env_steps.assign(20)
  second = export.save_module(module, str(tmp_path / 'second'))
  updated_actions = greedy_actions(agent.policy)
  assert actions != updated_actions

  for path, step, steps, expected in ((first, 3, 10, actions),
                                      (second, 4, 20, updated_actions)):
    loaded = export.load_policy(path)
    assert loaded.action(batched_time_step()).action.numpy().tolist() == expected
    assert loaded.get_train_step() == step and loaded.get_metadata() == {'env_steps': steps}
    served = tf.saved_model.load(path).signatures['serving_default'](
        observation=tf.constant(OBSERVATIONS, tf.float32))
    assert served['action'].numpy().tolist() == expected


def test_load_policy_on_a_missing_directory_names_it(tmp_path):
  missing = str(tmp_path / 'no_export_here')
  with pytest.raises(FileNotFoundError, match='no_export_here'):
    export.load_policy(missing)


def test_dict_observations_become_named_signature_inputs(tmp_path):
  observation_spec = {'a': tensor_spec.TensorSpec([2], tf.float32),
                      'b': tensor_spec.BoundedTensorSpec([3], tf.int32, 0, 5)}
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, NUM_ACTIONS - 1)
  policy = random_tf_policy.RandomTFPolicy(ts.time_step_spec(observation_spec),
                                           action_spec)
  path = export.export_policy(policy, str(tmp_path / 'dict_policy'))
  model = tf.saved_model.load(path)
  signature = model.signatures['action']

  _, inputs = signature.structured_input_signature
  assert set(inputs) == {'step_type', 'reward', 'discount', 'observation_a',
                         'observation_b'}
  assert inputs['observation_a'].shape.as_list() == [None, 2]
  assert inputs['observation_b'].dtype == tf.int32
  outputs = signature(step_type=tf.zeros([5], tf.int32), reward=tf.zeros([5]),
                      discount=tf.ones([5]), observation_a=tf.zeros([5, 2]),
                      observation_b=tf.zeros([5, 3], tf.int32))
  assert set(outputs) == {'action'}
  actions = outputs['action'].numpy()
  assert actions.shape == (5,) and actions.min() >= 0 and actions.max() < NUM_ACTIONS
  assert model.get_train_step().numpy() == 0
  # predict takes a Dict observation as the env gives it, lists included, one or a batch.
  loaded = export.load_policy(path)
  action, state = loaded.predict({'a': [0.5, -0.5], 'b': [1, 2, 3]})
  assert np.shape(action) == () and 0 <= int(action) < NUM_ACTIONS and state is None
  actions, _ = loaded.predict({'a': np.zeros([4, 2]), 'b': np.ones([4, 3], np.int64)})
  assert actions.shape == (4,)
  with pytest.raises(ValueError, match='structure of the policy'):
    loaded.predict({'a': [0.5, -0.5]})
  # A lone export (not a job's greedy/collect pair) cannot be asked to sample.
  with pytest.raises(ValueError, match='lone export'):
    loaded.predict({'a': [0.5, -0.5], 'b': [1, 2, 3]}, deterministic=False)


# Loading in other processes (started by the `exported` fixture).


@pytest.mark.integration
def test_plain_tensorflow_process_loads_and_serves_the_export(exported):
  result = script_result(exported.processes[PLAIN_TF_TEST])

  assert result['modules'] == []  # Neither tf-agents, TFP nor tfrl was imported.
  assert result['action_signature'] == exported.actions
  assert result['serving_default'] == exported.actions
  assert result['serving_default_inputs'] == ['observation']
  assert result['action_attribute'] == exported.actions
  assert result['get_train_step'] == result['train_step_signature'] == 7
  assert result['metadata_signature'] == {'train_step': 7, 'env_steps': 123}


def test_tf_agents_saved_model_policy_loads_acts_and_updates(exported):
  result = script_result(exported.processes[TF_AGENTS_TEST])

  assert result['actions'] == exported.actions
  assert result['train_step'] == 7
  assert result['metadata'] == {'env_steps': 123}
  # update_from_checkpoint applies the new weights, train step and metadata.
  assert result['updated_actions'] == exported.updated_actions
  assert result['updated_train_step'] == 9
  assert result['updated_metadata'] == {'env_steps': 456}
  assert len(result['updated_variables']) == len(exported.updated_variables)
  for variable, expected in zip(result['updated_variables'], exported.updated_variables):
    np.testing.assert_array_equal(np.array(variable, np.float32), expected)

"""Recurrent (LSTM) actor-critic policies end to end: the network unrolls from a stored
state and resets at FIRST; the sequence writer stores the state each unroll starts from
and the dataset hands it to the agent; the agents train from it; the exported policy
takes and returns the state in plain TensorFlow and in tf-agents' loader.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from tfrl import actors
from tfrl import envs
from tfrl import export
from tfrl import layouts
from tfrl import learner as learner_lib
from tfrl import triggers
from tfrl.agents import impala
from tfrl.agents import interface
from tfrl.agents import ppo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNROLL = 5
NUM_ENVS = 4


def to_tensors(nest):
  return tf.nest.map_structure(tf.convert_to_tensor, nest)


@pytest.fixture
def cartpole():
  env = envs.make('CartPole-v1', num_envs=NUM_ENVS, seed=0)
  yield env
  env.close()


def make_ppo(env, **kwargs):
  tf.keras.utils.set_random_seed(0)
  return ppo.create_ppo_agent(env.time_step_spec(), env.action_spec(),
                              learner_lib.new_train_step(), fc_layer_params=(16,),
                              lstm_size=8, **kwargs)


def test_unrolled_network_equals_stepping_with_resets_at_first(cartpole):
  agent = make_ppo(cartpole)
  policy, network = agent.collect_policy, agent._network  # pylint: disable=protected-access
  time_step, state = to_tensors(cartpole.reset()), policy.get_initial_state(NUM_ENVS)
  steps, states = [], [state]
  for _ in range(40):
    step = policy.action(time_step, state)
    steps.append((time_step, step.info['logits']))
    state = step.state
    states.append(state)
    time_step = to_tensors(cartpole.step(step.action.numpy()))
  step_types = tf.stack([t.step_type for t, _ in steps])
  assert np.sum(step_types.numpy()[1:] == int(ts.StepType.FIRST)) > 0  # resets inside
  observations = tf.stack([t.observation for t, _ in steps])
  stepped = np.stack([logits for _, logits in steps])
  for start in (0, 17):
    (params, _), final = network(observations[start:], step_types[start:], states[start])
    np.testing.assert_allclose(params['logits'], stepped[start:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final[0], states[-1][0], rtol=1e-5, atol=1e-6)
  # Another starting state gives other outputs (until every env has reset).
  (params, _), _ = network(observations[17:], step_types[17:], states[0])
  assert not np.allclose(params['logits'][0], stepped[17])


class _StateRecorder:
  """A writer that keeps the observation and the state the policy acted from at every
  step."""

  def __init__(self):
    self.observations, self.states = [], []

  def write(self, time_step, policy_step, next_time_step, policy_version=0,
            policy_state=()):
    del policy_step, next_time_step, policy_version
    self.observations.append(np.array(time_step.observation))
    self.states.append(tf.nest.map_structure(np.array, policy_state))

  def reset(self):
    pass

  def flush(self):
    pass


def test_items_hold_the_state_each_unroll_starts_from(cartpole, reverb_server_factory):
  agent = make_ppo(cartpole)
  layout = layouts.SequenceQueue(NUM_ENVS, NUM_ENVS, unroll_length=UNROLL,
                                 queue_capacity=64)
  server = reverb_server_factory(layout.tables(agent))
  writer, recorder = layout.make_writer(server.client), _StateRecorder()
  actors.Actor(cartpole, agent.collect_policy, [writer, recorder]).run(3 * UNROLL + 1)
  writer.close()
  # A sample timeout: the prefetch asks for more unrolls than were written.
  dataset = layout.dataset_fn(server.address, agent, sample_timeout_ms=1000)(
      tf.distribute.InputContext())
  starts = [recorder.observations[unroll * UNROLL] for unroll in range(3)]
  sampled = []
  for experience, info in dataset.take(3):
    assert experience.observation.shape == (NUM_ENVS, UNROLL + 1, 4)
    # Reverb's parallel sample workers may hand queue items out of order: find the
    # unroll this item is by its first observations.
    first = experience.observation[:, 0].numpy()
    unroll = next(u for u, obs in enumerate(starts) if np.array_equal(obs, first))
    sampled.append(unroll)
    for got, recorded in zip(info['policy_state'], recorder.states[unroll * UNROLL]):
      np.testing.assert_allclose(got, recorded, rtol=1e-6)
  assert sorted(sampled) == [0, 1, 2]
  # And what the agent is given: its declared input.
  assert interface.train_inputs(agent) == ('policy_state',)
  kwargs = layout.train_inputs_fn(agent)(experience, info)
  assert set(kwargs) == {'experience', 'policy_state'}


def test_recurrent_agents_train_from_the_stored_state_and_refuse_without_it(
    cartpole, reverb_server_factory):
  agent = make_ppo(cartpole)
  layout = layouts.SequenceQueue(NUM_ENVS, NUM_ENVS, unroll_length=UNROLL,
                                 queue_capacity=64)
  server = reverb_server_factory(layout.tables(agent))
  writer = layout.make_writer(server.client)
  actors.Actor(cartpole, agent.collect_policy, [writer]).run(2 * UNROLL + 1)
  writer.close()
  experience, info = next(iter(layout.dataset_fn(server.address, agent, 1000)(
      tf.distribute.InputContext())))
  with pytest.raises(ValueError, match="'policy_state' train input"):
    agent.train(experience)
  for create in (ppo.create_ppo_agent, impala.create_impala_agent):
    recurrent = create(cartpole.time_step_spec(), cartpole.action_spec(),
                       learner_lib.new_train_step(), fc_layer_params=(16,), lstm_size=8)
    loss_info = recurrent.train(experience, policy_state=info['policy_state'])
    assert np.isfinite(float(loss_info.loss))
  with pytest.raises(ValueError, match="shuffle='rows' with an LSTM"):
    make_ppo(cartpole, shuffle='steps')


@pytest.mark.parametrize('name,kwargs', [
    ('appo', dict(policy_loss='ppo', max_policy_lag=3)),
    ('clear', dict(policy_cloning_cost=0.5, value_cloning_cost=0.5)),
])
def test_recurrent_appo_and_clear_train_through_their_layouts(
    cartpole, reverb_server_factory, name, kwargs):
  """What each declares (policy versions; replayed rows) arrives beside the states,
  and the recurrent loss trains on it: the weights move."""
  agent = impala.create_impala_agent(cartpole.time_step_spec(), cartpole.action_spec(),
                                     learner_lib.new_train_step(), fc_layer_params=(16,),
                                     lstm_size=8, **kwargs)
  if name == 'clear':
    layout = layouts.SequenceQueueAndReplay(NUM_ENVS, 2 * NUM_ENVS, unroll_length=UNROLL,
                                            queue_capacity=64, replay_capacity=64,
                                            replay_fraction=0.5)
  else:
    layout = layouts.SequenceQueue(NUM_ENVS, NUM_ENVS, unroll_length=UNROLL,
                                   queue_capacity=64)
  layout.check_agent(agent)
  server = reverb_server_factory(layout.tables(agent))
  writer = layout.make_writer(server.client)
  actors.Actor(cartpole, agent.collect_policy, [writer]).run(3 * UNROLL + 1)
  writer.close()
  dataset = layout.dataset_fn(server.address, agent, 1000)(tf.distribute.InputContext())
  before = [v.numpy().copy() for v in agent._network.trainable_variables]  # pylint: disable=protected-access
  for experience, info in dataset.take(2):
    kwargs = layout.train_inputs_fn(agent)(experience, info)
    assert set(kwargs) == {'experience', 'policy_state', *interface.train_inputs(agent)}
    loss_info = agent.train(**kwargs)
    assert np.isfinite(float(loss_info.loss))
  if name == 'clear':
    # The second batch's replayed unrolls were acted by the weights before the first
    # step: the cloning KL to them is no longer zero.
    assert float(loss_info.extra.policy_cloning_loss) > 0
  moved = [not np.allclose(a, b.numpy()) for a, b in zip(
      before, agent._network.trainable_variables)]  # pylint: disable=protected-access
  assert any(moved)


_PLAIN_TF_SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import tensorflow as tf
    path, observations = sys.argv[1], np.array(json.loads(sys.argv[2]), np.float32)
    model = tf.saved_model.load(path)
    batch = observations.shape[1]
    state = model.signatures['get_initial_state'](batch_size=tf.constant(batch))
    actions = []
    for t, observation in enumerate(observations):
      inputs = dict(step_type=tf.fill([batch], 0 if t == 0 else 1),
                    reward=tf.zeros([batch]), discount=tf.ones([batch]),
                    observation=tf.constant(observation), **state)
      out = model.signatures['action'](**inputs)
      actions.append(out['action'].numpy().tolist())
      state = {k: v for k, v in out.items() if k.startswith('policy_state')}
    # TF Serving's default signature: observation and state in, step type defaulted.
    served = []
    state = model.signatures['get_initial_state'](batch_size=tf.constant(batch))
    for observation in observations:
      out = model.signatures['serving_default'](observation=tf.constant(observation),
                                                **state)
      served.append(out['action'].numpy().tolist())
      state = {k: v for k, v in out.items() if k.startswith('policy_state')}
    print('RESULT ' + json.dumps({'actions': actions, 'served': served,
                                  'state_keys': sorted(state)}))
''')

_TF_AGENTS_SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    from tf_agents.policies import py_tf_eager_policy
    from tf_agents.trajectories import time_step as ts
    path, observations = sys.argv[1], np.array(json.loads(sys.argv[2]), np.float32)
    policy = py_tf_eager_policy.SavedModelPyTFEagerPolicy(path, load_specs_from_pbtxt=True)
    state = policy.get_initial_state(1)
    actions = []
    for t, observation in enumerate(observations[:, 0]):
      # Unbatched, as tf-agents' py policies take them (the loader adds the batch).
      time_step = ts.TimeStep(np.array(0 if t == 0 else 1, np.int32),
                              np.array(0, np.float32), np.array(1, np.float32), observation)
      step = policy.action(time_step, state)
      actions.append(int(np.asarray(step.action).reshape(-1)[0]))
      state = step.state
    print('RESULT ' + json.dumps({'actions': actions}))
''')


def _greedy_and_its_actions(cartpole):
  """A recurrent greedy policy, 12 steps of observations for 2 envs on which its actions
  depend on the state, and its actions on them (state carried in TensorFlow)."""
  agent = make_ppo(cartpole)
  greedy = triggers.greedy(agent)
  rng = np.random.RandomState(3)
  observations = (0.3 * rng.randn(12, 2, 4)).astype(np.float32)
  state, expected = greedy.get_initial_state(2), []
  for t, observation in enumerate(observations):
    time_step = ts.TimeStep(tf.fill([2], 0 if t == 0 else 1), tf.zeros([2]), tf.ones([2]),
                            tf.constant(observation))
    step = greedy.action(time_step, state)
    expected.append(step.action.numpy().tolist())
    state = step.state
  return greedy, observations, expected


def test_exported_recurrent_policy_predicts_on_numpy_carrying_its_state(cartpole, tmp_path):
  greedy, observations, expected = _greedy_and_its_actions(cartpole)
  loaded = export.load_policy(export.export_policy(greedy, str(tmp_path / 'greedy')))
  state, batched, single, single_state = None, [], [], None
  for observation in observations:
    action, state = loaded.predict(observation, state)
    batched.append(action.tolist())
    action, single_state = loaded.predict(observation[0], single_state)
    assert np.shape(action) == ()
    single.append(int(action))
  assert batched == expected
  assert single == [row[0] for row in expected]
  # episode_start resets the entries it names, as a None state resets all.
  first, _ = loaded.predict(observations[0], None)
  restarted, _ = loaded.predict(observations[0], state, episode_start=[True, True])
  assert restarted.tolist() == first.tolist()


@pytest.mark.integration
def test_exported_recurrent_policy_carries_its_state_outside_tfrl(cartpole, tmp_path):
  greedy, observations, expected = _greedy_and_its_actions(cartpole)
  path = export.export_policy(greedy, str(tmp_path / 'greedy_policy'))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
  results = {}
  for name, script in (('plain', _PLAIN_TF_SCRIPT), ('tf_agents', _TF_AGENTS_SCRIPT)):
    process = subprocess.run([sys.executable, '-c', script, path,
                              json.dumps(observations.tolist())], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-4000:]
    results[name] = json.loads(process.stdout.split('RESULT ', 1)[1])
  assert results['plain']['actions'] == expected
  assert results['plain']['served'] == expected
  assert results['plain']['state_keys'] and all(
      key.startswith('policy_state') for key in results['plain']['state_keys'])
  assert results['tf_agents']['actions'] == [row[0] for row in expected]

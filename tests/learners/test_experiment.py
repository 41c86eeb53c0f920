"""`Experiment` and its data layouts: what they build for every program, checked on
real Reverb tables.

The learning tests show each algorithm learns; these check the data each one trains on:
CLEAR's fresh/replayed mix and its replay mask, prioritized replay's importance weights
and priority write-back, APPO's policy versions, the agents' declared inputs, and the
settings errors.
"""
import functools
import itertools
import json
import os
import re
import textwrap

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent

from tfrl import actors
from tfrl import replay
from tfrl.agents import clear
from tfrl.agents import impala
from tfrl.agents import ppo
from tfrl.agents import sac
from tfrl.layouts import QUEUE_TABLE, REPLAY_TABLE
from learners.configuration import config
from learners.configuration.experiment import Experiment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(exp, reverb_server_factory):
  """(agent, server): the experiment's agent and an embedded server with its tables."""
  _, agent = exp.build_agent()
  return agent, reverb_server_factory(exp.layout.tables(agent))


def sampled_keys(server, num_samples=300):
  """The keys of the replay items that `num_samples` draws hit, sorted."""
  return sorted({int(s.info.key) for s in server.client.sample(
      REPLAY_TABLE, num_samples=num_samples, emit_timesteps=False)})


def fill(exp, server, agent, vector_steps, policy_version=0):
  """Collects `vector_steps` with the agent's collect policy into the experiment's tables."""
  env = exp.make_env()
  writer = exp.layout.make_writer(server.client)
  actors.Actor(env, agent.collect_policy, [writer], policy_version=policy_version).run(
      vector_steps)
  writer.close()
  env.close()
  return writer.items_created


def train_batches(exp, server, agent):
  """The Learner's `(train kwargs, info)` batches (default strategy)."""
  dataset = exp.layout.dataset_fn(server.address, agent)(
      tf.distribute.InputContext())
  train_inputs = exp.layout.train_inputs_fn(agent)
  for experience, info in dataset:
    yield train_inputs(experience, info), info


def first_batch(exp, server, agent):
  return next(train_batches(exp, server, agent))


def sizes(server):
  return {name: info.current_size for name, info in server.client.server_info().items()}


CLEAR_AGENT = functools.partial(clear.create_clear_agent, policy_cloning_cost=0.01)


@pytest.mark.parametrize('kwargs,message', [
    (dict(layout_settings=dict(n_step=0)),
     'TransitionReplay.n_step = 0: must be an integer >= 1'),
    (dict(layout_settings=dict(unroll_length=8)),
     'TransitionReplay.unroll_length = 8: TransitionReplay has no such setting'),
    (dict(layout_settings=dict(num_envs=8)),
     'TransitionReplay.num_envs = 8: the Experiment sets it'),
    (dict(agent_fn=ppo.create_ppo_agent, layout_settings=dict(prioritized=True)),
     'SequenceQueue.prioritized = True: SequenceQueue has no such setting'),
    (dict(agent_fn=lambda *args, **kwargs: None), 'names no data layout'),
    (dict(agent_fn=CLEAR_AGENT, layout_settings=dict(replay_fraction=1.0)),
     'SequenceQueueAndReplay.replay_fraction = 1.0: must be a number in (0, 1)'),
    (dict(agent_fn=CLEAR_AGENT, layout_settings=dict(replay_remover='lifo')),
     "SequenceQueueAndReplay.replay_remover = 'lifo': must be one of"),
    (dict(num_envs=16, batch_size=24), 'batch_size=24 must be a multiple or a divisor'),
    (dict(num_envs=4, batch_size=8, layout_settings=dict(steps_per_item=3)),
     'batch_size=8 must be a multiple of the 12 rows per item'),
    (dict(agent_fn=CLEAR_AGENT, num_envs=4, batch_size=8,
          layout_settings=dict(replay_fraction=0.8)), 'leaves no fresh unrolls'),
    (dict(agent_fn=CLEAR_AGENT, num_envs=8, batch_size=8,
          layout_settings=dict(replay_fraction=0.3)), 'rounds to no replayed unrolls'),
])
def test_bad_settings_fail_at_construction_naming_the_setting(kwargs, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    Experiment(**kwargs)


def test_bindings_on_a_layout_the_agent_does_not_train_from_are_refused():
  """A gin config binding another layout's settings would otherwise go unused."""
  with pytest.raises(config.ConfigError,
                     match=re.escape('TransitionReplay.n_step bound, but the agent trains '
                                     'from SequenceQueue')):
    config.parse(['ppo_cartpole.gin'], ['TransitionReplay.n_step = 3'])


def test_a_layout_takes_its_base_layouts_bindings_and_its_own():
  config.parse(['clear_cartpole.gin'], ['SequenceQueue.unroll_length = 8',
                                         'SequenceQueueAndReplay.replay_capacity = 32'])
  layout = Experiment().layout
  assert (type(layout).__name__, layout.unroll_length, layout.replay_capacity) == (
      'SequenceQueueAndReplay', 8, 32)


UNROLL = 4
CLEAR_LAYOUT = dict(unroll_length=UNROLL, replay_fraction=0.5, replay_capacity=64,
                    queue_capacity=64)


def clear_experiment(**overrides):
  settings = dict(env_name='CartPole-v1', agent_fn=CLEAR_AGENT, num_envs=4, batch_size=8,
                  layout_settings=CLEAR_LAYOUT)
  settings.update(overrides)
  return Experiment(**settings)


def test_clear_batch_is_fresh_unrolls_then_replayed_ones(reverb_server_factory):
  exp = clear_experiment()
  agent, server = start(exp, reverb_server_factory)
  assert exp.layout.replayed_rows == 4
  # 3 unrolls of 4 transitions per env need 3 * 4 + 1 vector steps; the writer sends
  # each unroll (one item of 4 envs) to both tables.
  assert fill(exp, server, agent, 13) == 3
  assert sizes(server)[QUEUE_TABLE] == 3 and sizes(server)[REPLAY_TABLE] == 3

  kwargs, info = first_batch(exp, server, agent)

  assert set(kwargs) == {'experience', 'replay_mask'}
  np.testing.assert_array_equal(kwargs['replay_mask'], [0.0] * 4 + [1.0] * 4)
  assert kwargs['experience'].observation.shape == (8, UNROLL + 1, 4)
  # The fresh half is the oldest unroll of the queue (FIFO), taken out of it; the
  # replayed half is one of the three unrolls, left in the replay table.
  keys = info['key'].numpy()
  assert len(set(keys[:4])) == 1 and len(set(keys[4:])) == 1
  assert sizes(server)[REPLAY_TABLE] == 3
  assert sizes(server)[QUEUE_TABLE] <= 2


def test_clear_cloning_targets_are_the_stored_behaviour_outputs(reverb_server_factory):
  """The replayed rows carry the logits and values the acting policy computed."""
  exp = clear_experiment()
  agent, server = start(exp, reverb_server_factory)
  # One unroll: what one process holds at its first train step when it collects one
  # unroll per iteration. The replay table must serve from it (not wait for a second).
  assert fill(exp, server, agent, 5) == 1
  info = server.client.server_info()[REPLAY_TABLE]
  assert info.rate_limiter_info.min_size_to_sample == 1
  kwargs, _ = first_batch(exp, server, agent)
  experience = kwargs['experience']
  # The policy has not trained, so recomputing its outputs gives the stored ones.
  (params, values), _ = agent._network(experience.observation)  # pylint: disable=protected-access
  logits = params['logits']
  np.testing.assert_allclose(experience.policy_info['logits'], logits, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(experience.policy_info['value'], values, rtol=1e-5, atol=1e-6)


def test_policy_version_of_the_acting_policy_reaches_train_kwargs(reverb_server_factory):
  """An agent with a maximum policy lag declares 'policy_version'; the queue gives it."""
  exp = clear_experiment(
      batch_size=4, layout_settings=dict(unroll_length=UNROLL, queue_capacity=64),
      agent_fn=functools.partial(impala.create_impala_agent, max_policy_lag=5))
  agent, server = start(exp, reverb_server_factory)
  fill(exp, server, agent, 5, policy_version=37)
  kwargs, _ = first_batch(exp, server, agent)
  assert set(kwargs) == {'experience', 'policy_version'}
  np.testing.assert_array_equal(kwargs['policy_version'],
                                np.full((4, UNROLL + 1), 37))


def per_experiment():
  return Experiment(env_name='CartPole-v1', num_envs=2, batch_size=2,
                    layout_settings=dict(n_step=1, prioritized=True, priority_exponent=0.6,
                                         importance_sampling_exponent=0.4, capacity=1000))


def test_prioritized_replay_weights_are_normalized_importance_weights(reverb_server_factory):
  exp = per_experiment()
  agent, server = start(exp, reverb_server_factory)
  fill(exp, server, agent, 6)
  keys = sampled_keys(server)
  assert len(keys) == sizes(server)[REPLAY_TABLE]
  # Distinct priorities, so the importance weights differ from item to item.
  priorities = {key: float(i + 1) for i, key in enumerate(keys)}
  replay.PriorityUpdater(server.address, REPLAY_TABLE)(
      tf.constant(list(priorities), tf.uint64),
      tf.constant(list(priorities.values()), tf.float64))
  total = sum(p ** 0.6 for p in priorities.values())

  for kwargs, info in itertools.islice(train_batches(exp, server, agent), 10):
    sampled = info['key'].numpy()
    probability = np.array([priorities[int(k)] ** 0.6 / total for k in sampled])
    np.testing.assert_allclose(info['probability'], probability, rtol=1e-5)
    raw = (len(keys) * probability) ** -0.4
    valid = replay.valid_mask(kwargs['experience']).numpy()
    np.testing.assert_allclose(kwargs['weights'], valid * raw / raw.max(), rtol=1e-5)


def test_prioritized_replay_after_step_writes_back_abs_td_error(reverb_server_factory):
  exp = per_experiment()
  agent, server = start(exp, reverb_server_factory)
  fill(exp, server, agent, 4)
  keys = sampled_keys(server)
  after_step = exp.layout.after_train_step_fn(server.address, agent)
  # One row per key, negative errors: the priority is |TD error| (+ a floor of 1e-6).
  td_error = -np.arange(1, len(keys) + 1, dtype=np.float32)
  info = {'key': tf.constant(keys, tf.uint64)}
  loss_info = tf_agent.LossInfo(loss=tf.constant(0.0), extra=dqn_agent.DqnLossInfo(
      td_loss=tf.zeros([len(keys)]), td_error=tf.constant(td_error)))
  after_step((None, info), loss_info)

  seen = {int(s.info.key): float(s.info.priority) for s in server.client.sample(
      REPLAY_TABLE, num_samples=300, emit_timesteps=False)}
  for key, error in zip(keys, td_error):
    assert seen[key] == pytest.approx(abs(error) + 1e-6, rel=1e-6)


def test_prioritized_replay_with_an_agent_without_priorities_is_rejected():
  exp = Experiment(env_name='Pendulum-v1', agent_fn=sac.create_sac_agent,
                   layout_settings=dict(prioritized=True))
  with pytest.raises(ValueError, match="needs per-row priorities, which SacAgent does not"):
    exp.build_agent()


def test_uniform_replay_weights_only_mask_boundary_rows(reverb_server_factory):
  exp = Experiment(env_name='CartPole-v1', num_envs=2, batch_size=2,
                   layout_settings=dict(capacity=1000))
  agent, server = start(exp, reverb_server_factory)
  fill(exp, server, agent, 40)
  assert exp.layout.after_train_step_fn(server.address, agent) is None
  for kwargs, _ in itertools.islice(train_batches(exp, server, agent), 20):
    assert set(kwargs) == {'experience', 'weights'}
    np.testing.assert_array_equal(kwargs['weights'],
                                  replay.valid_mask(kwargs['experience']))


_MIRRORED_CLEAR_SCRIPT = textwrap.dedent('''
    import dataclasses
    import json
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import tensorflow as tf
    from learners.configuration import config
    from learners.configuration.experiment import Experiment
    from tfrl import actors, replay
    config.parse(['clear_cartpole.gin'], ['Experiment.batch_size = 32'])
    exp = Experiment()
    strategy = tf.distribute.MirroredStrategy(devices)
    _, agent = exp.build_agent()
    server = replay.ReplayServer(exp.layout.tables(agent))
    env = exp.make_env()
    writer = exp.layout.make_writer(server.client)
    # Enough unrolls for both replicas' pipelines, which take queue items ahead.
    actors.Actor(env, agent.collect_policy, [writer]).run(10 * exp.layout.unroll_length + 1)
    writer.flush()
    dataset = strategy.distribute_datasets_from_function(
        exp.layout.dataset_fn(server.address, agent))
    _, info = next(iter(dataset))
    masks = [m.numpy().tolist() for m in
             strategy.experimental_local_results(info['replay_mask'])]
    try:
      layout = dataclasses.replace(exp, batch_size=16).layout
      layout.rows_per_replica(layout.fresh_rows, 2, 'fresh part')
      error = None
    except ValueError as e:
      error = str(e)
    print('RESULT ' + json.dumps({'masks': masks, 'error': error}))
    server.stop()
''')


@pytest.mark.integration
def test_clear_split_is_made_on_the_global_batch_under_two_replicas():
  """The real dataset path under MirroredStrategy on 2 logical CPUs: each replica gets
  its whole-item share of fresh and replayed unrolls (per-replica rounding gave CLEAR on
  2 replicas no replayed rows at all), and a split that whole items cannot make fails."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='', PYTHONPATH=REPO)
  result = python_runs.run(['-c', _MIRRORED_CLEAR_SCRIPT], timeout=300, env=env)
  assert result.returncode == 0, result.stderr[-5000:]
  out = json.loads(result.stdout.split('RESULT ', 1)[1])
  # clear_cartpole.gin with batch 32: items of 8 unrolls, half of them replayed.
  assert out['masks'] == [[0.0] * 8 + [1.0] * 8] * 2
  assert out['error'] == ("The fresh part's 8 rows do not split into whole items of 8 "
                          'rows over 2 replicas: make it a multiple of 16.')

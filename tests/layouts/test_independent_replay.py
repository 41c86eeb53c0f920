"""Independent replay samples: uniform transition batches draw from many
vector steps and envs with each stored transition equally likely; prioritized replay
keeps one priority per transition; sequence replay draws unrolls uniformly; the
transition layouts' datasets under MirroredStrategy on two CPUs.

Every row written here carries its env and vector step in its observation
(observation[0] = env, observation[1] = step), so a batch says where its rows came from.
"""
import json
import os
import textwrap

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import time_step as ts

from tfrl import replay
from learners.configuration.experiment import Experiment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_steps(writer, num_envs, num_steps):
  """One writer call per vector step; observation = (env, step, 0, 0), next + 0.5."""
  for step in range(num_steps):
    observation = np.zeros((num_envs, 4), np.float32)
    observation[:, 0], observation[:, 1] = np.arange(num_envs), step
    time_step = ts.TimeStep(np.full(num_envs, ts.StepType.MID, np.int32),
                            np.zeros(num_envs, np.float32), np.ones(num_envs, np.float32),
                            observation)
    writer.write(time_step, policy_step_lib.PolicyStep(np.zeros(num_envs, np.int64), (), ()),
                 time_step._replace(observation=observation + 0.5))
  writer.close()


def filled(reverb_server_factory, num_steps, **settings):
  """(experiment, agent, server) with `num_steps` vector steps written."""
  exp = Experiment(env_name='CartPole-v1', **settings)
  _, agent = exp.build_agent()
  server = reverb_server_factory(exp.layout.tables(agent))
  write_steps(exp.layout.make_writer(server.client), exp.num_envs, num_steps)
  return exp, agent, server


def batches(exp, agent, server, count):
  """`count` (env [rows], step [rows], info) batches of the layout's dataset."""
  dataset = exp.layout.dataset_fn(server.address, agent)(tf.distribute.InputContext())
  for experience, info in dataset.take(count):
    observation = experience.observation.numpy()
    # Rows are whole transitions: the end observation is the start's + 0.5.
    np.testing.assert_array_equal(observation[:, 1], observation[:, 0] + 0.5)
    yield observation[:, 0, 0].astype(int), observation[:, 0, 1].astype(int), info


@pytest.mark.parametrize('buffer_batches', [0, 32])
def test_uniform_batches_draw_from_many_vector_steps_and_envs(reverb_server_factory,
                                                              buffer_batches):
  exp, agent, server = filled(reverb_server_factory, 200, num_envs=16, batch_size=64,
                              layout_settings=dict(
                                  capacity=3200, shuffle_buffer_batches=buffer_batches))
  distinct_steps = []
  for env, step, _ in batches(exp, agent, server, 30):
    distinct_steps.append(len(set(step)))
    if buffer_batches:  # the bar for independent samples
      assert distinct_steps[-1] >= 32 and len(set(env)) >= 12
    else:  # whole items: all 16 envs of 4 items (the same item may be drawn twice)
      assert distinct_steps[-1] <= 4 and len(set(env)) == 16
  if not buffer_batches:
    assert max(distinct_steps) == 4, distinct_steps


def test_uniform_replay_samples_every_stored_transition_equally_often(reverb_server_factory):
  exp, agent, server = filled(reverb_server_factory, 20, num_envs=16, batch_size=64,
                              layout_settings=dict(capacity=320))
  counts = np.zeros((20, 16))
  for env, step, _ in batches(exp, agent, server, 2000):
    np.add.at(counts, (step, env), 1)
  # 128,000 rows over 320 transitions: ~400 each. A sampled item brings all 16 envs of its
  # step, so the steps see ~8,000 item draws, 400 each if uniform. Pearson's statistic
  # over the 20 steps follows chi-square with 19 degrees of freedom (measured: median 18
  # over 40 runs); 64 is its 1e-6 tail, so only a skewed sampler fails. The envs are
  # exact but for the rows still in the shuffle buffer.
  items_per_step = counts.sum(1) / 16
  expected = items_per_step.mean()
  assert ((items_per_step - expected) ** 2 / expected).sum() < 64, items_per_step
  np.testing.assert_allclose(counts.sum(0) / counts.sum(), 1 / 16, rtol=0.02)
  assert counts.min() > 0


def dqn_loss_info(td_error):
  return tf_agent.LossInfo(loss=tf.constant(0.0), extra=dqn_agent.DqnLossInfo(
      td_loss=tf.zeros_like(td_error), td_error=td_error))


def test_prioritized_replay_keeps_a_priority_and_a_weight_per_transition(
    reverb_server_factory):
  alpha, beta, num_envs, num_steps = 0.6, 0.4, 4, 5
  exp, agent, server = filled(
      reverb_server_factory, num_steps, num_envs=num_envs, batch_size=8,
      num_train_steps=10**9, layout_settings=dict(
          prioritized=True, priority_exponent=alpha, importance_sampling_exponent=beta))
  assert server.client.server_info()['replay'].current_size == num_envs * num_steps
  # Learn every transition's key from the batches (all priorities equal so far).
  where = {}
  for env, step, info in batches(exp, agent, server, 200):
    where.update(zip(info['key'].numpy().tolist(), zip(env.tolist(), step.tolist())))
    if len(where) == num_envs * num_steps:
      break
  assert len(where) == num_envs * num_steps  # one key per transition
  # Rows of one vector step get different errors; each keeps its own.
  priority = lambda env, step: 1.0 + env + num_envs * step
  keys = list(where)
  td_error = [-priority(*where[key]) for key in keys]
  exp.layout.after_train_step_fn(server.address, agent)(
      (None, {'key': tf.constant(keys, tf.uint64)}),
      dqn_loss_info(tf.constant(td_error, tf.float32)))

  total = sum((abs(e) + 1e-6) ** alpha for e in td_error)
  train_inputs = exp.layout.train_inputs_fn(agent)
  dataset = exp.layout.dataset_fn(server.address, agent)(tf.distribute.InputContext())
  for experience, info in dataset.take(20):
    observation = experience.observation.numpy()[:, 0]
    p = (1.0 + observation[:, 0] + num_envs * observation[:, 1] + 1e-6) ** alpha / total
    np.testing.assert_allclose(info['probability'], p, rtol=1e-5)
    raw = (num_envs * num_steps * p) ** -beta
    np.testing.assert_allclose(train_inputs(experience, info)['weights'],
                               raw / raw.max(), rtol=1e-5)


def test_sequence_replay_draws_stored_unrolls_uniformly(reverb_server_factory):
  """Batches of whole unroll items: every stored unroll (item x env) equally likely."""
  spec = Experiment(env_name='CartPole-v1').build_agent()[1].collect_data_spec
  signature = replay.SequenceWriter.item_signature(spec, 3, 4)
  server = reverb_server_factory([replay.uniform_table('replay', 100, signature)])
  write_steps(replay.SequenceWriter(server.client, 'replay', length=3), 4, 30)  # 10 items
  dataset = replay.make_dataset(server.address, 'replay', signature, 8, rows_per_item=4,
                                time_major=True, experience_spec=spec)
  counts = np.zeros((30, 4))
  for experience, _ in dataset.take(500):
    first = experience.observation.numpy()[:, 0].astype(int)  # [rows, obs] at t = 0
    np.add.at(counts, (first[:, 1], first[:, 0]), 1)
  starts = counts.sum(1)
  assert set(np.flatnonzero(starts)) == set(range(0, 30, 3))  # unrolls start every 3
  unrolls = counts[::3]
  np.testing.assert_array_equal(unrolls, unrolls[:, :1] * np.ones((1, 4)))  # whole items
  # 1,000 item draws over 10 items: 100 each, sd ~9.5.
  np.testing.assert_allclose(unrolls[:, 0] / unrolls[:, 0].sum(), 0.1, rtol=0.45)


_MIRRORED_SCRIPT = textwrap.dedent('''
    import itertools
    import json
    import sys
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, {tests!r})
    import test_independent_replay as t
    from learners.configuration.experiment import Experiment
    from tfrl import replay

    strategy = tf.distribute.MirroredStrategy(devices)
    result = {{}}
    for table in ('uniform', 'prioritized'):
      exp = Experiment(env_name='CartPole-v1', num_envs=16, batch_size=64,
                       layout_settings=dict(prioritized=table == 'prioritized'))
      _, agent = exp.build_agent(strategy)
      server = replay.ReplayServer(exp.layout.tables(agent))
      t.write_steps(exp.layout.make_writer(server.client), 16, 200)
      dataset = strategy.distribute_datasets_from_function(
          exp.layout.dataset_fn(server.address, agent))
      train_inputs = exp.layout.train_inputs_fn(agent)
      rows = []
      for experience, info in itertools.islice(iter(dataset), 5):
        weights = strategy.run(lambda e, i: train_inputs(e, i)['weights'], (experience, info))
        for obs, w in zip(strategy.experimental_local_results(experience.observation),
                          strategy.experimental_local_results(weights)):
          obs = obs.numpy()[:, 0]
          rows.append([len(obs), len(set(obs[:, 1].tolist())), len(set(obs[:, 0].tolist())),
                       float(w.numpy().min())])
      result[table] = rows
      server.stop()
    print('RESULT ' + json.dumps(result))
''')


@pytest.mark.integration
def test_transition_layouts_under_mirrored_strategy_on_two_cpus():
  """Each replica gets half the batch, mixed from many vector steps (uniform) or of
  single transitions with their weights (prioritized)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='', PYTHONPATH=REPO)
  script = _MIRRORED_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
  result = python_runs.run(['-c', script], timeout=300, env=env)
  assert result.returncode == 0, result.stderr[-5000:]
  out = json.loads(result.stdout.split('RESULT ', 1)[1])
  for rows, steps, envs, weight in out['uniform']:
    # 32 rows from a buffer of 1,024 (~64 items): ~25 distinct steps expected.
    assert rows == 32 and steps >= 12 and envs >= 10 and weight == 1.0
  for rows, steps, envs, weight in out['prioritized']:
    # All at the initial priority: P = 1/N, weight 1 (no boundary rows).
    assert rows == 32 and steps >= 12 and weight == pytest.approx(1.0)

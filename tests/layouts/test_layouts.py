"""The data-layout builders' own behaviour: prioritized replay as in Schaul et al.
(new items at the largest priority, beta annealed to 1, weights normalized over the
global batch under a strategy), CLEAR's reservoir-sampled replay, mixed datasets, and
agents refused when they ask for inputs a layout does not have.

What every layout feeds each algorithm is in tests/learners/test_experiment.py.
"""
import functools
import json
import os
import random
import textwrap

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent

from tfrl import actors
from tfrl import layouts
from tfrl import replay
from tfrl.agents import clear
from tfrl.agents import dqn
from tfrl.agents import impala
from tfrl.agents import interface
from learners.configuration.experiment import Experiment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def per_experiment(**overrides):
  layout = dict(capacity=1000, prioritized=True, importance_sampling_exponent=0.4)
  layout.update(overrides.pop('layout_settings', {}))
  settings = dict(env_name='CartPole-v1', num_envs=2, batch_size=2, num_train_steps=1000,
                  layout_settings=layout)
  settings.update(overrides)
  return Experiment(**settings)


def priorities_in_table(server):
  return {int(s.info.key): float(s.info.priority) for s in server.client.sample(
      layouts.REPLAY_TABLE, num_samples=400, emit_timesteps=False)}


def dqn_loss_info(td_error):
  return tf_agent.LossInfo(loss=tf.constant(0.0), extra=dqn_agent.DqnLossInfo(
      td_loss=tf.zeros_like(td_error), td_error=td_error))


def test_new_items_enter_at_the_largest_priority_written_back(reverb_server_factory):
  exp = per_experiment()
  _, agent = exp.build_agent()
  server = reverb_server_factory(exp.layout.tables(agent))
  env = exp.make_env()
  writer = exp.layout.make_writer(server.client)
  actor = actors.Actor(env, agent.collect_policy, [writer])
  actor.run(3)
  writer.flush()
  first = priorities_in_table(server)
  assert set(first.values()) == {1.0}  # nothing written back yet: the initial maximum

  after_step = exp.layout.after_train_step_fn(server.address, agent)
  keys = list(first)
  after_step((None, {'key': tf.constant(keys[:1], tf.uint64)}),
             dqn_loss_info(tf.constant([-7.5])))
  assert float(exp.layout.max_priority.numpy()) == pytest.approx(7.5 + 1e-6)
  after_step((None, {'key': tf.constant(keys[1:2], tf.uint64)}),
             dqn_loss_info(tf.constant([0.5])))  # a smaller one keeps the maximum
  assert float(exp.layout.max_priority.numpy()) == pytest.approx(7.5 + 1e-6)

  actor.run(3)
  writer.close()
  env.close()
  new = {k: p for k, p in priorities_in_table(server).items() if k not in first}
  assert new and all(p == pytest.approx(7.5 + 1e-6) for p in new.values())


def test_max_priority_travels_with_the_pushed_variables():
  """Separate collectors insert at the learner's maximum: it is pushed with the policy."""
  exp = per_experiment()
  train_step, agent = exp.build_agent()
  pushed = exp.pushed_variables(agent, train_step)
  assert pushed['max_priority'] is exp.layout.max_priority
  uniform = per_experiment(layout_settings=dict(prioritized=False))
  assert 'max_priority' not in uniform.pushed_variables(agent, train_step)


def test_a_resumed_prioritized_job_restores_max_priority_and_pushes_it(
    reverb_server_factory, tmp_path):
  """A prioritized job trains and checkpoints; a new Learner on its directory restores
  the largest priority (not 1.0), and a collector pulls the restored value."""
  tf.keras.utils.set_random_seed(0)
  settings = dict(batch_size=4, checkpoint_interval=1000, summary_interval=0)
  exp = per_experiment(**settings)
  train_step, agent = exp.build_agent()
  server = reverb_server_factory(exp.tables(agent, train_step))
  env = exp.make_env()
  writer = exp.layout.make_writer(server.client)
  actors.Actor(env, agent.collect_policy, [writer]).run(20)
  writer.close()
  env.close()
  learner = exp.make_learner(str(tmp_path), server.address, agent, train_step)
  learner.run(iterations=5)
  learner.save_checkpoint()
  trained = float(exp.layout.max_priority.numpy())
  assert trained > 1.0  # CartPole's reward 1 against Q-values near 0

  resumed = per_experiment(**settings)  # a new process: max_priority starts at 1.0
  train_step, agent = resumed.build_agent()
  resumed.make_learner(str(tmp_path), server.address, agent, train_step)
  assert float(resumed.layout.max_priority.numpy()) == trained
  replay.VariableContainer(server.address,
                           resumed.pushed_variables(agent, train_step)).push()
  collector = per_experiment(**settings)
  train_step, agent = collector.build_agent()
  replay.VariableContainer(server.address,
                           collector.pushed_variables(agent, train_step)).update()
  assert float(collector.layout.max_priority.numpy()) == trained


def test_importance_sampling_exponent_anneals_to_one_over_the_train_budget():
  layout = per_experiment(num_train_steps=1000).layout
  betas = [float(layout.importance_weight_exponent(tf.constant(step, tf.int64)))
           for step in (0, 500, 1000, 5000)]
  np.testing.assert_allclose(betas, [0.4, 0.7, 1.0, 1.0], rtol=1e-6)


_MIRRORED_PER_SCRIPT = textwrap.dedent('''
    import json
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import tensorflow as tf
    from tf_agents.agents import tf_agent
    from tf_agents.agents.dqn import dqn_agent
    from learners.configuration.experiment import Experiment
    from tfrl import replay

    exp = Experiment(env_name='CartPole-v1', num_envs=2, batch_size=4,
                     layout_settings=dict(prioritized=True,
                                          importance_sampling_exponent=1.0))
    strategy = tf.distribute.MirroredStrategy(devices)
    _, agent = exp.build_agent(strategy)
    server = replay.ReplayServer(exp.layout.tables(agent))
    train_inputs = exp.layout.train_inputs_fn(agent)
    after_step = exp.layout.after_train_step_fn(server.address, agent)
    # Replica 0 samples likely rows (small weights), replica 1 unlikely ones.
    probability = {0: [0.4, 0.2], 1: [0.05, 0.1]}
    td_error = {0: [1.0, -2.0], 1: [0.5, -9.0]}

    def per_replica(values, dtype):
      return strategy.experimental_distribute_values_from_function(
          lambda ctx: tf.constant(values[ctx.replica_id_in_sync_group], dtype))

    def step(probability, td_error):
      def replica_fn(probability, td_error):
        rows = tf.shape(probability)[0]
        experience = tf.nest.map_structure(
            lambda s: tf.zeros(tf.concat([[rows, 2], s.shape], 0), s.dtype),
            agent.collect_data_spec)
        info = {'probability': tf.cast(probability, tf.float64),
                'table_size': tf.fill([rows], tf.constant(10, tf.int64)),
                'key': tf.zeros([rows], tf.uint64)}
        weights = train_inputs(experience, info)['weights']
        after_step((experience, info), tf_agent.LossInfo(
            tf.constant(0.0), dqn_agent.DqnLossInfo(tf.zeros_like(td_error), td_error)))
        return weights
      return strategy.run(replica_fn, args=(probability, td_error))

    weights = tf.function(step)(per_replica(probability, tf.float32),
                                per_replica(td_error, tf.float32))
    print('RESULT ' + json.dumps({
        'weights': [w.numpy().tolist() for w in strategy.experimental_local_results(weights)],
        'max_priority': float(exp.layout.max_priority.numpy())}))
    server.stop()
''')


@pytest.mark.integration
def test_prioritized_replay_under_two_replicas_uses_global_batch_maxima():
  """Importance weights are divided by the largest weight of the whole batch (not each
  replica's own), and the maximum priority is the largest over every replica's rows."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='', PYTHONPATH=REPO)
  result = python_runs.run(['-c', _MIRRORED_PER_SCRIPT], timeout=300, env=env)
  assert result.returncode == 0, result.stderr[-5000:]
  out = json.loads(result.stdout.split('RESULT ', 1)[1])
  # beta = 1: w = 1 / (N P); the batch's largest is at P = 0.05 (replica 1).
  raw = {0: 1 / (10 * np.array([0.4, 0.2])), 1: 1 / (10 * np.array([0.05, 0.1]))}
  largest = max(raw[0].max(), raw[1].max())
  # Boundary rows weigh 0 (the zero experience's step types are FIRST -> FIRST, valid).
  np.testing.assert_allclose(out['weights'][0], raw[0] / largest, rtol=1e-5)
  np.testing.assert_allclose(out['weights'][1], raw[1] / largest, rtol=1e-5)
  assert out['max_priority'] == pytest.approx(9.0 + 1e-6, rel=1e-6)


def test_reservoir_replay_keeps_old_items_where_fifo_keeps_only_recent_ones(
    reverb_server_factory):
  signature = {'x': tf.TensorSpec([], tf.int64)}
  capacity, inserted = 20, 400
  server = reverb_server_factory([
      replay.reservoir_table('reservoir', capacity, signature),
      replay.uniform_table('fifo', capacity, signature)])
  random.seed(0)
  for i in range(inserted):
    server.client.insert({'x': np.int64(i)}, {'reservoir': replay.reservoir_priority()})
    server.client.insert({'x': np.int64(i)}, {'fifo': 1.0})

  def kept(table):
    return {int(s.data['x']) for s in server.client.sample(
        table, num_samples=2000, emit_timesteps=False, unpack_as_table_signature=True)}

  assert kept('fifo') == set(range(inserted - capacity, inserted))
  reservoir = kept('reservoir')
  assert len(reservoir) == capacity
  # A uniform sample of all 400: about half from the first half (all 20 from the last
  # 200 has probability ~1e-6; with FIFO it is certain).
  assert 4 <= sum(x < inserted // 2 for x in reservoir) <= 16


def test_clear_writes_reservoir_keys_and_uses_a_min_heap_remover(reverb_server_factory):
  exp = Experiment(env_name='CartPole-v1', agent_fn=functools.partial(
      clear.create_clear_agent, policy_cloning_cost=0.01), num_envs=4, batch_size=8,
                   layout_settings=dict(unroll_length=4, replay_fraction=0.5,
                                        replay_capacity=64))
  _, agent = exp.build_agent()
  server = reverb_server_factory(exp.layout.tables(agent))
  info = server.client.server_info()[layouts.REPLAY_TABLE]
  assert info.remover_options.heap.min_heap
  env = exp.make_env()
  writer = exp.layout.make_writer(server.client)
  actors.Actor(env, agent.collect_policy, [writer]).run(4 * 5 + 1)
  writer.close()
  env.close()
  priorities = list(priorities_in_table(server).values())
  assert len(priorities) == 5 and len(set(priorities)) == 5
  assert all(0.0 <= p < 1.0 for p in priorities)


def test_mixed_dataset_concatenates_tables_in_order_and_tags_rows(reverb_server_factory):
  exp = Experiment(env_name='CartPole-v1', num_envs=2, batch_size=2,
                   layout_settings=dict(capacity=100))
  _, agent = exp.build_agent()
  spec = agent.collect_data_spec
  signature = exp.layout.item_signature(agent)
  server = reverb_server_factory([replay.uniform_table('a', 100, signature),
                                  replay.uniform_table('b', 100, signature)])
  env = exp.make_env()
  for table in ('a', 'b'):
    writer = replay.NStepTransitionWriter(server.client, [table], n=1, envs_per_item=2)
    actors.Actor(env, agent.collect_policy, [writer], policy_version=ord(table)).run(4)
    writer.close()
  env.close()
  dataset = replay.make_mixed_dataset(server.address, [('a', 2), ('b', 4)], signature,
                                      rows_per_item=2, time_major=False,
                                      experience_spec=spec)
  _, info = next(iter(dataset))
  np.testing.assert_array_equal(info[replay.TABLE_INDEX], [0, 0, 1, 1, 1, 1])
  np.testing.assert_array_equal(info['policy_version'],
                                [ord('a')] * 2 + [ord('b')] * 4)
  with pytest.raises(ValueError, match="Table 'b' is asked for 0 rows"):
    replay.make_mixed_dataset(server.address, [('a', 2), ('b', 0)], signature,
                              rows_per_item=2, time_major=False)


def test_cloning_costs_without_replay_are_refused_naming_the_layout():
  """Leaving CLEAR's replay out used to turn cloning off silently."""
  exp = Experiment(env_name='CartPole-v1', num_envs=4, batch_size=4,
                   agent_fn=functools.partial(impala.create_impala_agent,
                                              value_cloning_cost=0.01))
  with pytest.raises(ValueError, match=(
      r"ImpalaAgent trains on \['replay_mask'\], which the SequenceQueue layout does not "
      r".*create_clear_agent")):
    exp.build_agent()


def test_agents_declare_their_train_inputs():
  exp = Experiment(env_name='CartPole-v1', num_envs=4, batch_size=4)
  env = exp.make_env()
  step = tf.Variable(0, dtype=tf.int64)

  def inputs(**kwargs):
    agent = impala.create_impala_agent(env.time_step_spec(), env.action_spec(), step,
                                       **kwargs)
    return interface.train_inputs(agent)

  assert inputs() == ()
  assert inputs(policy_cloning_cost=0.01) == ('replay_mask',)
  assert inputs(max_policy_lag=3, value_cloning_cost=0.1) == ('replay_mask',
                                                              'policy_version')
  env.close()


def test_each_collector_explores_with_its_own_epsilon():
  """Ape-X's spread: collector i of n decays to epsilon_end ** (1 + i / (n - 1))."""
  step = tf.Variable(10_000, dtype=tf.int64)
  exp = Experiment(env_name='CartPole-v1')
  env = exp.make_env(num_envs=2)
  agent = dqn.create_dqn_agent(env.time_step_spec(), env.action_spec(), step,
                               epsilon_end=0.1, epsilon_decay_steps=100)
  epsilons = [float(interface.collect_policy(agent, i, 3)._get_epsilon())  # pylint: disable=protected-access
              for i in range(3)]
  np.testing.assert_allclose(epsilons, [0.1, 0.1 ** 1.5, 0.01], rtol=1e-6)
  assert interface.collect_policy(agent, 0, 1) is agent.collect_policy
  # The per-task policy acts with the agent's own network variables (what is pulled).
  assert ({id(v) for v in interface.collect_policy(agent, 2, 3).variables()} ==
          {id(v) for v in agent.collect_policy.variables()})
  env.close()

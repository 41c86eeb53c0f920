"""Hybrid batches: a set share of dataset rows beside online ones, on one device and on
two replicas (each replica its share of both parts)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.policies import random_tf_policy

from learners.experiment import Experiment
from tfrl import actors
from tfrl import replay
from tfrl.datasets import feeder
from tfrl.datasets import rlds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ONLINE_VERSION = 7


@pytest.fixture(scope='module')
def random_dataset(tmp_path_factory):
  """40-odd episodes of a random CartPole policy, recorded."""
  directory = str(tmp_path_factory.mktemp('random') / 'data')
  experiment = Experiment(env_name='CartPole-v1', num_envs=4)
  env = experiment.make_env()
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  recorder = rlds.RldsRecorder(directory, env.time_step_spec(), env.action_spec())
  actors.Actor(env, policy, [recorder]).run(250)
  recorder.close()
  env.close()
  return directory


def hybrid_experiment(dataset_dir, **overrides):
  settings = dict(env_name='CartPole-v1', num_envs=4, batch_size=32, dataset_dir=dataset_dir,
                  layout_settings=dict(dataset_fraction=0.25, capacity=5000,
                                       dataset_capacity=20_000, shuffle_buffer_batches=4))
  settings.update(overrides)
  return Experiment(**settings)


def test_each_batch_holds_the_configured_share_of_dataset_rows(random_dataset,
                                                               reverb_server_factory):
  exp = hybrid_experiment(random_dataset)
  _, agent = exp.build_agent()
  env = exp.make_env()
  plan = feeder.plan_load(random_dataset, exp.layout, env)
  server = reverb_server_factory(exp.layout.tables(agent, dataset_items=plan.items))
  feeder.load_into_replay(plan, exp.layout, server.client, agent)
  writer = exp.layout.make_writer(server.client)
  actors.Actor(env, agent.collect_policy, [writer], policy_version=ONLINE_VERSION).run(200)
  writer.close()
  env.close()
  assert exp.layout.dataset_rows == 8 and exp.layout.online_rows == 24
  dataset = exp.layout.dataset_fn(server.address, agent)(tf.distribute.InputContext())
  for _, info in dataset.take(5):
    table = info[replay.TABLE_INDEX].numpy()
    version = info['policy_version'].numpy()
    np.testing.assert_array_equal(table, [0] * 24 + [1] * 8)
    assert (version[table == 1] == feeder.DATASET_POLICY_VERSION).all()
    assert (version[table == 0] == ONLINE_VERSION).all()


def test_a_fraction_that_leaves_one_part_empty_is_refused(random_dataset):
  with pytest.raises(ValueError, match='rounds to 0 dataset rows'):
    hybrid_experiment(random_dataset, batch_size=4, layout_settings=dict(
        dataset_fraction=0.1)).layout.dataset_rows  # pylint: disable=expression-not-assigned
  with pytest.raises(ValueError, match='set Experiment.dataset_dir too'):
    hybrid_experiment(None)


_MIRRORED_SCRIPT = textwrap.dedent('''
    import json, sys
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, {tests!r})
    from test_hybrid import hybrid_experiment, ONLINE_VERSION
    from tfrl import actors, replay
    from tfrl.datasets import feeder

    exp = hybrid_experiment({dataset!r})
    strategy = tf.distribute.MirroredStrategy(devices)
    _, agent = exp.build_agent(strategy)
    env = exp.make_env()
    plan = feeder.plan_load({dataset!r}, exp.layout, env)
    server = replay.ReplayServer(exp.layout.tables(agent, dataset_items=plan.items))
    feeder.load_into_replay(plan, exp.layout, server.client, agent)
    writer = exp.layout.make_writer(server.client)
    actors.Actor(env, agent.collect_policy, [writer], policy_version=ONLINE_VERSION).run(200)
    writer.close()
    dataset = strategy.distribute_datasets_from_function(
        exp.layout.dataset_fn(server.address, agent))
    _, info = next(iter(dataset))
    print('RESULT ' + json.dumps([
        dict(table=t.numpy().tolist(), version=v.numpy().tolist()) for t, v in zip(
            strategy.experimental_local_results(info[replay.TABLE_INDEX]),
            strategy.experimental_local_results(info['policy_version']))]))
    server.stop()
''')


def test_under_two_replicas_each_takes_its_share_of_both_parts(random_dataset):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='',
             PYTHONPATH=REPO)
  script = _MIRRORED_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)),
                                   dataset=random_dataset)
  result = subprocess.run([sys.executable, '-c', script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-5000:]
  replicas = json.loads(result.stdout.split('RESULT ', 1)[1])
  assert len(replicas) == 2
  for replica in replicas:  # 32 rows: 12 online then 4 from the dataset per replica
    assert replica['table'] == [0] * 12 + [1] * 4
    assert replica['version'][12:] == [feeder.DATASET_POLICY_VERSION] * 4
    assert replica['version'][:12] == [ONLINE_VERSION] * 12


@pytest.mark.parametrize('layout_settings', [
    dict(n_step=3, steps_per_item=2, capacity=20_000),
    dict(n_step=1, prioritized=True, capacity=20_000),  # an item per transition
    dict(n_step=5, dataset_fraction=0.5, dataset_capacity=20_000),
])
def test_the_plan_counts_exactly_the_items_the_writer_makes(random_dataset,
                                                            reverb_server_factory,
                                                            layout_settings):
  """The dataset's table samples once it holds `plan.items`: a count one too high
  would block training for good."""
  exp = Experiment(env_name='CartPole-v1', num_envs=4, batch_size=8,
                   dataset_dir=random_dataset, layout_settings=layout_settings)
  _, agent = exp.build_agent()
  env = exp.make_env()
  plan = feeder.plan_load(random_dataset, exp.layout, env)
  env.close()
  server = reverb_server_factory(exp.layout.tables(agent, dataset_items=plan.items))
  feeder.load_into_replay(plan, exp.layout, server.client, agent)
  size = server.client.server_info()[exp.layout.dataset_table].current_size
  assert size == plan.items > 0

"""Hybrid batches: a set share of dataset rows beside online ones, on one device and on
two replicas (each replica its share of both parts)."""
import json
import os
import textwrap

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf
from tf_agents.policies import random_tf_policy

from learners.configuration.experiment import Experiment
from tfrl import actors
from tfrl import replay
from tfrl.datasets import feeder
from tfrl.datasets import rlds
from tfrl.datasets import schedule

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


def loaded(exp: Experiment, reverb_server_factory):
  """(agent, server, plan): exp's tables served, its dataset written into them."""
  _, agent = exp.build_agent()
  env = exp.make_env()
  plan = feeder.plan_load(exp.dataset_dir, exp.layout, env)
  env.close()
  server = reverb_server_factory(exp.layout.tables(agent, dataset_items=plan.items))
  feeder.load_into_replay(plan, exp.layout, server.client, agent)
  return agent, server, plan


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


@pytest.mark.integration
def test_under_two_replicas_each_takes_its_share_of_both_parts(random_dataset):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='',
             PYTHONPATH=REPO)
  script = _MIRRORED_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)),
                                   dataset=random_dataset)
  result = python_runs.run(['-c', script], timeout=300, env=env)
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
  _, server, plan = loaded(exp, reverb_server_factory)
  size = server.client.server_info()[exp.layout.dataset_table].current_size
  assert size == plan.items > 0


# -- ALF's schedule: dataset-only steps first, then online rows every N steps ----------


def test_the_schedule_mixes_online_rows_after_k_steps_then_every_nth():
  plan = schedule.HybridSchedule(dataset_only_steps=4, online_every=3)
  assert [plan.mixes_online(s) for s in range(12)] == [
      False] * 4 + [True, False, False] * 2 + [True, False]
  assert [plan.collects(s) for s in (0, 3, 4, 9)] == [False, False, True, True]
  assert plan.segments(2, 8) == [(False, 2), (True, 1), (False, 2), (True, 1), (False, 2)]
  assert schedule.HybridSchedule().segments(0, 5) == [(True, 5)]
  assert not schedule.HybridSchedule().active and plan.active
  with pytest.raises(ValueError, match='online_every >= 1'):
    schedule.HybridSchedule(online_every=0)


class _StepCountingLearner:
  """What `HybridSchedule.run` uses of a Learner: `train_step_numpy` and `run`."""

  def __init__(self, step):
    self.train_step_numpy, self.calls = step, []

  def run(self, iterations, iterator=None):
    self.calls.append((iterations, iterator))
    self.train_step_numpy += iterations
    return iterations


def test_running_the_schedule_reads_the_step_so_a_resumed_job_goes_on_where_it_was():
  plan = schedule.HybridSchedule(dataset_only_steps=3, online_every=2)
  learner = _StepCountingLearner(step=2)  # as restored from a checkpoint at step 2
  assert plan.run(learner, 6, 'dataset only') == 1
  assert learner.calls == [(1, 'dataset only'), (1, None), (1, 'dataset only'),
                           (1, None), (1, 'dataset only'), (1, None)]
  learner = _StepCountingLearner(step=0)
  schedule.HybridSchedule().run(learner, 6, None)
  assert learner.calls == [(6, None)]  # no schedule: one call, the mixed iterator


def test_a_schedule_needs_a_hybrid_job():
  with pytest.raises(ValueError, match='set TransitionReplay.dataset_fraction'):
    Experiment(env_name='CartPole-v1', layout_settings=dict(dataset_only_steps=10)).layout  # pylint: disable=expression-not-assigned


def test_dataset_only_batches_hold_dataset_rows_only(random_dataset, reverb_server_factory):
  exp = hybrid_experiment(random_dataset, layout_settings=dict(
      dataset_fraction=0.25, capacity=5000, dataset_capacity=20_000,
      shuffle_buffer_batches=4, online_every=2))
  agent, server, _ = loaded(exp, reverb_server_factory)
  dataset = exp.layout.dataset_only_fn(server.address, agent)(tf.distribute.InputContext())
  for experience, info in dataset.take(3):
    assert info[replay.TABLE_INDEX].numpy().tolist() == [1] * 32
    assert info['policy_version'].numpy().tolist() == [feeder.DATASET_POLICY_VERSION] * 32
    assert experience.observation.shape[0] == 32


@pytest.mark.integration
def test_a_one_process_hybrid_job_collects_only_after_its_dataset_only_steps(
    random_dataset, tmp_path):
  """dqn_cartpole.gin with the random dataset mixed in after 200 dataset-only steps
  (100 per iteration): the evaluation at step 200 counts the random warm-up's (up to
  1,000 env steps) only; by step 400 two iterations collected 16 vector steps of 4 envs
  each. Without the schedule those two iterations come before step 200."""
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  result = train_eval.run(str(tmp_path / 'job'), ['dqn_cartpole.gin'], [
      f"Experiment.dataset_dir = '{random_dataset}'", 'Experiment.num_envs = 4',
      'TransitionReplay.dataset_fraction = 0.5', 'TransitionReplay.dataset_only_steps = 200',
      'TransitionReplay.online_every = 2', 'Experiment.train_steps_per_iteration = 100',
      'Experiment.num_train_steps = 400', 'Experiment.eval_interval = 200',
      'Experiment.target_return = None', 'Experiment.num_eval_episodes = 1'])
  steps = [(row['train_step'], row['env_steps']) for row in result['history']]
  (first_step, warm_up), (second_step, later) = steps
  # Env steps count real steps: the autoreset step after each episode is not one.
  assert (first_step, second_step) == (200, 400) and 900 < warm_up <= 1000, steps
  assert 2 * 16 * 4 - 10 <= later - warm_up <= 2 * 16 * 4, steps

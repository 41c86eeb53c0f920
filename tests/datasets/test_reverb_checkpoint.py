"""A finished job's Reverb checkpoint as a dataset (ALF's offline_buffer_dir): its items
restored into an offline or hybrid job's tables with the job's own settings, items of
another shape refused naming both, and an offline job that learns from one, in one
process and as separate programs."""
import os

import pytest
import tensorflow as tf

from learners.configuration.experiment import Experiment
from learners.job import one_process_job
from tfrl import actors
from tfrl import layouts
from tfrl import replay
from tfrl.datasets import behaviour
from tfrl.datasets import feeder
from tfrl.datasets import reverb_checkpoint
from tfrl.datasets import rlds
from test_offline_job import BalancingPolicy, launch_offline  # tests/datasets/test_offline_job.py

ENVS, VECTOR_STEPS = 16, 1000  # 16,000 transitions: 30-odd of the controller's games


def source_experiment(**overrides) -> Experiment:
  """bc_cartpole.gin's data settings, as a job that collects (online)."""
  settings = dict(env_name='CartPole-v1', num_envs=ENVS, batch_size=256,
                  samples_per_insert=8.0, layout_settings=dict(capacity=100_000))
  settings.update(overrides)
  return Experiment(**settings)


@pytest.fixture(scope='module')
def finished_job(tmp_path_factory):
  """A job root whose server checkpointed the controller's noisy episodes (epsilon
  0.2), with a launched job's tables: replay (here without a ratio limiter, which
  would hold the writer back with nobody sampling) and the variables table."""
  root = str(tmp_path_factory.mktemp('source_job'))
  exp = source_experiment()
  train_step, agent = exp.build_agent()
  env = exp.make_env()
  tables = exp.layout.tables(agent) + [replay.variables_table(
      replay.VariableContainer.signature(exp.pushed_variables(agent, train_step)))]
  server = replay.ReplayServer(tables, checkpoint_dir=os.path.join(root, 'reverb'))
  writer = exp.layout.make_writer(server.client)
  policy = behaviour.NoisyPolicy(BalancingPolicy(env.time_step_spec(), env.action_spec()),
                                 0.2, seed=3)
  actors.Actor(env, policy, [writer]).run(VECTOR_STEPS)
  writer.close()
  env.close()
  items = server.table_info()[exp.layout.experience_table].current_size
  server.checkpoint()
  server.stop()
  return root, items


def restored(exp: Experiment, directory: str, scratch: str, reverb_server_factory):
  """(plan, server with exp's tables started from the dataset, agent)."""
  _, agent = exp.build_agent()
  env = exp.make_env(num_envs=1, collect=False)
  plan = feeder.plan_load(directory, exp.layout, env)
  env.close()
  tables = exp.layout.tables(agent, dataset_items=plan.items)
  assert reverb_checkpoint.seed_checkpoint_dir(plan, tables, scratch,
                                               exp.layout.dataset_table)
  return plan, reverb_server_factory(tables, checkpoint_dir=scratch), agent


def test_offline_job_restores_every_item_with_its_own_table_settings(
    finished_job, tmp_path, reverb_server_factory):
  root, items = finished_job
  exp = source_experiment(dataset_dir=root)
  assert exp.offline
  plan, server, _ = restored(exp, root, str(tmp_path / 'scratch'), reverb_server_factory)
  assert isinstance(plan, reverb_checkpoint.CheckpointPlan)
  assert plan.items == items > 0 and plan.rows == items * exp.layout.rows_per_item
  assert plan.checkpoint.startswith(os.path.join(root, 'reverb'))
  info = server.table_info()
  assert set(info) == {exp.layout.experience_table}  # the variables table left behind
  replay_info = info[exp.layout.experience_table]
  assert replay_info.current_size == items
  # The offline table's own limiter (all items in before the first sample, no ratio),
  # not the source's (a launched job's samples-per-insert one would allow no sample).
  assert replay_info.rate_limiter_info.min_size_to_sample == items
  assert replay_info.rate_limiter_info.samples_per_insert == 1.0
  sampled = server.client.sample(exp.layout.experience_table, num_samples=3 * items,
                                 emit_timesteps=False)
  keys = {int(sample.info.key) for sample in sampled}
  assert len(keys) > items // 2  # uniform over what is there, far past any SPI budget


def test_hybrid_job_gets_the_items_in_its_dataset_table(finished_job, tmp_path,
                                                        reverb_server_factory):
  root, items = finished_job
  exp = source_experiment(dataset_dir=root, layout_settings=dict(
      capacity=100_000, dataset_fraction=0.5, dataset_capacity=100_000))
  _, server, _ = restored(exp, root, str(tmp_path / 'scratch'), reverb_server_factory)
  info = server.table_info()
  assert info[layouts.transition.DATASET_TABLE].current_size == items
  assert info[exp.layout.experience_table].current_size == 0  # collection fills it


def test_the_servers_own_checkpoints_come_after_the_dataset(finished_job, tmp_path):
  """The dataset is a server's first checkpoint only: once the server has written one
  of its own, a restart loads that one, and seeding again writes nothing."""
  root, _ = finished_job
  exp = source_experiment(dataset_dir=root)
  _, agent = exp.build_agent()
  plan = reverb_checkpoint.plan(root, exp.layout)
  tables = exp.layout.tables(agent, dataset_items=plan.items)
  scratch = str(tmp_path / 'scratch')
  assert reverb_checkpoint.seed_checkpoint_dir(plan, tables, scratch, 'replay')
  first = replay.latest_checkpoint(scratch)
  with replay.ReplayServer(tables, checkpoint_dir=scratch) as server:
    own = server.checkpoint()
  assert first != own and replay.latest_checkpoint(scratch) == own.rstrip('/')
  assert not reverb_checkpoint.seed_checkpoint_dir(plan, tables, scratch, 'replay')


def test_items_of_another_shape_are_refused_naming_both(finished_job, tmp_path):
  root, _ = finished_job
  exp = source_experiment(num_envs=8, dataset_dir=root)  # items of 8 envs, not 16
  _, agent = exp.build_agent()
  plan = reverb_checkpoint.plan(root, exp.layout)
  with pytest.raises(rlds.DatasetSpecError) as error:
    reverb_checkpoint.seed_checkpoint_dir(
        plan, exp.layout.tables(agent, dataset_items=plan.items), str(tmp_path), 'replay')
  assert 'int32[16, 2] in the checkpoint, int32[8, 2] configured' in str(error.value)
  assert not os.listdir(tmp_path)  # nothing written


def test_a_directory_without_either_kind_of_dataset_is_refused(tmp_path):
  exp = source_experiment(dataset_dir=str(tmp_path))
  env = exp.make_env(num_envs=1, collect=False)
  with pytest.raises(rlds.DatasetError, match=str(tmp_path)):
    feeder.plan_load(str(tmp_path), exp.layout, env)
  env.close()


@pytest.mark.integration
def test_behaviour_cloning_from_a_job_root_in_one_process(finished_job, tmp_path):
  """bc_cartpole.gin with `dataset_dir` = the finished job's root: nothing collected,
  a confirmed 475, and the scratch checkpoint gone when the job ends."""
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  root, _ = finished_job
  job = str(tmp_path / 'bc')
  result = train_eval.run(job, ['bc_cartpole.gin'], [f"Experiment.dataset_dir = '{root}'"])
  assert result['reached_target'] and result['env_steps'] == 0, result['history']
  assert not os.path.exists(os.path.join(job, one_process_job.DATASET_CHECKPOINT_DIR))
  assert result['eval_return'] >= 475.0


@pytest.mark.integration
def test_behaviour_cloning_from_a_checkpoint_as_separate_programs(finished_job, tmp_path):
  """Under `tfrl-launch` the dataset becomes the server's first checkpoint; the
  trainer and the evaluator reach the target with no collector."""
  root, items = finished_job
  job = str(tmp_path / 'launched')
  launch_offline(job, os.path.join(root, 'reverb'))
  with open(os.path.join(job, 'logs', 'reverb_server.log')) as f:
    log = f.read()
  assert f'Restored {items} items' in log and 'training offline' in log, log[-2000:]
  assert tf.io.gfile.exists(os.path.join(job, 'policies', 'greedy_policy', 'saved_model.pb'))

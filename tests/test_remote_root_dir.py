"""A root_dir on a TensorFlow filesystem other than the local disk (gs://, s3://...).

GCS cannot be reached here; TensorFlow's ram:// filesystem stands in for it: paths with
a scheme, directories that are name prefixes, no flock, no rename of a directory. The
job trains, exports, publishes TF Serving versions, resumes from its checkpoints, and
refuses to start from scratch over its exports, all on ram://, and nothing lands on the
local disk (`os.path.normpath` once made 'ram://x' the local folder 'ram:/x').
"""
import os
import uuid

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from learners import train_eval
from learners.configuration import config
from learners.configuration import validation
from tfrl import export
from tfrl import files
from tfrl import run_dir

BRIEF = dict(initial_collect_steps=200, eval_interval=256, checkpoint_interval=256,
             policy_checkpoint_interval=256, target_return=None)


def _ram_dir(name: str) -> str:
  return f'ram://tfrl-test-{name}-{uuid.uuid4().hex[:8]}'


@pytest.fixture
def local_cwd(tmp_path, monkeypatch):
  """Runs the test in an empty local directory; yields it (to check it stays empty)."""
  monkeypatch.chdir(tmp_path)
  yield tmp_path


def _agent():
  observation = tensor_spec.BoundedTensorSpec((4,), tf.float32, -1.0, 1.0)
  action = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 2)
  agent = dqn_agent.DqnAgent(ts.time_step_spec(observation), action,
                             q_network.QNetwork(observation, action),
                             tf.keras.optimizers.Adam())
  agent.initialize()
  return agent


@pytest.mark.integration
def test_a_job_on_ram_trains_exports_serves_and_resumes(local_cwd):
  root = _ram_dir('job')
  first = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=256, **BRIEF)
  greedy = first['greedy_policy_dir']
  assert greedy == f'{root}/policies/greedy_policy'
  first_step = export.exported_train_step(greedy)
  assert first_step == first['train_step'] >= 256

  second = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=768, **BRIEF)
  # Resumed from the checkpoint on ram://: its first progress line is past the first
  # job's end, and the export is newer, never older.
  assert second['history'][0]['train_step'] > first_step, second['history'][:2]
  assert export.exported_train_step(greedy) == second['train_step'] > first_step
  policy = export.load_policy(greedy)
  assert policy.get_train_step() == second['train_step']
  action, _ = policy.predict(np.zeros(4, np.float32))
  assert action in (0, 1)
  versions = export.serving_versions(f'{root}/policies/serving/greedy_policy')
  assert [int(os.path.basename(v)) for v in versions][-2:] == [first_step,
                                                               second['train_step']]
  assert tf.io.gfile.exists(f'{root}/run.json')
  assert os.listdir(local_cwd) == []  # nothing written to a local 'ram:' folder


def test_a_fresh_job_refuses_to_replace_exports_on_ram_without_checkpoints(local_cwd):
  root = _ram_dir('exports')
  export.export_policy(_agent().policy, f'{root}/policies/greedy_policy',
                       tf.Variable(5, dtype=tf.int64))
  with pytest.raises(run_dir.RootDirNotResumable, match='holds exports'):
    run_dir.claim(root)
  # --overwrite deletes them, as on a local disk.
  run_dir.claim(root, overwrite=True).release()
  assert not tf.io.gfile.exists(f'{root}/policies/greedy_policy')
  assert os.listdir(local_cwd) == []


def test_a_re_export_on_ram_holds_the_new_variables(local_cwd):
  agent, step = _agent(), tf.Variable(1, dtype=tf.int64)
  path = f'{_ram_dir("export")}/policies/greedy_policy'
  export.export_policy(agent.policy, path, step)
  for variable in agent.policy.variables():
    variable.assign(variable + 1.0)
  step.assign(2)
  export.export_policy(agent.policy, path, step)
  loaded = export.load_policy(path)
  assert loaded.get_train_step() == 2
  for loaded_variable, variable in zip(loaded.model_variables, agent.policy.variables()):
    np.testing.assert_array_equal(loaded_variable.numpy(), variable.numpy())
  # The temporary directory of each write is gone.
  assert tf.io.gfile.listdir(os.path.dirname(path)) == ['greedy_policy']
  assert os.listdir(local_cwd) == []


def test_remote_paths_are_joined_without_normalizing_the_scheme():
  assert files.join('gs://bucket/job', 'variables/variables.index') == (
      'gs://bucket/job/variables/variables.index')
  assert files.join('gs://bucket/job', '') == 'gs://bucket/job'
  assert files._below('gs://bucket/job/variables', 'gs://bucket/job') == 'variables'  # pylint: disable=protected-access
  assert files._below('gs://bucket/job/', 'gs://bucket/job') == ''  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='is not below'):
    files._below('gs://bucket/other', 'gs://bucket/job')  # pylint: disable=protected-access


def test_root_dir_checks_and_the_lock_on_a_remote_filesystem(local_cwd, caplog):
  root = _ram_dir('checks')
  validation.check_root_dir(root)  # absent: can be made
  files.write_json(f'{root}/a_file', {})
  with pytest.raises(validation.ValidationError, match='is a file'):
    validation.check_root_dir(f'{root}/a_file')
  lock = run_dir.RootDirLock(root)
  assert 'has no job lock' in caplog.text
  lock.release()
  assert os.listdir(local_cwd) == []


def test_a_remote_root_dir_that_cannot_be_reached_is_one_config_error():
  # s3:// is a scheme this TensorFlow build has no filesystem for: what a gs:// path
  # without network or credentials gives as well, an OpError from the first call.
  with pytest.raises(validation.ValidationError) as raised:
    validation.check_root_dir('s3://bucket/job')
  assert raised.value.message.startswith("--root_dir = s3://bucket/job: cannot be reached "
                                         "(File system scheme 's3' not implemented")
  assert '\n' not in raised.value.message
  with pytest.raises(config.ConfigError, match='^root_dir = s3://bucket/job: cannot be '):
    train_eval.run('s3://bucket/job', ['dqn_cartpole.gin'])


def test_evaluator_results_on_ram_are_whole_files_that_a_restart_continues(local_cwd):
  from learners.job import evaluator  # pylint: disable=import-outside-toplevel
  root = _ram_dir('eval')
  log = evaluator.ResultsLog(root)
  log.add({'train_step': 10, 'env_steps': 100, 'return': 1.5})
  log.add({'train_step': 20, 'env_steps': 200, 'return': 2.5})
  restarted = evaluator.ResultsLog(root)  # a restarted evaluator reads them back
  restarted.add({'train_step': 30, 'env_steps': 300, 'return': 3.5})
  assert files.read_json(f'{root}/eval/results.json') == restarted.rows
  assert [row['train_step'] for row in restarted.rows] == [10, 20, 30]
  with tf.io.gfile.GFile(f'{root}/eval/results.csv') as f:
    lines = f.read().splitlines()
  assert lines == ['env_steps,return,train_step', '100,1.5,10', '200,2.5,20', '300,3.5,30']
  assert os.listdir(local_cwd) == []

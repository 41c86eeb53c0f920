"""Tests for Reverb tables, the server handle, datasets, priorities and variables."""
import errno
import os
import socket
import time

import numpy as np
import ports  # tests/ports.py
import pytest
import reverb
import tensorflow as tf
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory as trajectory_lib

from tfrl import replay

F, M, L = (int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST))


def collect_data_spec(observation_shape=()):
  return trajectory_lib.Trajectory(
      step_type=tf.TensorSpec((), tf.int32),
      observation=tf.TensorSpec(observation_shape, tf.float32),
      action=tf.TensorSpec((), tf.int64),
      policy_info=(),
      next_step_type=tf.TensorSpec((), tf.int32),
      reward=tf.TensorSpec((), tf.float32),
      discount=tf.TensorSpec((), tf.float32))


def feed(writer, step_types, num_writes=None):
  """Feeds `writer` batched steps with obs = 100 * env + t and policy version t.

  Args:
    writer: a tfrl writer.
    step_types: [T + 1, N] step types of the time steps (rewards are 1 except on FIRST).
    num_writes: how many writes (default T).
  """
  step_types = np.asarray(step_types, dtype=np.int32)
  num_envs = step_types.shape[1]
  observations = (100 * np.arange(num_envs)[None, :] +
                  np.arange(len(step_types))[:, None]).astype(np.float32)
  time_steps = [ts.TimeStep(step_type=step_types[t],
                            reward=np.where(step_types[t] == F, 0, 1).astype(np.float32),
                            discount=np.ones(num_envs, np.float32),
                            observation=observations[t])
                for t in range(len(step_types))]
  for t in range(num_writes or len(step_types) - 1):
    action = observations[t].astype(np.int64)
    writer.write(time_steps[t], policy_step_lib.PolicyStep(action, (), ()),
                 time_steps[t + 1], t)
  writer.close()


def mid_steps(num_steps, num_envs):
  """Step types of one long episode per env: FIRST then MID."""
  return [[F] * num_envs] + [[M] * num_envs] * num_steps


def sample_all(client, table, num_samples):
  return list(client.sample(table, num_samples=num_samples, emit_timesteps=False))


# Tables.


def test_uniform_table_evicts_oldest_and_resamples(reverb_server_factory):
  server = reverb_server_factory([replay.uniform_table('uniform', max_size=3,
                                                       signature=None)])
  for value in range(5):
    server.client.insert(np.int64(value), priorities={'uniform': 1.0})

  samples = sample_all(server.client, 'uniform', 60)

  assert server.client.server_info()['uniform'].current_size == 3
  values = [int(s.data[0]) for s in samples]
  assert set(values) == {2, 3, 4}  # 0 and 1 were evicted first; 60 draws see the rest.
  np.testing.assert_allclose([s.info.probability for s in samples], 1 / 3)
  assert max(s.info.times_sampled for s in samples) > 1


def test_prioritized_table_samples_in_proportion_to_priority(reverb_server_factory):
  server = reverb_server_factory([replay.prioritized_table(
      'prioritized', max_size=10, signature=None, priority_exponent=0.5)])
  priorities = {0: 0.0, 1: 1.0, 2: 9.0}
  for value, priority in priorities.items():
    server.client.insert(np.int64(value), priorities={'prioritized': priority})

  samples = sample_all(server.client, 'prioritized', 80)

  # P(i) = p_i^0.5 / sum: 0, 1/4, 3/4.
  expected = {1: 0.25, 2: 0.75}
  values = [int(s.data[0]) for s in samples]
  assert set(values) == {1, 2}
  for value, sample in zip(values, samples):
    assert sample.info.probability == pytest.approx(expected[value])
    assert sample.info.priority == priorities[value]


def test_queue_table_serves_each_item_once_in_order(reverb_server_factory):
  server = reverb_server_factory([replay.queue_table('queue', max_size=5, signature=None)])
  for value in range(3):
    server.client.insert(np.int64(value), priorities={'queue': 1.0})

  values = [int(s.data[0]) for s in sample_all(server.client, 'queue', 3)]

  assert values == [0, 1, 2]
  assert server.client.server_info()['queue'].current_size == 0


def test_variables_table_keeps_only_the_newest_push(reverb_server_factory):
  signature = tf.TensorSpec((2,), tf.float32)
  server = reverb_server_factory([replay.variables_table(signature)])
  assert replay.VARIABLES_TABLE == 'variables'
  with server.client.trajectory_writer(num_keep_alive_refs=1) as writer:
    for value in (1.0, 2.0):
      writer.append(np.full(2, value, np.float32))
      writer.create_item('variables', 1.0, writer.history[-1])

  # Sampling never removes it: every actor reads the same newest copy.
  samples = list(server.client.sample('variables', num_samples=3, emit_timesteps=False,
                                      unpack_as_table_signature=True))

  assert server.client.server_info()['variables'].current_size == 1
  for sample in samples:
    np.testing.assert_array_equal(sample.data, [2.0, 2.0])


# Rate limiters.


def test_rate_limiter_without_ratio_is_min_size():
  limiter = replay.rate_limiter(min_size_to_sample=3)
  table = replay.uniform_table('t', 10, None, min_size_to_sample=3)

  assert isinstance(limiter, reverb.rate_limiters.MinSize)
  info = table.info.rate_limiter_info
  assert info.min_size_to_sample == 3
  assert info.min_diff < -1e300 and info.max_diff > 1e300  # No ratio enforced.


@pytest.mark.parametrize('error_buffer, min_diff, max_diff', [
    (4.0, -2.0, 6.0),  # offset samples_per_insert * min_size = 2, +- 4.
    (None, -18.0, 22.0),  # default: max(2 * 1, 10 * 2) = 20.
])
def test_rate_limiter_with_ratio_is_sample_to_insert(error_buffer, min_diff, max_diff):
  limiter = replay.rate_limiter(1, samples_per_insert=2.0, error_buffer=error_buffer)
  table = replay.prioritized_table('t', 10, None, min_size_to_sample=1,
                                   samples_per_insert=2.0, error_buffer=error_buffer)

  assert isinstance(limiter, reverb.rate_limiters.SampleToInsertRatio)
  info = table.info.rate_limiter_info
  assert info.samples_per_insert == 2.0
  assert info.min_size_to_sample == 1
  assert (info.min_diff, info.max_diff) == (min_diff, max_diff)


def test_sample_to_insert_ratio_blocks_sampling_past_the_ratio(reverb_server_factory):
  table = replay.uniform_table('t', 10, None, min_size_to_sample=1, samples_per_insert=2.0,
                               error_buffer=4.0)
  server = reverb_server_factory([table])
  server.client.insert(np.int64(0), priorities={'t': 1.0})

  # Allowed range of inserts * 2 - samples: [-2, 6]; one insert puts it at 2.
  assert table.can_sample(4)
  assert not table.can_sample(5)
  assert table.can_insert(2)
  assert not table.can_insert(3)


@pytest.mark.parametrize('kwargs', [
    dict(min_size_to_sample=0),
    dict(samples_per_insert=0.0),
    dict(samples_per_insert=-1.0),
])
def test_rate_limiter_rejects_invalid_arguments(kwargs):
  with pytest.raises(ValueError):
    replay.rate_limiter(**kwargs)


# Server.


def test_connect_to_embedded_server_shares_its_tables(reverb_server_factory):
  server = reverb_server_factory([replay.queue_table('queue', 5, None)])
  remote = replay.ReplayServer.connect(server.address, timeout_s=5)

  remote.client.insert(np.int64(7), priorities={'queue': 1.0})

  assert remote.address == server.address == f'127.0.0.1:{server.port}'
  assert remote.port == server.port
  assert server.table_info()['queue'].current_size == 1
  remote.stop()  # A connected handle does not own the server: it keeps serving.
  assert remote.table_info(timeout_s=5)['queue'].current_size == 1


def test_a_picked_port_stays_held_until_the_server_listens(monkeypatch):
  # Another process binding the port between the pick and the server's listen would
  # share it (gRPC's SO_REUSEPORT): the pick must stay bound until then.
  real_server = reverb.Server
  binds_while_starting = []

  def server_after_another_bind(tables, port, **kwargs):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
      try:
        other.bind(('127.0.0.1', port))
        binds_while_starting.append('bound')
      except OSError as e:
        binds_while_starting.append(errno.errorcode[e.errno])
    return real_server(tables=tables, port=port, **kwargs)

  monkeypatch.setattr(reverb, 'Server', server_after_another_bind)
  server = replay.ReplayServer([replay.queue_table('queue', 5, None)])
  try:
    server.client.insert(np.int64(7), priorities={'queue': 1.0})
    assert binds_while_starting == ['EADDRINUSE']
    assert server.table_info()['queue'].current_size == 1
    with pytest.raises(replay.PortInUseError, match=str(server.port)):
      with replay.network.reserved_port(server.port):
        pass
  finally:
    server.stop()


def test_connect_to_unused_port_fails_fast_naming_the_address():
  address = f'127.0.0.1:{ports.free_port()}'
  start = time.monotonic()

  with pytest.raises(replay.ReplayServerUnreachableError) as error:
    replay.ReplayServer.connect(address, timeout_s=2)

  assert time.monotonic() - start < 15  # the 2 s bound with a loaded machine's slack
  assert address in str(error.value)
  assert isinstance(error.value, ConnectionError)


def test_stopped_server_is_unreachable(reverb_server_factory):
  server = reverb_server_factory([replay.queue_table('queue', 5, None)])
  address = server.address
  server.stop()

  with pytest.raises(replay.ReplayServerUnreachableError, match=address):
    replay.wait_for_server(address, timeout_s=1)


# Checkpoints.

CHECKPOINT_SIGNATURE = {'observation': tf.TensorSpec((2,), tf.float32),
                        'version': tf.TensorSpec((), tf.int64)}


def checkpoint_tables(replay_table=None, extra=()):
  """The tables a checkpoint is written with; tests change one at a time."""
  if replay_table is None:
    replay_table = replay.uniform_table('replay', 100, CHECKPOINT_SIGNATURE)
  return [replay_table, replay.queue_table('queue', 10, CHECKPOINT_SIGNATURE)] + list(extra)


def write_checkpoint(reverb_server_factory, checkpoint_dir):
  """Starts a server with `checkpoint_tables()`, inserts one item, checkpoints, stops."""
  server = reverb_server_factory(checkpoint_tables(), checkpoint_dir=checkpoint_dir)
  server.client.insert({'observation': np.array([1.0, 2.0], np.float32),
                        'version': np.int64(7)}, priorities={'replay': 1.0})
  path = server.checkpoint()
  server.stop()
  return path


@pytest.mark.parametrize('tables, differences', [
    (checkpoint_tables(replay.uniform_table('replay', 50, CHECKPOINT_SIGNATURE)),
     ["table 'replay': max_size 100 in the checkpoint, 50 configured"]),
    (checkpoint_tables(replay.prioritized_table('replay', 100, CHECKPOINT_SIGNATURE)),
     ["table 'replay': sampler uniform in the checkpoint, prioritized "
      '(priority_exponent 0.6) configured']),
    (checkpoint_tables(replay.uniform_table('replay', 100, CHECKPOINT_SIGNATURE,
                                            min_size_to_sample=5)),
     ["table 'replay': rate limiter min_size_to_sample 1 in the checkpoint, 5 configured"]),
    (checkpoint_tables(replay.uniform_table('replay', 100, CHECKPOINT_SIGNATURE,
                                            samples_per_insert=4.0, error_buffer=8.0)),
     ["table 'replay': rate limiter samples_per_insert 1 in the checkpoint, 4 configured",
      'rate limiter min_diff -unbounded in the checkpoint, -4 configured',
      'rate limiter max_diff unbounded in the checkpoint, 12 configured']),
    (checkpoint_tables(replay.uniform_table('replay', 100, dict(
        CHECKPOINT_SIGNATURE, observation=tf.TensorSpec((3,), tf.float32)))),
     ["table 'replay': signature observation float32[2] in the checkpoint, float32[3] "
      'configured']),
    (checkpoint_tables(replay.uniform_table('replay', 100, dict(
        CHECKPOINT_SIGNATURE, version=tf.TensorSpec((), tf.int32)))),
     ["table 'replay': signature version int64[] in the checkpoint, int32[] configured"]),
    (checkpoint_tables(replay.uniform_table('replay', 100, dict(
        CHECKPOINT_SIGNATURE, reward=tf.TensorSpec((), tf.float32)))),
     ["table 'replay': signature reward is configured but not in the checkpoint"]),
    (checkpoint_tables(extra=[replay.variables_table(None)]),
     ["table 'variables' is configured but not in the checkpoint"]),
    (checkpoint_tables()[:1],
     ["table 'queue' is in the checkpoint but not configured"]),
    # Every difference is reported at once.
    (checkpoint_tables(replay.uniform_table('replay', 50, None))[:1],
     ["table 'replay': max_size 100 in the checkpoint, 50 configured",
      "table 'replay': a signature in the checkpoint, none configured",
      "table 'queue' is in the checkpoint but not configured"]),
], ids=['capacity', 'sampler', 'min_size', 'samples_per_insert', 'shape', 'dtype',
        'structure', 'added_table', 'removed_table', 'several'])
def test_restart_with_changed_tables_names_checkpoint_and_differences(
    reverb_server_factory, tmp_path, tables, differences):
  checkpoint_dir = str(tmp_path / 'reverb')
  path = write_checkpoint(reverb_server_factory, checkpoint_dir)

  with pytest.raises(replay.CheckpointMismatchError) as error:
    reverb_server_factory(tables, checkpoint_dir=checkpoint_dir)

  message = str(error.value)
  assert message.startswith(f'Reverb checkpoint {path} holds tables that differ')
  for difference in differences:
    assert difference in message
  listed = message.split(' configuration: ', 1)[1].rsplit('. Start with', 1)[0]
  assert len(listed.split('; ')) == len(differences), listed  # Nothing else differs.
  assert 'empty checkpoint directory' in message
  assert isinstance(error.value, ValueError)


def test_restart_with_same_tables_restores_contents(reverb_server_factory, tmp_path):
  checkpoint_dir = str(tmp_path / 'reverb')
  write_checkpoint(reverb_server_factory, checkpoint_dir)

  server = reverb_server_factory(checkpoint_tables(), checkpoint_dir=checkpoint_dir)

  assert server.table_info()['replay'].current_size == 1
  sample = next(server.client.sample('replay', emit_timesteps=False,
                                     unpack_as_table_signature=True))
  # Client.insert writes one time step: a leading dimension of 1.
  np.testing.assert_array_equal(np.ravel(sample.data['observation']), [1.0, 2.0])
  assert np.ravel(sample.data['version']).tolist() == [7]


def test_periodic_checkpoints_restore_the_newest(reverb_server_factory, tmp_path):
  # As the reverb_server program checkpoints: every interval, then again at its stop.
  checkpoint_dir = str(tmp_path / 'reverb')
  table = lambda: replay.uniform_table('replay', max_size=10, signature=None)
  server = reverb_server_factory([table()], checkpoint_dir=checkpoint_dir)
  for value in range(3):
    server.client.insert(np.int64(value), priorities={'replay': 1.0})
  first = server.checkpoint()
  assert os.path.isdir(first)
  assert os.path.commonpath([first, checkpoint_dir]) == checkpoint_dir
  server.client.insert(np.int64(3), priorities={'replay': 1.0})
  newest = server.checkpoint()
  assert newest != first and os.path.isdir(newest)
  server.stop()

  restored = reverb_server_factory([table()], checkpoint_dir=checkpoint_dir)
  assert restored.table_info()['replay'].current_size == 4


def test_latest_checkpoint_is_the_newest_complete_one(tmp_path):
  assert replay.latest_checkpoint(str(tmp_path / 'missing')) is None
  assert replay.latest_checkpoint(str(tmp_path)) is None
  for name, done in (('2026-01-01T00', True), ('2026-01-02T00', True),
                     ('2026-01-03T00', False)):  # The newest was cut off mid-write.
    (tmp_path / name).mkdir()
    if done:
      (tmp_path / name / 'DONE').write_text('')

  assert replay.latest_checkpoint(str(tmp_path)) == str(tmp_path / '2026-01-02T00')


# Datasets.


def test_make_dataset_batches_transition_rows(reverb_server_factory):
  spec = collect_data_spec()
  signature = replay.NStepTransitionWriter.item_signature(spec, 4)
  server = reverb_server_factory([replay.queue_table('queue', 10, signature)])
  feed(replay.NStepTransitionWriter(server.client, 'queue', n=1), mid_steps(2, 4))

  dataset = replay.make_dataset(server.address, 'queue', signature, batch_size=8,
                                rows_per_item=4, time_major=False,
                                experience_spec=spec, rate_limiter_timeout_ms=100)
  experience, info = next(iter(dataset))

  assert isinstance(experience, trajectory_lib.Trajectory)
  assert experience.observation.shape == (8, 2)
  np.testing.assert_array_equal(experience.observation[:, 0],
                                [0, 100, 200, 300, 1, 101, 201, 301])
  np.testing.assert_array_equal(experience.observation[:, 1],
                                [1, 101, 201, 301, 2, 102, 202, 302])
  np.testing.assert_array_equal(info['policy_version'], [0] * 4 + [1] * 4)
  for name in ('key', 'probability', 'priority', 'table_size', 'times_sampled'):
    assert info[name].shape == (8,), name
  keys = info['key'].numpy()
  assert len(set(keys[:4])) == 1 and len(set(keys[4:])) == 1 and keys[0] != keys[4]
  np.testing.assert_array_equal(replay.valid_mask(experience), np.ones(8))


def test_make_dataset_turns_sequences_batch_major(reverb_server_factory):
  signature = replay.SequenceWriter.item_signature(collect_data_spec(), 3, 2)
  server = reverb_server_factory([replay.queue_table('queue', 10, signature)])
  feed(replay.SequenceWriter(server.client, 'queue', length=3), mid_steps(6, 2))

  experience, info = next(iter(replay.make_dataset(
      server.address, 'queue', signature, batch_size=4, rows_per_item=2, time_major=True,
      rate_limiter_timeout_ms=100)))

  # Rows: (item 0, env 0), (item 0, env 1), (item 1, env 0), (item 1, env 1).
  np.testing.assert_array_equal(experience.observation,
                                [[0, 1, 2], [100, 101, 102], [3, 4, 5], [103, 104, 105]])
  np.testing.assert_array_equal(info['policy_version'],
                                [[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5]])
  assert info['key'].shape == (4,)


def test_make_dataset_rejects_batch_not_multiple_of_rows_per_item(reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(collect_data_spec(), 4)
  server = reverb_server_factory([replay.queue_table('queue', 10, signature)])

  with pytest.raises(ValueError, match='batch_size=6'):
    replay.make_dataset(server.address, 'queue', signature, batch_size=6, rows_per_item=4,
                        time_major=False)


def test_make_dataset_rejects_rows_per_item_the_items_do_not_hold(reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(collect_data_spec(), 4)
  server = reverb_server_factory([replay.queue_table('queue', 10, signature)])

  with pytest.raises(ValueError, match='hold 4 rows by their signature, not rows_per_item=2'):
    replay.make_dataset(server.address, 'queue', signature, batch_size=8, rows_per_item=2,
                        time_major=False)


def test_check_table_signature_names_the_differing_field(reverb_server_factory):
  stored = replay.NStepTransitionWriter.item_signature(collect_data_spec((4,)), 2)
  expected = replay.NStepTransitionWriter.item_signature(collect_data_spec((5,)), 2)
  server = reverb_server_factory([replay.uniform_table('replay', 10, stored)])
  replay.check_table_signature(server.address, 'replay', stored)  # Matches: no error.

  with pytest.raises(replay.SpecMismatchError) as error:
    replay.check_table_signature(server.address, 'replay', expected)
  with pytest.raises(replay.SpecMismatchError, match='observation'):
    replay.make_dataset(server.address, 'replay', expected, batch_size=2, rows_per_item=2,
                        time_major=False)

  message = str(error.value)
  assert 'observation' in message and "'replay'" in message
  assert '[2, 2, 4]' in message and '[2, 2, 5]' in message
  assert isinstance(error.value, ValueError)


def test_check_table_signature_names_missing_table(reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(collect_data_spec(), 1)
  server = reverb_server_factory([replay.uniform_table('replay', 10, signature)])

  with pytest.raises(replay.SpecMismatchError, match="'queue'.*replay"):
    replay.check_table_signature(server.address, 'queue', signature)


# Priorities.


def priorities_by_key(client, table, num_samples=60):
  """Key -> priority, seen by sampling `table` (with replacement)."""
  return {int(s.info.key): float(s.info.priority)
          for s in sample_all(client, table, num_samples)}


def test_priority_updater_in_tf_function_sets_max_priority_per_item(
    reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(collect_data_spec(), 2)
  server = reverb_server_factory([replay.prioritized_table('prioritized', 10, signature)])
  feed(replay.NStepTransitionWriter(server.client, 'prioritized', n=1), mid_steps(2, 2))
  initial = priorities_by_key(server.client, 'prioritized')
  assert list(initial.values()) == [1.0, 1.0]
  key_a, key_b = initial
  updater = replay.PriorityUpdater(server.address, 'prioritized')

  @tf.function
  def update(keys, row_priorities):
    updater(keys, row_priorities)

  # One key per row, as a dataset batch gives them: rows of an item share its key, and
  # an item may appear in several rows.
  keys = np.array([key_a, key_a, key_b, key_b, key_a], dtype=np.uint64)
  update(tf.constant(keys), tf.constant([0.5, 3.0, 2.0, 0.1, 1.5]))

  assert priorities_by_key(server.client, 'prioritized') == {key_a: 3.0, key_b: 2.0}


def test_priority_updater_eagerly(reverb_server_factory):
  server = reverb_server_factory([replay.prioritized_table('prioritized', 10, None)])
  server.client.insert(np.int64(0), priorities={'prioritized': 1.0})
  key = next(iter(priorities_by_key(server.client, 'prioritized', 1)))

  replay.PriorityUpdater(server.address, 'prioritized')(tf.constant([key], tf.uint64),
                                                        tf.constant([4.5]))

  assert priorities_by_key(server.client, 'prioritized', 1) == {key: 4.5}


# Variables.


def make_variables(weights, step):
  return {'policy': [tf.Variable(np.asarray(weights, np.float32)),
                     tf.Variable(np.zeros((2, 2), np.float32) + step)],
          'train_step': tf.Variable(step, dtype=tf.int64)}


def test_variable_container_push_then_pull_elsewhere(reverb_server_factory):
  learner_variables = make_variables([1.0, 2.0, 3.0], 7)
  signature = replay.VariableContainer.signature(learner_variables)
  server = reverb_server_factory([replay.variables_table(signature)])
  learner = replay.VariableContainer(server.address, learner_variables)
  actor_variables = make_variables([0.0, 0.0, 0.0], 0)
  actor = replay.VariableContainer(server.address, actor_variables)

  learner.push()
  pulled = actor.pull(timeout_s=5)
  learner_variables['train_step'].assign(8)
  learner_variables['policy'][0].assign([4.0, 5.0, 6.0])
  learner.push()
  actor.update(timeout_s=5)

  np.testing.assert_array_equal(pulled['policy'][0], [1.0, 2.0, 3.0])
  np.testing.assert_array_equal(pulled['policy'][1], np.full((2, 2), 7.0))
  assert pulled['train_step'] == 7
  np.testing.assert_array_equal(actor_variables['policy'][0].numpy(), [4.0, 5.0, 6.0])
  assert actor_variables['train_step'].numpy() == 8
  assert server.client.server_info()['variables'].current_size == 1


def test_pull_from_empty_variables_table_times_out(reverb_server_factory):
  variables = make_variables([1.0], 0)
  server = reverb_server_factory([
      replay.variables_table(replay.VariableContainer.signature(variables))])
  container = replay.VariableContainer(server.address, variables)
  start = time.monotonic()

  with pytest.raises(replay.VariablesNotPushedError, match="'variables'"):
    container.pull(timeout_s=1)

  assert time.monotonic() - start < 10  # the 1 s bound with a loaded machine's slack

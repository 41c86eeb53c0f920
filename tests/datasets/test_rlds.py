"""RLDS datasets: recorded from an actor, read back, fed through the online writer.

The round trip's promise: a transition built from a dataset is exactly the transition
the online collector built from the same steps (n-step folding, the truncation
bootstrap, terminal discounts), whatever the number of envs either side used.
"""
import gymnasium
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.policies import random_tf_policy

from tfrl import actors
from tfrl import envs
from tfrl import replay
from tfrl.datasets import feeder
from tfrl.datasets import rlds

N_STEP, GAMMA = 3, 0.9


def short_cartpole(num_envs, seed=0):
  """CartPole cut at 12 steps: episodes both terminate and are truncated."""
  return envs.make(lambda: gymnasium.wrappers.TimeLimit(
      gymnasium.make('CartPole-v1').unwrapped, max_episode_steps=12), num_envs=num_envs,
                   seed=seed)


class Switch:
  """Forwards writes to `writer` until turned off (recording stops, replay goes on)."""

  def __init__(self, writer):
    self.writer, self.on = writer, True

  def write(self, *args, **kwargs):
    if self.on:
      self.writer.write(*args, **kwargs)

  def reset(self):
    self.writer.reset()

  def flush(self):
    pass

  def close(self):
    pass


def queue_rows(server, table):
  """Every row in a queue table: (step types, observations, action, reward, discount)
  per transition, as bytes, with its validity."""
  size = server.client.server_info()[table].current_size
  rows = []
  for sample in server.client.sample(table, num_samples=size, emit_timesteps=False,
                                     unpack_as_table_signature=True):
    experience = sample.data["experience"]
    for i in range(experience.step_type.shape[0]):
      row = (experience.step_type[i].tobytes(), experience.observation[i].tobytes(),
             experience.action[i].tobytes(), experience.reward[i, 0].tobytes(),
             experience.discount[i, 0].tobytes())
      rows.append((row, experience.step_type[i, 0] != 2))
  return rows


def n_step_writer(server, table, num_envs):
  return replay.NStepTransitionWriter(server.client, table, n=N_STEP, discount=GAMMA,
                                      envs_per_item=num_envs)


@pytest.fixture
def recorded(tmp_path, reverb_server_factory):
  """A random policy's CartPole steps, written online and recorded as a dataset."""
  env = short_cartpole(num_envs=4)
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  signature = replay.NStepTransitionWriter.item_signature(policy.collect_data_spec, 4)
  server = reverb_server_factory([replay.queue_table('online', 10_000, signature)])
  online = n_step_writer(server, 'online', 4)
  recorder = rlds.RldsRecorder(str(tmp_path / 'data'), env.time_step_spec(),
                               env.action_spec(), metadata={'env': 'short CartPole'})
  switch = Switch(recorder)
  actor = actors.Actor(env, policy, [online, switch])
  actor.run(150)
  switch.on = False
  recorder.close()
  actor.run(N_STEP - 1)  # the online writer's last recorded rows leave its window
  online.flush()
  return dict(env=env, policy=policy, server=server, recorder=recorder,
              directory=str(tmp_path / 'data'), online=queue_rows(server, 'online'))


def test_recorded_dataset_reads_back_whole_episodes(recorded):
  data = rlds.read(recorded['directory'])
  assert data.num_episodes == recorded['recorder'].episodes > 30
  assert data.num_transitions == recorded['recorder'].steps
  assert data.observation.dtype == np.float32 and data.observation.shape[1:] == (4,)
  # CartPole pays 1 per step; a 12-step cut is a truncation, an earlier end terminal.
  lengths = np.diff(np.append(data.episode_starts(), data.num_steps)) - 1
  np.testing.assert_array_equal(data.episode_returns(), lengths)
  terminal = data.is_terminal[data.is_last]
  assert terminal.any() and not terminal.all()
  assert terminal[lengths < 12].all() and (lengths[~terminal] == 12).all()
  assert rlds.read_metadata(recorded['directory']) == {'env': 'short CartPole'}


@pytest.mark.parametrize('num_slots', [1, 3, 4])
def test_dataset_rows_are_the_online_writers_rows(recorded, reverb_server_factory,
                                                  num_slots):
  data = rlds.read(recorded['directory'])
  signature = replay.NStepTransitionWriter.item_signature(
      recorded['policy'].collect_data_spec, num_slots)
  server = reverb_server_factory([replay.queue_table('offline', 10_000, signature)])
  writer = n_step_writer(server, 'offline', num_slots)
  feeder.feed(data, writer, feeder.padded_indices(data, num_slots, N_STEP - 1))
  offline = queue_rows(server, 'offline')
  online_valid = {row for row, valid in recorded['online'] if valid}
  offline_valid = [row for row, valid in offline if valid]
  assert len(offline_valid) == data.num_transitions
  assert len(set(offline_valid)) == len(offline_valid)
  missing = [row for row in offline_valid if row not in online_valid]
  assert not missing, f'{len(missing)} dataset rows differ from every online row'
  # Both kinds of end survive: truncated rows bootstrap, terminal ones do not.
  discounts = {np.frombuffer(row[4], np.float32)[0] for row in offline_valid
               if np.frombuffer(row[0], np.int32)[1] == 2}
  assert 0.0 in discounts and max(discounts) > 0.0


def test_a_dataset_of_another_env_is_refused_naming_both_specs(recorded, tmp_path):
  data = rlds.read(recorded['directory'])
  pendulum = envs.make('Pendulum-v1', num_envs=1)
  with pytest.raises(rlds.DatasetSpecError) as error:
    rlds.check_specs(data.specs, pendulum.time_step_spec().observation,
                     pendulum.action_spec(), recorded['directory'])
  assert 'float32[4]' in str(error.value) and 'float32[3]' in str(error.value)
  rlds.check_specs(data.specs, recorded['env'].time_step_spec().observation,
                   recorded['env'].action_spec(), recorded['directory'])


def test_recording_into_a_directory_with_files_is_refused(recorded):
  env = recorded['env']
  with pytest.raises(FileExistsError, match='already holds files'):
    rlds.RldsRecorder(recorded['directory'], env.time_step_spec(), env.action_spec())


def test_uint8_frames_stay_uint8(tmp_path):
  spec = tf.TensorSpec([84, 84, 4], tf.uint8)
  from tf_agents.specs import tensor_spec  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  time_step_spec = ts.time_step_spec(tensor_spec.from_spec(spec))
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
  recorder = rlds.RldsRecorder(str(tmp_path / 'frames'), time_step_spec, action_spec)
  frames = np.random.default_rng(0).integers(0, 255, (3, 1, 84, 84, 4), dtype=np.uint8)
  step = lambda t, kind: ts.TimeStep(np.array([kind], np.int32), np.ones(1, np.float32),
                                     np.array([0.0 if kind == 2 else 1.0], np.float32),
                                     frames[t])
  from tf_agents.trajectories import policy_step  # pylint: disable=g-import-not-at-top
  act = policy_step.PolicyStep(np.array([2], np.int64), (), ())
  recorder.write(step(0, 0), act, step(1, 1))
  recorder.write(step(1, 1), act, step(2, 2))
  recorder.close()
  data = rlds.read(str(tmp_path / 'frames'))
  assert data.observation.dtype == np.uint8
  np.testing.assert_array_equal(data.observation, frames[:, 0])
  np.testing.assert_array_equal(data.is_terminal, [False, False, True])


def record_random(directory, env, steps):
  """A random policy's episodes of `env`, recorded into `directory`."""
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  recorder = rlds.RldsRecorder(directory, env.time_step_spec(), env.action_spec(),
                               metadata={'steps': steps})
  actors.Actor(env, policy, [recorder]).run(steps)
  recorder.close()
  return rlds.read(directory)


def test_merged_datasets_hold_every_episode_in_order(tmp_path):
  first = record_random(str(tmp_path / 'a'), short_cartpole(num_envs=2, seed=1), 40)
  second = record_random(str(tmp_path / 'b'), short_cartpole(num_envs=3, seed=2), 30)
  merged_recorder = rlds.merge([str(tmp_path / 'a'), str(tmp_path / 'b')],
                               str(tmp_path / 'mixed'), metadata={'mix': 'a + b'})
  merged = rlds.read(str(tmp_path / 'mixed'))
  assert merged.num_episodes == merged_recorder.episodes == (first.num_episodes +
                                                             second.num_episodes)
  for field in ('observation', 'action', 'reward', 'discount', 'is_first', 'is_last',
                'is_terminal'):
    np.testing.assert_array_equal(
        getattr(merged, field),
        np.concatenate([getattr(first, field), getattr(second, field)]), err_msg=field)
  metadata = rlds.read_metadata(str(tmp_path / 'mixed'))
  assert metadata['mix'] == 'a + b'
  assert [m['metadata'] for m in metadata['merged_from']] == [{'steps': 40}, {'steps': 30}]


def test_merging_datasets_of_two_envs_is_refused_naming_both(tmp_path):
  record_random(str(tmp_path / 'cartpole'), short_cartpole(num_envs=2), 30)
  record_random(str(tmp_path / 'pendulum'), envs.make('Pendulum-v1', num_envs=1), 210)
  with pytest.raises(rlds.DatasetSpecError) as error:
    rlds.merge([str(tmp_path / 'cartpole'), str(tmp_path / 'pendulum')],
               str(tmp_path / 'mixed'))
  message = str(error.value)
  assert 'float32[3]' in message and 'float32[4]' in message
  assert str(tmp_path / 'pendulum') in message and str(tmp_path / 'cartpole') in message
  assert not (tmp_path / 'mixed').exists()  # refused before anything was written


def test_a_dataset_with_no_episodes_is_refused_naming_it(tmp_path):
  env = short_cartpole(num_envs=1)
  rlds.RldsRecorder(str(tmp_path / 'empty'), env.time_step_spec(), env.action_spec()).close()
  with pytest.raises(rlds.DatasetError, match=f'{tmp_path / "empty"} holds no episodes'):
    rlds.read(str(tmp_path / 'empty'))

"""Tests for tfrl.actors: the collect Actor and the Evaluator on real CartPole envs."""
import glob
import os
import threading

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.policies import random_tf_policy
from tf_agents.trajectories import time_step as ts

from tfrl import actors
from tfrl import envs
from tfrl import replay

FIRST, LAST = int(ts.StepType.FIRST), int(ts.StepType.LAST)
NUM_ENVS = 8
NUM_STEPS = 50
N = 2


class StepRecorder:
  """A writer that keeps every batched step it is given."""

  def __init__(self):
    self.next_step_types = []
    self.rewards = []
    self.versions = []

  def write(self, time_step, policy_step, next_time_step, policy_version,
            policy_state=()):
    del time_step, policy_step, policy_state  # Unused.
    self.next_step_types.append(np.array(next_time_step.step_type))
    self.rewards.append(np.array(next_time_step.reward))
    self.versions.append(policy_version)

  def reset(self):
    pass

  def flush(self):
    pass

  def close(self):
    pass


class RecordingEnv:
  """A `BatchedEnv` proxy that keeps every TimeStep its `step` returns."""

  def __init__(self, env):
    self._env = env
    self.steps = []

  def __getattr__(self, name):
    return getattr(self._env, name)

  def step(self, action):
    time_step = self._env.step(action)
    self.steps.append(time_step)
    return time_step


def episode_returns(next_step_types, rewards):
  """Per env, the returns of the episodes that ended, in order (reference counting)."""
  num_envs = next_step_types[0].shape[0]
  returns = [[] for _ in range(num_envs)]
  running = np.zeros(num_envs)
  for step_type, reward in zip(next_step_types, rewards):
    for env in range(num_envs):
      if step_type[env] == FIRST:
        continue  # The autoreset step: no experience, no reward.
      running[env] += reward[env]
      if step_type[env] == LAST:
        returns[env].append(running[env])
        running[env] = 0.0
  return returns


def summary_tags(directory):
  """The tags of every summary in the event files under `directory`."""
  tags = set()
  for path in glob.glob(os.path.join(directory, 'events.out.tfevents.*')):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      tags.update(value.tag for value in event.summary.value)
  return tags


@pytest.fixture(autouse=True)
def seed_tensorflow():
  tf.random.set_seed(0)  # Random and epsilon-greedy policies draw from TF's RNG.


@pytest.fixture(scope='module')
def cartpole_specs():
  with envs.make('CartPole-v1', num_envs=1) as env:
    return env.time_step_spec(), env.action_spec()


@pytest.fixture(scope='module')
def dqn(cartpole_specs):
  time_step_spec, action_spec = cartpole_specs
  tf.random.set_seed(0)
  network = q_network.QNetwork(time_step_spec.observation, action_spec,
                               fc_layer_params=(16,))
  agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=network,
                             optimizer=tf.keras.optimizers.Adam(1e-3),
                             epsilon_greedy=0.1)
  agent.initialize()
  return agent


def make_policy(kind, cartpole_specs, dqn):
  if kind == 'random':
    return random_tf_policy.RandomTFPolicy(*cartpole_specs)
  return dqn.collect_policy


@pytest.mark.parametrize('policy_kind', ['random', 'dqn_collect'])
def test_actor_writes_items_and_counts_real_steps(policy_kind, cartpole_specs, dqn,
                                                  reverb_server_factory, tmp_path):
  policy = make_policy(policy_kind, cartpole_specs, dqn)
  signature = replay.NStepTransitionWriter.item_signature(policy.trajectory_spec, NUM_ENVS)
  server = reverb_server_factory([replay.queue_table('queue', 100, signature)])
  writer = replay.NStepTransitionWriter(server.client, 'queue', n=N, discount=0.99)
  recorder = StepRecorder()
  env = envs.make('CartPole-v1', num_envs=NUM_ENVS, seed=0)
  actor = actors.Actor(env, policy, writers=[writer, recorder], policy_version=3,
                       summary_dir=str(tmp_path), summary_interval=100)

  result = actor.run(NUM_STEPS)
  actor.flush()

  assert server.client.server_info()['queue'].current_size == NUM_STEPS - N + 1
  step_types = np.stack(recorder.next_step_types)  # [NUM_STEPS, NUM_ENVS]
  boundaries = int(np.count_nonzero(step_types == FIRST))
  assert boundaries > 0  # Random-ish CartPole episodes last ~10-30 steps.
  assert result['EnvironmentSteps'] == NUM_ENVS * NUM_STEPS - boundaries
  assert actor.env_steps == NUM_ENVS * NUM_STEPS - boundaries
  assert result['NumberOfEpisodes'] == np.count_nonzero(step_types == LAST)
  returns = episode_returns(recorder.next_step_types, recorder.rewards)
  assert result['AverageReturn'] == pytest.approx(np.mean(np.concatenate(returns)))
  # CartPole pays 1 per step: returns are lengths.
  assert result['AverageEpisodeLength'] == pytest.approx(result['AverageReturn'])
  assert np.isfinite(result['AverageReturn']) and result['AverageReturn'] > 1
  assert result['EnvStepsPerSecond'] > 0
  assert recorder.versions == [3] * NUM_STEPS
  sample = next(server.client.sample('queue', emit_timesteps=False,
                                     unpack_as_table_signature=True))
  np.testing.assert_array_equal(sample.data['policy_version'], [3] * NUM_ENVS)
  # 400 env steps passed the summary interval of 100 once.
  assert summary_tags(str(tmp_path)) == {
      'collect/AverageReturn', 'collect/AverageEpisodeLength', 'collect/EnvironmentSteps',
      'collect/NumberOfEpisodes', 'collect/EnvStepsPerSecond'}
  actor.close()
  env.close()


def test_actor_metrics_before_any_episode_ends(cartpole_specs):
  with envs.make('CartPole-v1', num_envs=2, seed=0) as env:
    actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(*cartpole_specs))
    result = actor.run(3)  # CartPole cannot fall within 3 steps.

  assert result['EnvironmentSteps'] == 6
  assert result['NumberOfEpisodes'] == 0
  assert np.isnan(result['AverageReturn'])
  assert np.isnan(result['AverageEpisodeLength'])


def test_actor_reset_drops_the_returns_of_abandoned_episodes(cartpole_specs):
  with envs.make('CartPole-v1', num_envs=1, seed=0) as env:
    recorder = StepRecorder()
    actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(*cartpole_specs),
                         writers=[recorder])
    actor.run(3)  # Mid-episode: CartPole cannot fall within 3 steps.
    assert actor.stats.episodes == 0
    actor.reset()  # E.g. a reconnect: the episode in progress is abandoned.
    recorder.next_step_types.clear()
    recorder.rewards.clear()
    while actor.stats.episodes == 0:
      actor.run(1)

  # The reported episode is the one started by the reset: its return and length count
  # only the steps after it (CartPole pays 1 per step).
  [[expected]] = episode_returns(recorder.next_step_types, recorder.rewards)
  assert actor.metrics()['NumberOfEpisodes'] == 1
  assert actor.metrics()['AverageReturn'] == expected
  assert actor.metrics()['AverageEpisodeLength'] == expected
  assert actor.metrics()['EnvironmentSteps'] == 3 + expected  # Steps taken still count.


def test_actor_continues_the_stream_across_runs(reverb_server_factory):
  env = envs.make('CartPole-v1', num_envs=2, seed=1)
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  signature = replay.NStepTransitionWriter.item_signature(policy.trajectory_spec, 2)
  server = reverb_server_factory([replay.queue_table('queue', 100, signature)])
  writer = replay.NStepTransitionWriter(server.client, 'queue', n=3)
  version = tf.Variable(0, dtype=tf.int64)
  actor = actors.Actor(env, policy, writers=[writer], policy_version=version)

  actor.run(5)
  version.assign(7)
  actor.run(5)
  actor.close()

  # No restart between runs: 10 steps make 10 - 3 + 1 items, the last ones tagged 7.
  samples = list(server.client.sample('queue', num_samples=8, emit_timesteps=False,
                                      unpack_as_table_signature=True))
  versions = [int(s.data['policy_version'][0]) for s in samples]
  assert versions == [0] * 5 + [7] * 3
  env.close()


def test_evaluator_runs_exactly_k_episodes_split_by_quota(cartpole_specs):
  env = RecordingEnv(envs.make('CartPole-v1', num_envs=2, seed=0))
  policy = random_tf_policy.RandomTFPolicy(*cartpole_specs)
  evaluator = actors.Evaluator(env, policy, num_episodes=5, seed=3)

  result = evaluator.run()

  assert result['NumberOfEpisodes'] == 5
  assert len(result['returns']) == 5
  # Env 0 owes 3 episodes and env 1 owes 2, whichever finishes first.
  per_env = episode_returns([s.step_type for s in env.steps], [s.reward for s in env.steps])
  assert len(per_env[0]) >= 3 and len(per_env[1]) >= 2
  assert sorted(result['returns']) == sorted(per_env[0][:3] + per_env[1][:2])
  assert result['AverageReturn'] == pytest.approx(np.mean(result['returns']))
  assert result['AverageEpisodeLength'] == pytest.approx(result['AverageReturn'])
  env.close()


def test_evaluator_with_seed_is_reproducible(dqn):
  # Differently seeded envs: only the evaluator's own seed can make the runs agree.
  results = []
  for env_seed in (1, 2):
    with envs.make('CartPole-v1', num_envs=2, seed=env_seed) as env:
      results.append(actors.Evaluator(env, dqn.policy, num_episodes=4, seed=11).run())

  assert results[0]['returns'] == results[1]['returns']
  assert len(results[0]['returns']) == 4


def test_evaluator_gives_up_after_max_steps(cartpole_specs):
  with envs.make('CartPole-v1', num_envs=2, seed=0) as env:
    evaluator = actors.Evaluator(env, random_tf_policy.RandomTFPolicy(*cartpole_specs),
                                 num_episodes=2, max_steps=3)
    with pytest.raises(RuntimeError, match='2 episodes within 3 vector steps'):
      evaluator.run()


def test_an_evaluation_under_way_stops_when_its_stop_event_is_set(cartpole_specs):
  """A program told to stop mid-evaluation gives up at the next step instead of playing
  its episodes out (here a million: hours of them)."""
  stop = threading.Event()
  with envs.make('CartPole-v1', num_envs=2, seed=0) as env:
    evaluator = actors.Evaluator(env, random_tf_policy.RandomTFPolicy(*cartpole_specs),
                                 num_episodes=10**6, stop_event=stop)
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    try:
      with pytest.raises(actors.EvaluationStopped,
                         match=r'Evaluation stopped after [1-9]\d* of 1000000 episodes'):
        evaluator.run()
    finally:
      timer.cancel()


class StoppingWriter(StepRecorder):
  """A writer that sets a stop event at its n-th write (a SIGTERM mid-unroll)."""

  def __init__(self, stop_at, stop_event):
    super().__init__()
    self.stop_at, self.stop_event = stop_at, stop_event

  def write(self, *args, **kwargs):
    super().write(*args, **kwargs)
    if len(self.rewards) == self.stop_at:
      self.stop_event.set()


def test_a_run_under_way_returns_soon_after_its_stop_event_is_set(cartpole_specs):
  """A stopping collector does not play out its unroll (on a slow env, longer than its
  stop grace): `run` returns after the vector step under way, every step taken written
  and counted."""
  stop = threading.Event()
  writer = StoppingWriter(stop_at=5, stop_event=stop)
  with envs.make('CartPole-v1', num_envs=NUM_ENVS, seed=0) as env:
    actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(*cartpole_specs), [writer],
                         stop_event=stop)
    actor.run(1000)
  # The 5th write happens while the env takes the 6th step, which is then written too.
  assert len(writer.rewards) == 6
  assert actor.env_steps == 6 * NUM_ENVS


class FailingWriter(StepRecorder):
  """A writer whose server went away at its n-th write."""

  def __init__(self, fail_at):
    super().__init__()
    self.fail_at = fail_at

  def write(self, *args, **kwargs):
    if len(self.rewards) == self.fail_at:
      raise ConnectionError('server gone')
    super().write(*args, **kwargs)


@pytest.mark.parametrize('num_workers', [0, 1])
def test_a_writer_error_leaves_the_env_ready_to_reset(num_workers):
  """A collector that lost its server resets and goes on: the env step under way when
  the writer raised completes, and the env resets."""
  env = envs.make('CartPole-v1', num_envs=NUM_ENVS, seed=0, num_workers=num_workers)
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  writer = FailingWriter(fail_at=5)
  actor = actors.Actor(env, policy, [writer])
  try:
    with pytest.raises(ConnectionError, match='server gone'):
      actor.run(20)
    writer.fail_at = -1
    actor.reset()
    actor.run(10)
    assert len(writer.rewards) == 5 + 10
  finally:
    env.close()

"""Tests for tfrl.learner.Learner and tfrl.distribute on fixed in-memory and Reverb data."""
import collections
import glob
import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from tfrl import actors
from tfrl import distribute
from tfrl import envs
from tfrl import learner_input
from tfrl import replay
from tfrl import triggers
from tfrl.agents import dqn as dqn_lib
from tfrl.learner import Learner

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBS_DIM, NUM_ACTIONS, BATCH = 3, 2, 8
MIRRORED_STEPS = 5
FIRST, MID, LAST = (int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST))

# Runs in a fresh interpreter: the CPU must be split before TensorFlow creates devices.
# Trains the same DQN from the same weights on the same rows, once under the default
# strategy (batches of BATCH) and once under MirroredStrategy over 2 logical CPUs (each
# replica gets batches of BATCH / 2; a worker's consecutive elements go to its replicas
# in turn, so the two replicas of a step together hold the default run's batch).
_MIRRORED_SCRIPT = textwrap.dedent('''
    import json, tempfile
    import numpy as np
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import tensorflow as tf
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.networks import q_network
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import time_step as ts
    from tf_agents.trajectories import trajectory
    from tfrl.learner import Learner

    B, STEPS, OBS, ACTIONS = {batch}, {steps}, 3, 2
    rows = 2 * STEPS * B
    rng = np.random.RandomState(0)
    step_type = np.stack([np.where(rng.rand(rows) < 0.2, 0, 1),
                          np.where(rng.rand(rows) < 0.3, 2, 1)], 1).astype(np.int32)
    data = trajectory.Trajectory(
        step_type=step_type, observation=rng.randn(rows, 2, OBS).astype(np.float32),
        action=rng.randint(0, ACTIONS, (rows, 2)).astype(np.int64), policy_info=(),
        next_step_type=np.roll(step_type, -1, axis=1),
        reward=rng.randn(rows, 2).astype(np.float32),
        discount=np.ones((rows, 2), np.float32))
    time_step_spec = ts.time_step_spec(tensor_spec.TensorSpec([OBS], tf.float32))
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, ACTIONS - 1)

    def train(strategy):
      with strategy.scope():
        train_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        net = q_network.QNetwork(time_step_spec.observation, action_spec,
                                 fc_layer_params=(8,))
        agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=net,
                                   optimizer=tf.keras.optimizers.SGD(0.1),
                                   target_update_period=2, train_step_counter=train_step)
        agent.initialize()
        init = np.random.RandomState(1)
        for v in net.variables:
          v.assign(0.5 * init.randn(*v.shape).astype(np.float32))
        for target, v in zip(agent._target_q_network.variables, net.variables):
          target.assign(v)
      initial = [v.numpy().tolist() for v in net.variables]
      per_replica_sizes = []

      def dataset_fn(context):
        per_replica = context.get_per_replica_batch_size(B)
        per_replica_sizes.append(per_replica)
        dataset = tf.data.Dataset.from_tensor_slices(data)
        return dataset.batch(per_replica, drop_remainder=True).map(lambda e: (e, ()))

      learner = Learner(tempfile.mkdtemp(), train_step, agent,
                        experience_dataset_fn=dataset_fn, strategy=strategy,
                        checkpoint_interval=0)
      infos = [learner.run() for _ in range(STEPS)]
      infos.append(learner.run(iterations=STEPS))
      losses = [float(info.loss) for info in infos]
      # float() needs a scalar: the per-example td_error must be summed over replicas
      # and its batch axis.
      td_errors = [float(info.extra.td_error) for info in infos]
      return {{'replicas': strategy.num_replicas_in_sync,
              'per_replica_sizes': per_replica_sizes,
              'losses': losses, 'td_errors': td_errors,
              'train_step': learner.train_step_numpy,
              'initial': initial,
              'variables': [v.numpy().tolist() for v in
                            net.variables + agent._target_q_network.variables]}}

    result = {{'devices': devices,
              'default': train(distribute.get_strategy('default')),
              'mirrored': train(distribute.get_strategy('mirrored', devices=devices))}}
    print('RESULT ' + json.dumps(result))
''')


def specs():
  time_step_spec = ts.time_step_spec(tensor_spec.TensorSpec([OBS_DIM], tf.float32))
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, NUM_ACTIONS - 1)
  return time_step_spec, action_spec


def fixed_rows(num_rows, seed=0):
  """`num_rows` 2-step DQN transitions as a numpy Trajectory of shape [num_rows, 2]."""
  rng = np.random.RandomState(seed)
  step_type = np.stack([np.where(rng.rand(num_rows) < 0.2, FIRST, MID),
                        np.where(rng.rand(num_rows) < 0.3, LAST, MID)], 1).astype(np.int32)
  return trajectory.Trajectory(
      step_type=step_type,
      observation=rng.randn(num_rows, 2, OBS_DIM).astype(np.float32),
      action=rng.randint(0, NUM_ACTIONS, (num_rows, 2)).astype(np.int64),
      policy_info=(),
      next_step_type=np.roll(step_type, -1, axis=1),
      reward=rng.randn(num_rows, 2).astype(np.float32),
      discount=np.ones((num_rows, 2), np.float32))


def batch(rows, index):
  """The `index`-th batch of BATCH consecutive rows, as tensors."""
  return tf.nest.map_structure(
      lambda x: tf.constant(x[index * BATCH:(index + 1) * BATCH]), rows)


def make_agent(optimizer='sgd', weights_seed=1):
  """A DqnAgent with fc(8) whose Q and target networks start from fixed weights."""
  train_step = tf.Variable(0, dtype=tf.int64, trainable=False)
  time_step_spec, action_spec = specs()
  network = q_network.QNetwork(time_step_spec.observation, action_spec,
                               fc_layer_params=(8,))
  opt = (tf.keras.optimizers.SGD(0.1) if optimizer == 'sgd'
         else tf.keras.optimizers.Adam(0.01))
  agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=network,
                             optimizer=opt, target_update_period=2,
                             train_step_counter=train_step)
  agent.initialize()
  rng = np.random.RandomState(weights_seed)
  for v in network.variables:
    v.assign(0.5 * rng.randn(*v.shape).astype(np.float32))
  for target, v in zip(agent._target_q_network.variables, network.variables):
    target.assign(v)
  return agent, train_step


def agent_variables(agent):
  return [v.numpy() for v in agent._q_network.variables +
          agent._target_q_network.variables]


def rows_dataset_fn(rows, pairs=True):
  """Dataset fn over `rows` in batches of the per-replica batch size."""

  def dataset_fn(context):
    dataset = tf.data.Dataset.from_tensor_slices(rows).batch(
        context.get_per_replica_batch_size(BATCH), drop_remainder=True)
    return dataset.map(lambda e: (e, ())) if pairs else dataset

  return dataset_fn


def assert_all_close(actual, expected, rtol=1e-5, atol=1e-6):
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


@pytest.fixture(autouse=True)
def seed_tensorflow():
  tf.random.set_seed(0)


@pytest.fixture(scope='module', autouse=True)
def mirrored_run(request):
  """The subprocess of the mirrored-vs-default comparison, started with the module.

  It runs while the other tests of this module do (its test comes last) and only when
  that test was selected.
  """
  selected = any(item.name == 'test_mirrored_strategy_on_two_cpus_matches_default_strategy'
                 for item in request.session.items)
  if not selected:
    yield None
    return
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
  process = subprocess.Popen(
      [sys.executable, '-c', _MIRRORED_SCRIPT.format(batch=BATCH, steps=MIRRORED_STEPS)],
      cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  yield process
  if process.poll() is None:
    process.kill()
    process.communicate()


# Distribution.


def test_get_strategy_rejects_unknown_kind_naming_the_choices():
  with pytest.raises(ValueError, match='nope') as error:
    distribute.get_strategy('nope')
  for kind in distribute.STRATEGIES:
    assert kind in str(error.value)


def test_get_strategy_tpu_needs_an_address():
  with pytest.raises(ValueError, match='TPU address'):
    distribute.get_strategy('tpu')


def test_get_strategy_default_is_the_current_strategy():
  assert distribute.get_strategy('default') is tf.distribute.get_strategy()


# Training loop.


def test_run_trains_like_agent_train_and_calls_triggers_with_the_step(tmp_path):
  rows = fixed_rows(8 * BATCH)
  agent, train_step = make_agent()
  reference, _ = make_agent()
  seen_steps = []
  calls = tf.Variable(0, dtype=tf.int64)
  rows_seen = tf.Variable(0, dtype=tf.int64)

  def after_step(sample, loss_info):
    experience, _ = sample
    del loss_info  # Unused.
    calls.assign_add(1)
    rows_seen.assign_add(tf.shape(experience.step_type, out_type=tf.int64)[0])

  learner = Learner(str(tmp_path), train_step, agent,
                    experience_dataset_fn=rows_dataset_fn(rows),
                    after_train_strategy_step_fn=after_step,
                    triggers=[seen_steps.append], checkpoint_interval=0)

  loss_info = learner.run(iterations=3)
  assert learner.train_step_numpy == 3
  assert seen_steps == [3]
  loss_info_2 = learner.run(iterations=4)
  assert learner.train_step_numpy == 7
  assert seen_steps == [3, 7]
  assert int(calls.numpy()) == 7  # The after-step fn ran once per train step ...
  assert int(rows_seen.numpy()) == 7 * BATCH  # ... on every sample.

  # The same 7 batches fed to agent.train directly, in order.
  train = tf.function(reference.train, autograph=False)
  expected = [train(batch(rows, i)) for i in range(7)]
  assert isinstance(loss_info, tf_agent.LossInfo)
  np.testing.assert_allclose(loss_info.loss, expected[2].loss, rtol=1e-5)
  np.testing.assert_allclose(loss_info_2.loss, expected[6].loss, rtol=1e-5)
  # As in tf-agents, loss info of rank >= 1 is summed over all its axes: DQN's
  # per-example TD errors come back as their total.
  assert loss_info_2.extra.td_error.shape == ()
  np.testing.assert_allclose(loss_info_2.extra.td_error,
                             np.sum(expected[6].extra.td_error), rtol=1e-5)
  assert_all_close(agent_variables(agent), agent_variables(reference))


def summary_steps(directory):
  """tag -> sorted steps of the scalar summaries in the event files under `directory`."""
  steps = {}
  for path in glob.glob(os.path.join(directory, 'events.out.tfevents.*')):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        steps.setdefault(value.tag, []).append(event.step)
  return {tag: sorted(s) for tag, s in steps.items()}


@pytest.mark.parametrize('summary_interval, expected_steps, rate_steps',
                         [(2, [0, 2, 4], [2, 5]), (0, [], [])])
def test_summaries_follow_summary_interval_and_include_triggers(summary_interval,
                                                                 expected_steps, rate_steps,
                                                                 tmp_path):
  rows = fixed_rows(6 * BATCH)
  agent, train_step = make_agent()
  steps_per_sec = triggers.StepsPerSecondLogTrigger(train_step, interval=2,
                                                    log_to_terminal=False)
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0,
                    experience_dataset_fn=rows_dataset_fn(rows),
                    summary_interval=summary_interval, triggers=[steps_per_sec])

  learner.run(iterations=2)
  learner.run(iterations=3)
  learner.train_summary_writer.flush()

  steps = summary_steps(os.path.join(str(tmp_path), 'train'))
  # The agent's loss summaries carry the step they trained at (0..4): every 2nd one.
  assert steps.get('Losses/total_loss', []) == expected_steps
  # Triggers run inside the Learner's summary context: steps/sec lands there too, each
  # time the trigger fires (after each run() that crossed its interval: steps 2 and 5),
  # whether or not summary_interval records that step; with summaries off, nowhere.
  assert np.isfinite(steps_per_sec.last_rate)
  assert steps.get('train_steps_per_sec', []) == rate_steps


def test_compile_builds_without_training_or_sampling(tmp_path):
  rows = fixed_rows(6 * BATCH)
  agent, train_step = make_agent()
  reference, _ = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0,
                    experience_dataset_fn=rows_dataset_fn(rows), summary_interval=2)
  before = agent_variables(agent)

  learner.compile()
  assert learner.train_step_numpy == 0
  assert_all_close(agent_variables(agent), before, rtol=0, atol=0)

  # The first run trains on the dataset's first batches (compile took none), with
  # summaries on (compile traced with run's summary condition, not a constant).
  loss_info = learner.run(iterations=3)
  learner.train_summary_writer.flush()
  train = tf.function(reference.train, autograph=False)
  expected = [train(batch(rows, i)) for i in range(3)]
  np.testing.assert_allclose(loss_info.loss, expected[2].loss, rtol=1e-5)
  assert_all_close(agent_variables(agent), agent_variables(reference))
  steps = summary_steps(os.path.join(str(tmp_path), 'train'))
  assert steps.get('Losses/total_loss', []) == [0, 2]


def test_run_with_explicit_iterator_and_without_any_raises(tmp_path):
  rows = fixed_rows(2 * BATCH)
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0)

  with pytest.raises(ValueError, match='needs an iterator'):
    learner.run()
  with pytest.raises(ValueError, match='iterations must be >= 1'):
    learner.run(iterations=0)
  assert learner.train_step_numpy == 0

  iterator = iter(tf.data.Dataset.from_tensor_slices(rows).batch(BATCH).map(
      lambda e: (e, ())))
  learner.run(iterations=2, iterator=iterator)
  assert learner.train_step_numpy == 2


@pytest.mark.parametrize('make_train_step', [
    lambda: tf.Variable(0, dtype=tf.int32),
    lambda: np.int64(0),
    lambda: tf.constant(0, dtype=tf.int64),
], ids=['int32_variable', 'numpy_int', 'int64_tensor'])
def test_train_step_must_be_an_int64_variable(make_train_step, tmp_path):
  agent, _ = make_agent()
  with pytest.raises(ValueError, match='int64 tf.Variable'):
    Learner(str(tmp_path), make_train_step(), agent)


def test_a_learner_turns_off_the_dependency_optimizer_before_it_compiles(tmp_path):
  """With Grappler's dependency optimizer on, train steps that read and then update
  the same variables repeated inexactly (tfrl/graph_options.py)."""
  tf.config.optimizer.set_experimental_options({'dependency_optimization': True})
  agent, train_step = make_agent()
  Learner(str(tmp_path), train_step, agent, checkpoint_interval=0)
  assert tf.config.optimizer.get_experimental_options()['dependency_optimization'] is False


def test_loss_changes_neither_variables_nor_train_step(tmp_path):
  rows = fixed_rows(4 * BATCH)
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent,
                    experience_dataset_fn=rows_dataset_fn(rows, pairs=False),
                    direct_sampling=True, checkpoint_interval=0)
  before = agent_variables(agent)

  next_loss = learner.loss()  # The dataset's first batch.
  given_loss = learner.loss(batch(rows, 3))

  np.testing.assert_allclose(next_loss.loss, agent.loss(batch(rows, 0)).loss, rtol=1e-6)
  np.testing.assert_allclose(given_loss.loss, agent.loss(batch(rows, 3)).loss, rtol=1e-6)
  # Rank-1 loss info is reduced over its axis too, with the given reduce_op.
  td_error = agent.loss(batch(rows, 3)).extra.td_error.numpy()
  np.testing.assert_allclose(given_loss.extra.td_error, td_error.sum(), rtol=1e-5)
  mean_loss = learner.loss(batch(rows, 3), reduce_op=tf.distribute.ReduceOp.MEAN)
  np.testing.assert_allclose(mean_loss.extra.td_error, td_error.mean(), rtol=1e-5)
  assert next_loss.loss > 0
  assert learner.train_step_numpy == 0
  assert_all_close(agent_variables(agent), before, rtol=0, atol=0)


def test_kwargs_in_agent_train_passes_weights(tmp_path):
  rows = fixed_rows(2 * BATCH)
  weights = np.concatenate([np.zeros(BATCH), np.full(BATCH, 2.0)]).astype(np.float32)

  def dataset_fn():
    dataset = tf.data.Dataset.from_tensor_slices({'experience': rows, 'weights': weights})
    return dataset.batch(BATCH, drop_remainder=True)

  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, experience_dataset_fn=dataset_fn,
                    use_kwargs_in_agent_train=True, direct_sampling=True,
                    checkpoint_interval=0)
  before = agent_variables(agent)

  zero_weight = learner.run()  # Weights 0: no loss, no gradient, no change.
  assert float(zero_weight.loss) == 0.0
  assert learner.train_step_numpy == 1
  assert_all_close(agent_variables(agent), before, rtol=0, atol=0)

  unweighted = agent.loss(batch(rows, 1)).loss
  double_weight = learner.run()
  np.testing.assert_allclose(double_weight.loss, 2 * unweighted, rtol=1e-5)
  assert not np.allclose(agent_variables(agent)[0], before[0])


def test_train_inputs_fn_maps_experience_and_info_to_train_kwargs(tmp_path):
  """The layouts' path: the dataset yields (experience, info); `train_inputs_fn` makes
  `agent.train`'s kwargs from both (here the weights come from info), in `run` and in
  `loss`."""
  rows = fixed_rows(2 * BATCH)
  weights = np.concatenate([np.zeros(BATCH), np.full(BATCH, 2.0)]).astype(np.float32)
  calls = []

  def dataset_fn():
    dataset = tf.data.Dataset.from_tensor_slices((rows, {'w': weights}))
    return dataset.batch(BATCH, drop_remainder=True)

  def train_inputs(experience, info):
    calls.append(sorted(info))
    return {'experience': experience, 'weights': info['w']}

  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, experience_dataset_fn=dataset_fn,
                    train_inputs_fn=train_inputs, checkpoint_interval=0)
  before = agent_variables(agent)
  assert float(learner.run().loss) == 0.0  # weights 0
  assert_all_close(agent_variables(agent), before, rtol=0, atol=0)
  unweighted = agent.loss(batch(rows, 1)).loss
  sample = (batch(rows, 1), {'w': tf.constant(weights[BATCH:])})
  np.testing.assert_allclose(learner.loss(sample).loss, 2 * unweighted, rtol=1e-5)
  np.testing.assert_allclose(learner.run().loss, 2 * unweighted, rtol=1e-5)
  assert calls and all(keys == ['w'] for keys in calls)  # called while tracing


def test_initializes_the_agent_before_creating_optimizer_variables(tmp_path):
  agent, train_step = make_agent('adam')
  # Targets that differ from the online network: agent.initialize() copies it over.
  for target in agent._target_q_network.variables:
    target.assign_add(tf.ones_like(target))
  optimizer_variables_at_initialize = []
  initialize = agent.initialize

  def spy_initialize():
    optimizer_variables_at_initialize.append(len(agent._optimizer.variables()))
    return initialize()

  agent.initialize = spy_initialize
  Learner(str(tmp_path), train_step, agent, checkpoint_interval=0,
          experience_dataset_fn=rows_dataset_fn(fixed_rows(BATCH)))

  assert len(optimizer_variables_at_initialize) == 1
  # Before the optimizer's slots were created (they exist once the Learner is built).
  assert optimizer_variables_at_initialize[0] < len(agent._optimizer.variables())
  assert_all_close([v.numpy() for v in agent._target_q_network.variables],
                   [v.numpy() for v in agent._q_network.variables], rtol=0, atol=0)


def test_dataset_end_then_reset_iterator_continues_with_the_same_function(tmp_path):
  rows = fixed_rows(5 * BATCH)  # 5 batches, then the dataset ends.
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0,
                    experience_dataset_fn=rows_dataset_fn(rows))
  learner.run(iterations=3)
  traces = learner._compiled_train.experimental_get_tracing_count()

  with pytest.raises(tf.errors.OutOfRangeError):
    learner.run(iterations=3)
  assert learner.train_step_numpy == 5  # The 2 steps that had data count, no more.
  with pytest.raises(tf.errors.OutOfRangeError):  # Still at its end.
    learner.run()
  assert learner.train_step_numpy == 5

  learner.reset_iterator()
  learner.run(iterations=2)
  assert learner.train_step_numpy == 7
  # The new iterator has the same spec: the compiled train function was reused.
  assert learner._compiled_train.experimental_get_tracing_count() == traces


def _autotune_choice(dataset_fn):
  """`dataset_fn` returning its dataset with `options.autotune.enabled = choice`."""

  def with_choice(context, choice):
    dataset = dataset_fn(context)
    if choice is None:
      return dataset
    options = tf.data.Options()
    options.autotune.enabled = choice
    return dataset.with_options(options)

  return with_choice


@pytest.mark.parametrize('choice, expected', [(None, False), (True, True), (False, False)])
def test_learner_datasets_run_without_the_autotune_thread_unless_they_ask(
    choice, expected, monkeypatch, tmp_path):
  # tf.data's autotuning thread can hold an iterator's destructor for up to a minute
  # (tfrl/learner_input.py): the datasets a Learner iterates turn it off, unless
  # their author set autotuning either way.
  iterated = []
  real = learner_input.without_autotune_thread

  def spy(dataset):
    iterated.append(real(dataset))
    return iterated[-1]

  monkeypatch.setattr(learner_input, 'without_autotune_thread', spy)
  rows = fixed_rows(4 * BATCH)
  with_choice = _autotune_choice(rows_dataset_fn(rows))
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0,
                    experience_dataset_fn=lambda context: with_choice(context, choice))
  learner.run(iterations=2)
  other = learner.make_iterator(lambda context: with_choice(context, choice))
  learner.run(iterations=2, iterator=other)
  assert learner.train_step_numpy == 4
  assert len(iterated) == 2  # the Learner's own dataset, then make_iterator's
  assert [d.options().autotune.enabled for d in iterated] == [expected] * 2


def test_without_autotune_thread_keeps_the_elements():
  dataset = tf.data.Dataset.range(10).map(lambda x: 2 * x,
                                          num_parallel_calls=tf.data.AUTOTUNE)
  plain = learner_input.without_autotune_thread(dataset.prefetch(tf.data.AUTOTUNE))
  assert plain.options().autotune.enabled is False
  assert list(plain.as_numpy_iterator()) == list(range(0, 20, 2))


def test_reset_iterator_without_dataset_fn_raises(tmp_path):
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0)
  with pytest.raises(ValueError, match='experience_dataset_fn'):
    learner.reset_iterator()


def test_directory_constants_match_tf_agents_learner():
  from tf_agents.train import learner as tf_agents_learner  # pylint: disable=g-import-not-at-top
  from tfrl import learner as learner_lib  # pylint: disable=g-import-not-at-top
  names = ['TRAIN_DIR', 'POLICY_SAVED_MODEL_DIR', 'COLLECT_POLICY_SAVED_MODEL_DIR',
           'GREEDY_POLICY_SAVED_MODEL_DIR', 'RAW_POLICY_SAVED_MODEL_DIR',
           'POLICY_CHECKPOINT_DIR', 'REPLAY_BUFFER_CHECKPOINT_DIR']
  for name in names:
    assert getattr(learner_lib, name) == getattr(tf_agents_learner, name), name


@pytest.mark.parametrize('summary_interval', [0, -1, None])
def test_summary_interval_off_writes_no_events_file(summary_interval, tmp_path):
  rows = fixed_rows(4 * BATCH)
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=2,
                    experience_dataset_fn=rows_dataset_fn(rows),
                    summary_interval=summary_interval)
  learner.compile()
  learner.run(iterations=2)
  learner.run(iterations=2)
  learner.train_summary_writer.flush()

  assert os.listdir(str(tmp_path / 'train')) == ['checkpoints']
  assert not glob.glob(str(tmp_path / '**' / 'events.out.tfevents.*'), recursive=True)


# Checkpoints.


def test_restart_restores_train_step_variables_and_optimizer_state(tmp_path):
  rows = fixed_rows(BATCH)
  # One fixed batch, repeated: after a restart both learners see the same next batch.
  dataset_fn = lambda: tf.data.Dataset.from_tensor_slices(rows).batch(BATCH).repeat().map(
      lambda e: (e, ()))
  agent, train_step = make_agent('adam')
  learner = Learner(str(tmp_path), train_step, agent, experience_dataset_fn=dataset_fn,
                    checkpoint_interval=5)
  learner.run(iterations=2)
  assert not tf.io.gfile.glob(os.path.join(learner.checkpoint_dir, 'ckpt-*'))
  learner.run(iterations=3)  # Step 5: the interval trigger writes ckpt-5.
  assert os.path.exists(os.path.join(learner.checkpoint_dir, 'ckpt-5.index'))
  optimizer_state = [v.numpy() for v in agent._optimizer.variables()]
  assert len(optimizer_state) > 1 and any(np.any(s != 0) for s in optimizer_state[1:])

  # A new job on the same root_dir, starting from other weights.
  agent_2, train_step_2 = make_agent('adam', weights_seed=2)
  assert not np.allclose(agent_variables(agent_2)[0], agent_variables(agent)[0])
  learner_2 = Learner(str(tmp_path), train_step_2, agent_2, experience_dataset_fn=dataset_fn,
                      checkpoint_interval=5)

  assert learner_2.train_step_numpy == 5
  assert_all_close(agent_variables(agent_2), agent_variables(agent), rtol=0, atol=0)
  assert_all_close([v.numpy() for v in agent_2._optimizer.variables()], optimizer_state,
                   rtol=0, atol=0)
  # Same state, same batch: the resumed job continues exactly where the first one was.
  np.testing.assert_allclose(learner_2.run().loss, learner.run().loss, rtol=1e-6)
  assert_all_close(agent_variables(agent_2), agent_variables(agent))


def test_checkpoint_extras_are_saved_and_restored_and_may_be_missing(tmp_path):
  rows = fixed_rows(BATCH)
  dataset_fn = lambda: tf.data.Dataset.from_tensor_slices(rows).batch(BATCH).repeat().map(
      lambda e: (e, ()))
  # A checkpoint from a program without extras: a learner with one restores the agent
  # and the step, and the extra keeps its value.
  agent, train_step = make_agent()
  Learner(str(tmp_path / 'old'), train_step, agent, experience_dataset_fn=dataset_fn,
          checkpoint_interval=2).run(iterations=2)
  counter = tf.Variable(7, dtype=tf.int64)
  agent_2, train_step_2 = make_agent(weights_seed=2)
  learner_2 = Learner(str(tmp_path / 'old'), train_step_2, agent_2,
                      experience_dataset_fn=dataset_fn, checkpoint_interval=2,
                      checkpoint_extras={'counter': counter})
  assert learner_2.train_step_numpy == 2 and int(counter.numpy()) == 7
  # Saved with it, it comes back with it.
  counter.assign(1234)
  learner_2.save_checkpoint()
  counter_3 = tf.Variable(0, dtype=tf.int64)
  agent_3, train_step_3 = make_agent(weights_seed=3)
  Learner(str(tmp_path / 'old'), train_step_3, agent_3, experience_dataset_fn=dataset_fn,
          checkpoint_extras={'counter': counter_3})
  assert int(counter_3.numpy()) == 1234 and int(train_step_3.numpy()) == 2


def test_restored_learner_starts_user_interval_triggers_at_the_restored_step(tmp_path):
  rows = fixed_rows(BATCH)
  dataset_fn = lambda: tf.data.Dataset.from_tensor_slices(rows).batch(BATCH).repeat().map(
      lambda e: (e, ()))
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, experience_dataset_fn=dataset_fn,
                    checkpoint_interval=5)
  learner.run(iterations=5)  # Writes ckpt-5.

  calls = []
  user_trigger = triggers.IntervalTrigger(3, lambda: calls.append(True))
  agent_2, train_step_2 = make_agent()
  learner_2 = Learner(str(tmp_path), train_step_2, agent_2,
                      experience_dataset_fn=dataset_fn, checkpoint_interval=5,
                      triggers=[user_trigger])
  assert learner_2.train_step_numpy == 5

  learner_2.run(iterations=2)  # Step 7: 2 steps since the restore, fewer than 3.
  assert not calls
  learner_2.run()  # Step 8: 3 steps since the restore.
  assert len(calls) == 1
  # The Learner's own checkpoint trigger also counts from the restore: not at 7 or 8.
  assert not os.path.exists(os.path.join(learner_2.checkpoint_dir, 'ckpt-8.index'))
  learner_2.run(iterations=2)
  assert os.path.exists(os.path.join(learner_2.checkpoint_dir, 'ckpt-10.index'))


def test_save_checkpoint_writes_now_and_keeps_the_newest(tmp_path):
  rows = fixed_rows(BATCH)
  dataset_fn = lambda: tf.data.Dataset.from_tensor_slices(rows).batch(BATCH).repeat().map(
      lambda e: (e, ()))
  agent, train_step = make_agent()
  learner = Learner(str(tmp_path), train_step, agent, experience_dataset_fn=dataset_fn,
                    checkpoint_interval=2, max_checkpoints_to_keep=2)
  index_files = lambda: sorted(
      n for n in os.listdir(learner.checkpoint_dir) if n.endswith('.index'))
  learner.run(iterations=2)  # The interval trigger writes ckpt-2.
  learner.run()
  assert index_files() == ['ckpt-2.index']

  path = learner.save_checkpoint()
  learner.run()  # Step 4: the trigger's interval counts from its own last call (2).

  assert path.endswith('ckpt-3')
  assert index_files() == ['ckpt-3.index', 'ckpt-4.index']


@pytest.mark.parametrize('interval', [0, -1])
def test_checkpoint_interval_not_positive_warns_and_writes_nothing(interval, tmp_path,
                                                                   caplog):
  rows = fixed_rows(4 * BATCH)
  agent, train_step = make_agent()
  with caplog.at_level(logging.WARNING):
    learner = Learner(str(tmp_path), train_step, agent,
                      experience_dataset_fn=rows_dataset_fn(rows),
                      checkpoint_interval=interval)
  assert f'checkpoint_interval={interval}' in caplog.text
  assert 'writes no checkpoints' in caplog.text

  learner.run(iterations=2)
  learner.run(iterations=2)

  checkpoint_dir = learner.checkpoint_dir
  assert not os.path.exists(checkpoint_dir) or not os.listdir(checkpoint_dir)


# Reverb.


ROWS_PER_ITEM = 4  # one item per vector step of the 4 envs


@pytest.fixture(scope='module')
def cartpole_replay(module_reverb_server_factory):
  """A prioritized table that tfrl's Actor filled from 4 CartPole envs (2-step items)."""
  tf.random.set_seed(0)
  env = envs.make('CartPole-v1', num_envs=4, seed=0)
  train_step = tf.Variable(0, dtype=tf.int64, trainable=False)
  agent = dqn_lib.create_dqn_agent(env.time_step_spec(), env.action_spec(), train_step,
                                   fc_layer_params=(16,), target_update_period=5)
  signature = replay.NStepTransitionWriter.item_signature(agent.collect_data_spec,
                                                         ROWS_PER_ITEM)
  server = module_reverb_server_factory(
      [replay.prioritized_table('replay', max_size=1000, signature=signature)])
  writer = replay.NStepTransitionWriter(server.client, 'replay', n=2, discount=0.99)
  actor = actors.Actor(env, agent.collect_policy, writers=[writer],
                       policy_version=train_step)
  actor.run(50)  # 200 env steps.
  actor.close()
  env.close()
  assert server.client.server_info()['replay'].current_size == 49
  return server, signature, agent, train_step


def sample_priorities(client, table, num_samples, until_seen=()):
  """key -> priority of the items that draws from `table` hit.

  Draws `num_samples` items, and more (up to 10 times as many) until every key in
  `until_seen` was drawn.
  """
  priorities = {}
  for _ in range(10):
    for sample in client.sample(table, num_samples=num_samples, emit_timesteps=False):
      priorities[int(sample.info.key)] = float(sample.info.priority)
    if set(until_seen) <= set(priorities):
      break
  return priorities


def test_dqn_trains_from_actor_filled_reverb_table(cartpole_replay, tmp_path):
  server, signature, agent, train_step = cartpole_replay
  before = [v.numpy() for v in agent._q_network.variables]
  start = int(train_step.numpy())
  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0,
                    experience_dataset_fn=lambda: replay.make_dataset(
                        server.address, 'replay', signature, batch_size=16,
                        rows_per_item=ROWS_PER_ITEM, time_major=False,
                        experience_spec=agent.collect_data_spec))

  loss_info = learner.run(iterations=5)

  assert learner.train_step_numpy == start + 5
  assert np.isfinite(loss_info.loss) and float(loss_info.loss) > 0
  assert not np.allclose(agent._q_network.variables[0].numpy(), before[0])


def test_after_step_fn_writes_priorities_back_to_the_table(cartpole_replay, tmp_path):
  server, signature, agent, train_step = cartpole_replay
  assert set(sample_priorities(server.client, 'replay', 100).values()) == {1.0}
  updater = replay.PriorityUpdater(server.address, 'replay')
  calls = tf.Variable(0, dtype=tf.int64)
  last_keys = tf.Variable(tf.zeros([16], tf.int64))
  last_priorities = tf.Variable(tf.zeros([16], tf.float64))

  def update_priorities(sample, loss_info):
    _, info = sample
    priorities = tf.cast(tf.abs(loss_info.extra.td_error), tf.float64) + 0.1
    updater(info['key'], priorities)
    calls.assign_add(1)
    last_keys.assign(tf.bitcast(info['key'], tf.int64))
    last_priorities.assign(priorities)

  learner = Learner(str(tmp_path), train_step, agent, checkpoint_interval=0,
                    after_train_strategy_step_fn=update_priorities,
                    experience_dataset_fn=lambda: replay.make_dataset(
                        server.address, 'replay', signature, batch_size=16,
                        rows_per_item=ROWS_PER_ITEM, time_major=False,
                        experience_spec=agent.collect_data_spec))

  learner.run(iterations=4)

  assert int(calls.numpy()) == 4
  keys = last_keys.numpy().view(np.uint64)
  unique_keys = set(int(k) for k in keys)
  priorities = sample_priorities(server.client, 'replay', 500, until_seen=unique_keys)
  assert any(p != 1.0 for p in priorities.values())
  # The last step's items got the largest |TD error| + 0.1 of their rows.
  for key in unique_keys:
    expected = last_priorities.numpy()[keys == np.uint64(key)].max()
    assert priorities[int(key)] == pytest.approx(expected, rel=1e-6)
    assert expected != 1.0


# Distribution on 2 logical CPUs (in the subprocess that `mirrored_run` started).


@pytest.mark.integration
def test_mirrored_strategy_on_two_cpus_matches_default_strategy(mirrored_run):
  stdout, stderr = mirrored_run.communicate(timeout=300)
  assert mirrored_run.returncode == 0, stderr[-5000:]
  result = json.loads(stdout.split('RESULT ', 1)[1])
  default, mirrored = result['default'], result['mirrored']

  assert result['devices'] == ['/cpu:0', '/cpu:1']
  assert (default['replicas'], mirrored['replicas']) == (1, 2)
  # The dataset function is called once per worker, with the per-replica batch size.
  assert default['per_replica_sizes'] == [BATCH]
  assert mirrored['per_replica_sizes'] == [BATCH // 2]
  assert default['train_step'] == mirrored['train_step'] == 2 * MIRRORED_STEPS
  # The mirrored loss is the SUM over replicas of loss / global batch: the same value.
  np.testing.assert_allclose(mirrored['losses'], default['losses'], rtol=1e-5, atol=1e-6)
  # Loss info of rank 1 (per-example TD errors) is summed over replicas and the batch
  # axis, as in tf-agents: both runs report the total over the global batch.
  np.testing.assert_allclose(mirrored['td_errors'], default['td_errors'], rtol=1e-4,
                             atol=1e-5)
  assert_all_close(mirrored['variables'], default['variables'])
  # Training moved the weights, so equal variables are not equal starting points.
  assert not np.allclose(default['variables'][0], default['initial'][0])


def test_summaries_inside_the_compiled_loop_keep_their_tags(tmp_path):
  """Steps run inside the tf.while_loop write the same tags as the first step."""
  from tf_agents.specs import tensor_spec as spec_lib  # pylint: disable=g-import-not-at-top
  import tfrl.envs  # pylint: disable=g-import-not-at-top
  from tfrl.agents.impala import create_impala_agent  # pylint: disable=g-import-not-at-top
  from tfrl.learner import Learner, new_train_step  # pylint: disable=g-import-not-at-top
  env = tfrl.envs.make('CartPole-v1', num_envs=1, seed=0)
  train_step = new_train_step()
  agent = create_impala_agent(env.time_step_spec(), env.action_spec(), train_step)
  data = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                               spec_lib.add_outer_dims_nest(agent.collect_data_spec, (2, 3)))
  learner = Learner(
      str(tmp_path), train_step, agent,
      lambda: tf.data.Dataset.from_tensors(({'experience': data}, ())).repeat(),
      use_kwargs_in_agent_train=True, checkpoint_interval=0, summary_interval=10)
  learner.run(25)
  learner.run(25)
  learner.train_summary_writer.flush()
  steps = collections.defaultdict(list)
  for path in glob.glob(str(tmp_path / 'train' / 'events*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        steps[value.tag].append(event.step)
  assert sorted(steps['losses/policy_loss']) == [0, 10, 20, 30, 40]
  assert not [tag for tag in steps if tag.startswith('while')]

"""Tests for tfrl.triggers: interval semantics, policy exports, steps/sec."""
import glob
import logging
import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl import export
from tfrl import triggers

OBS_DIM, NUM_ACTIONS = 4, 3
OBSERVATIONS = np.random.RandomState(5).randn(6, OBS_DIM).astype(np.float32)
POLICY_NAMES = ['collect_policy', 'greedy_policy', 'policy']


class Counter:
  """A trigger function that records the value it was called at."""

  def __init__(self):
    self.calls = 0

  def __call__(self):
    self.calls += 1


def fire_values(trigger, counter, values):
  """The values among `values` at which `trigger` called its function."""
  fired = []
  for value in values:
    before = counter.calls
    trigger(value)
    if counter.calls > before:
      fired.append(value)
  return fired


# IntervalTrigger.


def test_interval_trigger_fires_once_the_value_advanced_by_the_interval():
  counter = Counter()
  trigger = triggers.IntervalTrigger(3, counter)

  # Fires at 3 (3 - 0 >= 3), then counts from the value it fired at: 6, then 10 (>= 9).
  assert fire_values(trigger, counter, [1, 2, 3, 4, 5, 6, 8, 10, 11, 12]) == [3, 6, 10]


def test_interval_trigger_counts_from_start():
  counter = Counter()
  trigger = triggers.IntervalTrigger(5, counter, start=100)

  assert fire_values(trigger, counter, [101, 104, 105, 109, 110]) == [105, 110]


def test_force_trigger_fires_now_and_restarts_the_interval():
  counter = Counter()
  trigger = triggers.IntervalTrigger(10, counter)

  trigger(4, force_trigger=True)
  assert counter.calls == 1
  # The next regular call is due 10 after the forced one.
  assert fire_values(trigger, counter, [10, 13, 14]) == [14]


def test_reset_forgets_calls_and_set_start_moves_the_origin():
  counter = Counter()
  trigger = triggers.IntervalTrigger(3, counter)
  assert fire_values(trigger, counter, [3, 6]) == [3, 6]

  trigger.reset()  # Due 3 after start (0) again.
  assert fire_values(trigger, counter, [2, 3]) == [3]

  trigger.set_start(20)
  assert fire_values(trigger, counter, [21, 22, 23]) == [23]
  trigger.reset()  # The new start is what reset returns to.
  assert fire_values(trigger, counter, [22, 23]) == [23]


@pytest.mark.parametrize('interval', [0, -5])
def test_interval_not_positive_never_fires_unless_forced(interval):
  counter = Counter()
  trigger = triggers.IntervalTrigger(interval, counter)

  assert fire_values(trigger, counter, [0, 1, 10, 10**9]) == []
  trigger(10**9 + 1, force_trigger=True)
  assert counter.calls == 1


# PolicySavedModelTrigger.


def make_agent():
  time_step_spec = ts.time_step_spec(tensor_spec.TensorSpec([OBS_DIM], tf.float32))
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, NUM_ACTIONS - 1)
  tf.random.set_seed(0)
  network = q_network.QNetwork(time_step_spec.observation, action_spec,
                               fc_layer_params=(8,))
  agent = dqn_agent.DqnAgent(time_step_spec, action_spec, q_network=network,
                             optimizer=tf.keras.optimizers.Adam(1e-3), epsilon_greedy=0.1)
  agent.initialize()
  return agent


def greedy_actions(policy):
  time_step = ts.restart(tf.constant(OBSERVATIONS), batch_size=len(OBSERVATIONS))
  return policy.action(time_step).action.numpy().tolist()


def perturb(agent, scale):
  """Changes every Q-network weight (what a train step would do)."""
  for variable in agent.policy.variables():
    variable.assign_add(scale * tf.ones_like(variable))


def policy_variables(agent):
  return [v.numpy() for v in agent.policy.variables()]


def checkpoint_values(checkpoint_path):
  """Checkpoint key -> value of a variables-only policy checkpoint."""
  reader = tf.train.load_checkpoint(os.path.join(checkpoint_path, 'variables', 'variables'))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name != '_CHECKPOINTABLE_OBJECT_GRAPH'}


def model_values(values):
  """The model variables of `checkpoint_values`, in order."""
  keys = sorted((k for k in values if k.startswith('policy/model_variables/')),
                key=lambda k: int(k.split('/')[2]))
  return [values[k] for k in keys]


def leftover_temporaries(directory):
  return [path for path in glob.glob(os.path.join(directory, '**', '.*'), recursive=True)
          if os.path.basename(path).startswith(('.tmp-', '.old-'))]


def test_policy_trigger_exports_policies_and_writes_checkpoints(tmp_path):
  agent = make_agent()
  train_step = tf.Variable(0, dtype=tf.int64)
  env_steps = tf.Variable(50, dtype=tf.int64)
  trigger = triggers.PolicySavedModelTrigger(
      str(tmp_path), agent, train_step, interval=2, metadata={'env_steps': env_steps},
      max_checkpoints_to_keep=2)
  policies_dir = tmp_path / 'policies'

  # Nothing at creation (a Learner restores first), nor at set_start(0) (a new job).
  trigger.set_start(0)
  assert not policies_dir.exists()
  assert trigger.latest_checkpoint() is None

  expected = {}
  for step in range(1, 8):
    train_step.assign(step)
    env_steps.assign(100 * step)
    perturb(agent, 0.01)
    expected[step] = policy_variables(agent)
    trigger(step)
    if step == 2:  # The first interval exports the three SavedModels, at step 2.
      assert sorted(os.listdir(policies_dir)) == ['checkpoints'] + POLICY_NAMES + [
          'serving']
      for name in POLICY_NAMES:
        assert trigger.path(name) == str(policies_dir / name)
        assert export.exported_train_step(trigger.path(name)) == 2
        model = tf.saved_model.load(trigger.path(name))
        assert int(model.get_train_step().numpy()) == 2
        outputs = model.signatures['action'](
            step_type=tf.zeros([6], tf.int32), reward=tf.zeros([6]),
            discount=tf.ones([6]), observation=tf.constant(OBSERVATIONS))
        actions = outputs['action'].numpy()
        assert actions.shape == (6,) and actions.min() >= 0 and actions.max() < NUM_ACTIONS
        if name == 'greedy_policy':
          assert actions.tolist() == greedy_actions(agent.policy)

  checkpoints_dir = policies_dir / 'checkpoints'
  # Written at 2, 4 and 6; only the newest 2 are kept.
  assert sorted(os.listdir(checkpoints_dir)) == [
      'policy_checkpoint_0000000004', 'policy_checkpoint_0000000006']
  assert trigger.latest_checkpoint() == str(checkpoints_dir / 'policy_checkpoint_0000000006')
  for step in (4, 6):
    path = checkpoints_dir / f'policy_checkpoint_{step:010d}'
    assert (path / 'variables' / 'variables.index').is_file()
    values = checkpoint_values(str(path))
    assert values['policy/train_step/.ATTRIBUTES/VARIABLE_VALUE'] == step
    assert values['policy/metadata/env_steps/.ATTRIBUTES/VARIABLE_VALUE'] == 100 * step
    for value, variable in zip(model_values(values), expected[step]):
      np.testing.assert_array_equal(value, variable)

  # The newest checkpoint turns the step-2 export into the step-6 policy.
  loaded = export.load_policy(trigger.path())
  loaded.update_from_checkpoint(trigger.latest_checkpoint())
  assert loaded.get_train_step() == 6
  for variable, value in zip(loaded.model_variables, expected[6]):
    np.testing.assert_array_equal(variable.numpy(), value)

  # save_saved_models re-exports with the current variables and step.
  trigger.save_saved_models()
  reloaded = export.load_policy(trigger.path())
  assert reloaded.get_train_step() == 7
  assert reloaded.get_metadata() == {'env_steps': 700}
  assert (reloaded.action(ts.restart(tf.constant(OBSERVATIONS), batch_size=6))
          .action.numpy().tolist()) == greedy_actions(agent.policy)
  assert leftover_temporaries(str(tmp_path)) == []


def test_saved_models_are_published_as_tf_serving_versions(tmp_path):
  """Each export is also policies/serving/<name>/<step>/, whole, readable by others,
  the newest three kept; saved_model_interval exports while the job trains."""
  agent, train_step = make_agent(), tf.Variable(0, dtype=tf.int64)
  trigger = triggers.PolicySavedModelTrigger(str(tmp_path), agent, train_step,
                                             interval=1000, saved_model_interval=100)
  trigger.set_start(0)
  for step in range(50, 501, 50):
    train_step.assign(step)
    perturb(agent, 0.01)
    trigger(step)
  umask = os.umask(0)
  os.umask(umask)
  for name in POLICY_NAMES:
    base = trigger.serving_path(name)
    assert base == str(tmp_path / 'policies' / 'serving' / name)
    assert sorted(os.listdir(base), key=int) == ['300', '400', '500']
    for version in ('300', '400', '500'):
      model = tf.saved_model.load(os.path.join(base, version))
      assert int(model.get_train_step().numpy()) == int(version)
      assert os.stat(os.path.join(base, version)).st_mode & 0o777 == 0o777 & ~umask
    # The plain loaders' path holds the newest.
    assert export.exported_train_step(trigger.path(name)) == 500
  newest = tf.saved_model.load(os.path.join(trigger.serving_path(), '500'))
  served = newest.signatures['serving_default'](observation=tf.constant(OBSERVATIONS))
  assert served['action'].numpy().tolist() == greedy_actions(agent.policy)
  assert leftover_temporaries(str(tmp_path)) == []


def test_async_policy_checkpoints_hold_the_values_at_trigger_time(tmp_path):
  agent = make_agent()
  train_step = tf.Variable(0, dtype=tf.int64)
  env_steps = tf.Variable(50, dtype=tf.int64)
  trigger = triggers.PolicySavedModelTrigger(
      str(tmp_path), agent, train_step, interval=2, metadata={'env_steps': env_steps},
      async_saving=True, max_checkpoints_to_keep=2)
  checkpoints_dir = tmp_path / 'policies' / 'checkpoints'

  expected = {}
  for step in range(1, 8):
    train_step.assign(step)
    env_steps.assign(100 * step)
    perturb(agent, 0.01)
    expected[step] = policy_variables(agent)
    trigger(step)
    # Training goes on while the write may still run: it must not see these values.
    perturb(agent, 1000.0)
    train_step.assign(-1)
    env_steps.assign(-1)
  trigger.wait()

  assert sorted(os.listdir(checkpoints_dir)) == [
      'policy_checkpoint_0000000004', 'policy_checkpoint_0000000006']
  assert trigger.latest_checkpoint() == str(checkpoints_dir / 'policy_checkpoint_0000000006')
  # The same checkpoint a synchronous write of the policy makes, nothing else.
  sync_path = export.write_policy_checkpoint(
      export.PolicyModule(agent.policy, train_step, {'env_steps': env_steps}),
      str(tmp_path / 'sync'))
  for step in (4, 6):
    path = checkpoints_dir / f'policy_checkpoint_{step:010d}'
    assert (path / 'variables' / 'variables.index').is_file()
    values = checkpoint_values(str(path))
    assert sorted(values) == sorted(checkpoint_values(sync_path))
    assert values['policy/train_step/.ATTRIBUTES/VARIABLE_VALUE'] == step
    assert values['policy/metadata/env_steps/.ATTRIBUTES/VARIABLE_VALUE'] == 100 * step
    for value, variable in zip(model_values(values), expected[step]):
      np.testing.assert_array_equal(value, variable)

  loaded = export.load_policy(trigger.path('collect_policy'))
  loaded.update_from_checkpoint(trigger.latest_checkpoint())
  assert loaded.get_train_step() == 6
  assert loaded.get_metadata() == {'env_steps': 600}
  assert leftover_temporaries(str(tmp_path)) == []


# StepsPerSecondLogTrigger.


def test_steps_per_second_trigger_measures_at_interval(tmp_path, caplog):
  train_step = tf.Variable(100, dtype=tf.int64)
  started = time.perf_counter()
  trigger = triggers.StepsPerSecondLogTrigger(train_step, interval=10)
  writer = tf.summary.create_file_writer(str(tmp_path))

  train_step.assign(105)
  trigger(105)
  assert np.isnan(trigger.last_rate)  # Not due yet: 5 < 10 steps since 100.

  time.sleep(0.05)
  train_step.assign(110)
  with writer.as_default(), caplog.at_level(logging.INFO, logger='absl'):
    trigger(110)
  elapsed = time.perf_counter() - started
  writer.flush()

  # 10 steps in a time between the sleep and the whole test so far.
  assert 10 / elapsed <= trigger.last_rate <= 10 / 0.05
  assert 'train step 110' in caplog.text and 'steps/sec' in caplog.text
  tags = set()
  for path in glob.glob(str(tmp_path / 'events.out.tfevents.*')):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      tags.update((value.tag, event.step) for value in event.summary.value)
  assert tags == {('train_steps_per_sec', 110)}


# What a user keeps only moves forward.


def test_resumed_trigger_exports_the_restored_step_and_never_an_older_one(tmp_path, caplog):
  agent = make_agent()
  train_step = tf.Variable(5, dtype=tf.int64)
  first = triggers.PolicySavedModelTrigger(str(tmp_path), agent, train_step, interval=100)
  first.save_saved_models()  # a job that ended at step 5
  trained = policy_variables(agent)

  # A restart from an older checkpoint (step 3) with other weights exports nothing...
  perturb(agent, 1.0)
  train_step.assign(3)
  restarted = triggers.PolicySavedModelTrigger(str(tmp_path), agent, train_step,
                                               interval=100)
  restarted.set_start(3)
  with caplog.at_level(logging.WARNING, logger='absl'):
    restarted.save_saved_models()
  assert 'this job is at train step 3, older' in caplog.text
  for name in POLICY_NAMES:
    loaded = export.load_policy(restarted.path(name))
    assert loaded.get_train_step() == 5
  for variable, value in zip(export.load_policy(first.path()).model_variables, trained):
    np.testing.assert_array_equal(variable.numpy(), value)

  # ... while a restart from a later checkpoint exports its restored step at set_start.
  train_step.assign(8)
  resumed = triggers.PolicySavedModelTrigger(str(tmp_path), agent, train_step, interval=100)
  resumed.set_start(8)
  for name in POLICY_NAMES:
    assert export.load_policy(resumed.path(name)).get_train_step() == 8
  assert (export.load_policy(resumed.path()).action(
      ts.restart(tf.constant(OBSERVATIONS), batch_size=6)).action.numpy().tolist()
          == greedy_actions(agent.policy))


def test_replacing_an_export_never_leaves_a_reader_without_one(tmp_path, monkeypatch):
  agent = make_agent()
  train_step = tf.Variable(1, dtype=tf.int64)
  trigger = triggers.PolicySavedModelTrigger(str(tmp_path), agent, train_step, interval=100)
  trigger.save_saved_models()
  path = trigger.path()
  # After every rename or swap the export makes, the path holds a complete export.
  complete_after_each_move = []

  def watched(move):
    def wrapper(*args):
      result = move(*args)
      complete_after_each_move.append(os.path.isfile(os.path.join(path, 'saved_model.pb')))
      return result
    return wrapper

  monkeypatch.setattr(export, '_exchange', watched(export._exchange))
  monkeypatch.setattr(export.os, 'rename', watched(os.rename))
  # And a reader polling in a thread never finds a file missing.
  missing, polls = [], 0
  stop = threading.Event()

  def poll():
    nonlocal polls
    while not stop.is_set():
      polls += 1
      for name in ('saved_model.pb', export.EXPORT_INFO, 'variables/variables.index',
                   export.POLICY_SPECS_PBTXT):
        if not os.path.exists(os.path.join(path, name)):
          missing.append(name)

  reader = threading.Thread(target=poll)
  reader.start()
  try:
    for step in range(2, 6):
      train_step.assign(step)
      trigger.save_saved_models()
  finally:
    stop.set()
    reader.join()
  assert polls > 100
  assert missing == []
  assert complete_after_each_move and all(complete_after_each_move)
  assert export.exported_train_step(path) == 5
  assert leftover_temporaries(str(tmp_path)) == []


def test_trigger_removes_what_interrupted_writes_left(tmp_path):
  policies = tmp_path / 'policies'
  leftovers = [policies / '.tmp-greedy_policy-abc', policies / '.old-policy-def',
               policies / 'checkpoints' / '.tmp-policy_checkpoint_0000000004-xyz']
  for leftover in leftovers:
    (leftover / 'variables').mkdir(parents=True)
  keep = policies / 'checkpoints' / 'policy_checkpoint_0000000002'
  keep.mkdir()
  triggers.PolicySavedModelTrigger(str(tmp_path), make_agent(),
                                   tf.Variable(0, dtype=tf.int64), interval=100)
  assert leftover_temporaries(str(tmp_path)) == []
  assert keep.is_dir()

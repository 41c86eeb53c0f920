"""Hyperparameters in variables: a change applies on the next train step of the same
traced function, and the agent's checkpoint keeps it (what population-based training
needs of an agent)."""
import os

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from learners import pbt_member
from tfrl import checkpoints
from tfrl import learner as learner_lib
from tfrl.agents import bc
from tfrl.agents import clear
from tfrl.agents import cql_sac
from tfrl.agents import dqn
from tfrl.agents import hyperparameters as hyperparameters_lib
from tfrl.agents import impala
from tfrl.agents import interface
from tfrl.agents import iql
from tfrl.agents import ppo
from tfrl.agents import sac
import unrolls  # tests/agents/unrolls.py
from test_bc import transitions  # tests/agents/test_bc.py

FIRST, MID = int(ts.StepType.FIRST), int(ts.StepType.MID)
ROWS, LENGTH = 4, 6  # unrolls of 5 steps and their bootstrap step


def ppo_agent(specs, train_step=None, **kwargs):
  kwargs.setdefault('learning_rate', 1e-3)
  if train_step is None:
    train_step = learner_lib.new_train_step()
  return ppo.create_ppo_agent(*specs, train_step,
                              fc_layer_params=(16,), num_epochs=1, num_minibatches=1,
                              **kwargs)


def experience():
  step_type = np.full((ROWS, LENGTH), MID)
  step_type[:, 0] = FIRST
  return unrolls.tensors(unrolls.make(step_type, np.ones((ROWS, LENGTH))))


def weights(agent):
  return [v.numpy().copy() for v in agent._network.trainable_variables]  # pylint: disable=protected-access


def test_each_agent_names_what_it_reads_from_variables(specs):
  assert ppo_agent(specs).hyperparameters.names == (
      'learning_rate', 'entropy_cost', 'clip_ratio', 'reward_scale', 'gamma')
  impala_agent = impala.create_impala_agent(*specs, learner_lib.new_train_step(),
                                            fc_layer_params=(16,))
  assert impala_agent.hyperparameters.names == (
      'learning_rate', 'entropy_cost', 'reward_scale', 'gamma')  # V-trace: no clip ratio
  appo_agent = impala.create_impala_agent(*specs, learner_lib.new_train_step(),
                                          fc_layer_params=(16,), policy_loss='ppo')
  assert 'clip_ratio' in appo_agent.hyperparameters
  dqn_agent = dqn.create_dqn_agent(*specs, learner_lib.new_train_step())
  assert dqn_agent.hyperparameters.values() == pytest.approx(
      {'learning_rate': 1e-3, 'epsilon_end': 0.05, 'target_update_period': 100,
       'gamma': 0.99})


def test_a_new_learning_rate_applies_on_the_next_step_without_a_retrace(specs):
  agent, data = ppo_agent(specs), experience()
  train = tf.function(agent.train)
  start = weights(agent)
  train(data)
  moved = weights(agent)
  assert any(not np.array_equal(a, b) for a, b in zip(start, moved))
  agent.hyperparameters.assign({'learning_rate': 0.0})
  train(data)  # Adam with a zero rate: no step at all
  for a, b in zip(moved, weights(agent)):
    np.testing.assert_array_equal(a, b)
  agent.hyperparameters.assign({'learning_rate': 1e-3})
  train(data)
  assert any(not np.array_equal(a, b) for a, b in zip(moved, weights(agent)))
  assert train.experimental_get_tracing_count() == 1


def test_loss_settings_apply_to_the_same_traced_loss(specs):
  """Entropy cost, clip ratio and reward scale change the loss as its formula says."""
  agent, data = ppo_agent(specs), experience()
  loss = tf.function(agent.loss)
  hyperparameters = agent.hyperparameters
  base = loss(data)
  hyperparameters.assign({'entropy_cost': 0.5})
  with_entropy = loss(data)
  np.testing.assert_allclose(with_entropy.loss.numpy(),
                             base.loss.numpy() - 0.5 * base.extra.entropy.numpy(), rtol=1e-5)
  hyperparameters.assign({'clip_ratio': 1e-6})  # every step's ratio is off 1 by more
  assert loss(data).extra.clip_fraction.numpy() == pytest.approx(1.0)
  hyperparameters.assign({'clip_ratio': 100.0})
  assert loss(data).extra.clip_fraction.numpy() == 0.0
  hyperparameters.assign({'reward_scale': 10.0})
  assert loss(data).extra.value_loss.numpy() != pytest.approx(base.extra.value_loss.numpy())
  assert loss.experimental_get_tracing_count() == 1


@pytest.mark.parametrize('builder', ['ppo', 'impala'])
def test_a_discount_set_while_training_changes_the_traced_returns(specs, builder):
  """PPO's GAE and IMPALA's V-trace read gamma at each step: with rewards of 1, a gamma
  of 0 makes every value target 1, a different value loss from the same trace."""
  agent = (ppo_agent(specs) if builder == 'ppo' else impala.create_impala_agent(
      *specs, learner_lib.new_train_step(), fc_layer_params=(16,)))
  data = experience()
  loss = tf.function(agent.loss)
  field = 'value_loss' if builder == 'ppo' else 'baseline_loss'
  value_loss = lambda: getattr(loss(data).extra, field).numpy()
  with_gamma = value_loss()
  agent.hyperparameters.assign({'gamma': 0.0})
  assert value_loss() != pytest.approx(with_gamma)
  agent.hyperparameters.assign({'gamma': 0.99})
  assert value_loss() == pytest.approx(with_gamma, rel=1e-6)
  assert loss.experimental_get_tracing_count() == 1


def make_learner(root_dir, agent, train_step, **kwargs):
  data = experience()
  return learner_lib.Learner(
      root_dir, train_step, agent,
      experience_dataset_fn=lambda: tf.data.Dataset.from_tensors(
          {'experience': data}).map(lambda x: (x, ())).repeat(),
      use_kwargs_in_agent_train=True, summary_interval=0, **kwargs)


def test_a_resumed_job_goes_on_with_the_changed_values(specs, tmp_path):
  """The Learner's checkpoint holds the hyperparameters beside the agent; a new job on
  the directory starts from the changed values, not the config's."""
  train_step = learner_lib.new_train_step()
  agent = ppo_agent(specs, train_step=train_step)
  learner = make_learner(str(tmp_path), agent, train_step, checkpoint_interval=1)
  agent.hyperparameters.assign({'learning_rate': 5e-4, 'entropy_cost': 0.03})
  learner.run(iterations=2)
  learner.save_checkpoint()
  changed = agent.hyperparameters.values()

  train_step = learner_lib.new_train_step()
  resumed = ppo_agent(specs, train_step=train_step)  # the config's 1e-3 and 0.0
  make_learner(str(tmp_path), resumed, train_step, checkpoint_interval=1)
  assert int(train_step.numpy()) == 2
  assert resumed.hyperparameters.values() == changed
  assert changed['learning_rate'] == pytest.approx(5e-4)


def test_a_checkpoint_from_before_the_variables_still_restores(specs, tmp_path):
  """A job checkpointed by a tfrl whose agents had no hyperparameter variables resumes
  (with the config's values) instead of refusing its checkpoint."""
  train_step = learner_lib.new_train_step()
  agent = ppo_agent(specs, train_step=train_step)
  directory = os.path.join(str(tmp_path), 'train', 'checkpoints')
  checkpoints.TrainCheckpoint(directory, agent, train_step).save()  # agent and step only
  weights_saved = weights(agent)

  train_step = learner_lib.new_train_step()
  resumed = ppo_agent(specs, train_step=train_step, entropy_cost=0.02)
  make_learner(str(tmp_path), resumed, train_step, checkpoint_interval=1)
  for a, b in zip(weights_saved, weights(resumed)):
    np.testing.assert_array_equal(a, b)
  assert resumed.hyperparameters.values()['entropy_cost'] == pytest.approx(0.02)


def test_unknown_names_and_bad_values_are_refused(specs):
  hyperparameters = ppo_agent(specs).hyperparameters
  with pytest.raises(KeyError, match="no hyperparameter 'epsilon_end'; this agent has: "
                     'learning_rate, entropy_cost, clip_ratio, reward_scale'):
    hyperparameters.assign({'entropy_cost': 0.1, 'epsilon_end': 0.1})
  assert hyperparameters.values()['entropy_cost'] == 0.0  # nothing assigned
  with pytest.raises(ValueError, match='entropy_cost must be finite'):
    hyperparameters.assign({'entropy_cost': float('nan')})
  with pytest.raises(TypeError, match='must be an int or a float'):
    hyperparameters_lib.Hyperparameters(lr='fast')


def dqn_agent_on_small_specs(**kwargs):
  observation_spec = tensor_spec.BoundedTensorSpec((3,), tf.float32, -1, 1)
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
  train_step = tf.Variable(0, dtype=tf.int64)
  return dqn.create_dqn_agent(ts.time_step_spec(observation_spec), action_spec,
                              train_step, fc_layer_params=(16,), **kwargs), train_step


def test_dqn_target_update_period_changes_between_steps_of_one_trace():
  """The target copies the online network on every period-th train step, the period
  read at each step: 2, then 3 from the 4th step on."""
  agent, _ = dqn_agent_on_small_specs(target_update_period=2)
  rng = np.random.default_rng(0)
  data = tf.nest.map_structure(tf.convert_to_tensor, transitions(
      rng.uniform(-1, 1, (8, 3)).astype(np.float32), rng.integers(0, 4, 8),
      np.ones(8, np.int32)))
  train = tf.function(agent.train)
  online, target = agent._q_network, agent._target_q_network  # pylint: disable=protected-access

  def target_is_online():
    return all(np.array_equal(a.numpy(), b.numpy())
               for a, b in zip(online.variables, target.variables))

  copied = []
  for step in range(1, 10):
    if step == 4:
      # (The first call traced twice: tf-agents' DQN creates the optimizer's slots then.)
      traces = train.experimental_get_tracing_count()
      agent.hyperparameters.assign({'target_update_period': 3})
    train(data)
    copied.append(target_is_online())
  # Steps 2 (period 2), then the counter's multiples of 3: 6 and 9.
  assert [s for s, c in zip(range(1, 10), copied) if c] == [2, 6, 9]
  assert train.experimental_get_tracing_count() == traces


def test_dqn_exploration_end_applies_to_the_collect_policy():
  agent, train_step = dqn_agent_on_small_specs(epsilon_start=1.0, epsilon_end=0.1,
                                               epsilon_decay_steps=10)
  schedule = agent.collect_policy._get_epsilon  # pylint: disable=protected-access
  train_step.assign(100)  # past the decay
  assert float(schedule()) == pytest.approx(0.1)
  agent.hyperparameters.assign({'epsilon_end': 0.02})
  assert float(schedule()) == pytest.approx(0.02)
  # A second collector of three acts with end ** 1.5 (Ape-X's spread) of the new value.
  second = agent.collect_policy_for_task(1, 3)._get_epsilon  # pylint: disable=protected-access
  assert float(second()) == pytest.approx(0.02 ** 1.5, rel=1e-5)


def test_exploit_copies_weights_and_optimizer_state_and_keeps_the_train_step(specs,
                                                                             tmp_path):
  """A population member that takes another's checkpoint acts as it does and would
  take the same next step (Adam's moments copied); its own train step stays."""
  source_step = learner_lib.new_train_step()
  source = ppo_agent(specs, train_step=source_step, entropy_cost=0.01)
  source_learner = make_learner(str(tmp_path / 'source'), source, source_step,
                                checkpoint_interval=0)
  source_learner.run(iterations=3)
  prefix = source_learner.save_checkpoint()

  member_step = learner_lib.new_train_step()
  member = ppo_agent(specs, train_step=member_step)
  make_learner(str(tmp_path / 'member'), member, member_step,
               checkpoint_interval=0).run(iterations=1)
  pbt_member.copy_agent(member, member_step, prefix)

  assert int(member_step.numpy()) == 1
  for a, b in zip(weights(source), weights(member)):
    np.testing.assert_array_equal(a, b)
  source_slots = [v.numpy() for v in source._optimizer.variables]  # pylint: disable=protected-access
  member_slots = [v.numpy() for v in member._optimizer.variables]  # pylint: disable=protected-access
  assert len(source_slots) == len(member_slots) > 2
  for a, b in zip(source_slots, member_slots):
    np.testing.assert_array_equal(a, b)
  observations = tf.constant(np.random.default_rng(0).normal(size=(16, 4)), tf.float32)
  time_step = ts.restart(observations, batch_size=16)
  np.testing.assert_array_equal(source.policy.action(time_step).action.numpy(),
                                member.policy.action(time_step).action.numpy())
  # Copying the agent leaves the hyperparameters to the decision (not the source's).
  assert member.hyperparameters.values()['entropy_cost'] == 0.0


def test_no_hyperparameter_is_inside_the_agents_own_checkpoint(specs, tmp_path):
  """What lets a checkpoint written before the variables existed restore strictly: the
  agent's object graph holds none of them (the Learner saves them beside it), though
  DQN's collect policy reads epsilon_end and its export saves it."""
  for name, agent in [('ppo', ppo_agent(specs)),
                      ('dqn', dqn.create_dqn_agent(*specs, learner_lib.new_train_step()))]:
    path = tf.train.Checkpoint(agent=agent).save(str(tmp_path / name / 'ckpt'))
    saved = {key for key, _ in tf.train.list_variables(path)}
    # Keys are attribute paths (the optimizer's own learning rate is saved with it, as
    # it always was).
    for part in ('hyperparameters', 'epsilon_end', '_update_target/_period'):
      assert not any(part in entry for entry in saved), (name, part, sorted(saved))
    assert any('_update_target/_counter' in e for e in saved) == (name == 'dqn')
  dqn_agent = dqn.create_dqn_agent(*specs, learner_lib.new_train_step())
  assert any(v is dqn_agent.hyperparameters['epsilon_end']
             for v in dqn_agent.collect_policy.variables())


# The builders of the agents that train from transitions, on small networks.
SMALL = {
    sac.create_sac_agent: dict(actor_fc_layer_params=(8,), critic_joint_fc_layer_params=(8,)),
    cql_sac.create_cql_sac_agent: dict(actor_fc_layer_params=(8,),
                                       critic_joint_fc_layer_params=(8,)),
    iql.create_iql_agent: dict(actor_fc_layer_params=(8,), critic_joint_fc_layer_params=(8,),
                               value_fc_layer_params=(8,)),
    bc.create_bc_agent: dict(fc_layer_params=(8,)),
}


@pytest.mark.parametrize('builder', list(SMALL), ids=lambda b: b.__name__)
def test_every_agent_with_an_optimizer_has_what_its_builder_declares(pendulum_specs,
                                                                     builder):
  """The names a population's bounds are checked against at configuration are the
  agent's own, and each is a variable the population can set."""
  agent = builder(*pendulum_specs, learner_lib.new_train_step(), **SMALL[builder])
  declared = interface.tunable_of(builder)
  assert agent.hyperparameters.names == declared, builder.__name__
  interface.check_agent(agent)
  agent.hyperparameters.assign({name: 0.5 for name in declared})
  assert agent.hyperparameters.values() == pytest.approx({n: 0.5 for n in declared})


def test_the_builders_declare_the_names_of_ppo_impala_and_dqn(specs):
  assert interface.tunable_of(ppo.create_ppo_agent) == ppo_agent(specs).hyperparameters.names
  assert set(dqn.create_dqn_agent(*specs, learner_lib.new_train_step()).hyperparameters.names
             ) == set(interface.tunable_of(dqn.create_dqn_agent))
  appo = impala.create_impala_agent(*specs, learner_lib.new_train_step(),
                                    fc_layer_params=(16,), policy_loss='ppo')
  assert set(appo.hyperparameters.names) == set(interface.tunable_of(
      impala.create_impala_agent)) == set(interface.tunable_of(clear.create_clear_agent))


def sac_rows(batch=8):
  """[B, 2] Pendulum transitions (a reward of 1 a step)."""
  rng = np.random.default_rng(0)
  data = transitions(rng.uniform(-1, 1, (batch, 3)).astype(np.float32),
                     rng.uniform(-2, 2, (batch, 1)).astype(np.float32),
                     np.ones(batch, np.int32))
  data = data._replace(reward=np.ones((batch, 2), np.float32))
  return tf.nest.map_structure(tf.convert_to_tensor, data)


@pytest.mark.parametrize('builder', [sac.create_sac_agent, cql_sac.create_cql_sac_agent],
                         ids=lambda b: b.__name__)
def test_sac_rates_are_the_ones_its_optimizers_step_with(pendulum_specs, builder):
  """A zero actor rate leaves the actor where it is while the critics move, in the same
  trace: the variable a population sets is the legacy optimizer's own rate."""
  agent = builder(*pendulum_specs, learner_lib.new_train_step(), **SMALL[builder])
  train, data = tf.function(agent.train), sac_rows()
  actor = agent._actor_network.trainable_variables  # pylint: disable=protected-access
  critic = agent._critic_network_1.trainable_variables  # pylint: disable=protected-access
  train(data)  # the first call creates the optimizers' slots
  traces = train.experimental_get_tracing_count()
  agent.hyperparameters.assign({'actor_learning_rate': 0.0})
  before = [[v.numpy().copy() for v in part] for part in (actor, critic)]
  train(data)
  for a, b in zip(before[0], actor):
    np.testing.assert_array_equal(a, b.numpy())
  assert any(not np.array_equal(a, b.numpy()) for a, b in zip(before[1], critic))
  agent.hyperparameters.assign({'actor_learning_rate': 1e-2})
  train(data)
  assert any(not np.array_equal(a, b.numpy()) for a, b in zip(before[0], actor))
  assert train.experimental_get_tracing_count() == traces


def test_a_discount_set_while_training_changes_the_traced_td_target():
  """DQN's gamma is read at each step: with rewards of 0, a gamma of 0 makes every
  TD target 0 (the loss is then the Q-values' own)."""
  agent, _ = dqn_agent_on_small_specs()
  rng = np.random.default_rng(0)
  data = tf.nest.map_structure(tf.convert_to_tensor, transitions(
      rng.uniform(-1, 1, (8, 3)).astype(np.float32), rng.integers(0, 4, 8),
      np.ones(8, np.int32)))
  # What `_train` computes (tf-agents' public `loss` passes a discount of 1 instead).
  loss = tf.function(lambda: agent._loss(  # pylint: disable=protected-access
      data, td_errors_loss_fn=tf.math.squared_difference,
      gamma=agent._gamma).extra.td_loss)  # pylint: disable=protected-access
  with_gamma = loss().numpy()
  agent.hyperparameters.assign({'gamma': 0.0})
  without = loss().numpy()
  assert not np.allclose(with_gamma, without)
  agent.hyperparameters.assign({'gamma': 0.99})
  np.testing.assert_allclose(loss().numpy(), with_gamma, rtol=1e-6)
  assert loss.experimental_get_tracing_count() == 1


def test_a_sac_checkpoint_holds_no_hyperparameter_of_its_own(pendulum_specs, tmp_path):
  """As for PPO and DQN: the discount and the hyperparameters stay out of the agent's
  object graph (the Learner saves them beside it), so older checkpoints still match."""
  agent = sac.create_sac_agent(*pendulum_specs, learner_lib.new_train_step(),
                               **SMALL[sac.create_sac_agent])
  path = tf.train.Checkpoint(agent=agent).save(str(tmp_path / 'ckpt'))
  saved = {key for key, _ in tf.train.list_variables(path)}
  for part in ('hyperparameters', '_gamma'):
    assert not any(part in entry for entry in saved), (part, sorted(saved))


def test_an_agent_without_a_bounded_name_is_refused_in_one_line(specs):
  agent = ppo_agent(specs)
  with pytest.raises(hyperparameters_lib.NotTunable,
                     match='PpoAgent has no hyperparameter epsilon_end a population can '
                     'change; it has: learning_rate, entropy_cost, clip_ratio, reward_scale, '
                     'gamma'):
    hyperparameters_lib.require(agent, ['learning_rate', 'epsilon_end'])
  with pytest.raises(hyperparameters_lib.NotTunable,
                     match='object has no hyperparameters a population can change'):
    hyperparameters_lib.require(object(), ['learning_rate'])


def test_an_annealed_rate_is_not_offered(pendulum_specs):
  """A schedule writes the optimizer's rate variable at every step: a population's value
  there would not hold, so the member refuses a bound on it."""
  agent = iql.create_iql_agent(*pendulum_specs, learner_lib.new_train_step(),
                               actor_decay_steps=100, **SMALL[iql.create_iql_agent])
  assert 'actor_learning_rate' not in agent.hyperparameters
  assert 'critic_learning_rate' in agent.hyperparameters
  with pytest.raises(hyperparameters_lib.NotTunable,
                     match='IqlAgent has no hyperparameter actor_learning_rate'):
    hyperparameters_lib.require(agent, ['actor_learning_rate'])

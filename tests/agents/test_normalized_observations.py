"""Observation normalization through an agent: training updates the statistics from
the batch (bootstrap steps left out), they are policy variables (so they are pushed to
collectors, checkpointed and exported), and the exported policy takes raw observations.
"""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from tfrl import export
from tfrl import learner as learner_lib
from tfrl.agents import impala
from tfrl.agents import ppo
from tfrl.losses import policy_gradient
from tfrl.losses import vtrace
import unrolls  # tests/agents/unrolls.py


def test_training_updates_the_statistics_the_exported_policy_uses(pendulum_specs, tmp_path):
  time_step_spec, action_spec = pendulum_specs
  agent = ppo.create_ppo_agent(time_step_spec, action_spec, learner_lib.new_train_step(),
                               fc_layer_params=(8,), normalize_observations=True,
                               num_epochs=1)
  normalizer = agent._network._normalizer  # pylint: disable=protected-access
  policy_variables = {id(v) for v in agent.collect_policy.variables()}
  assert {id(v) for v in normalizer.weights} <= policy_variables
  step_type = np.ones((4, 6), np.int32)
  step_type[:, 0] = 0
  experience = unrolls.with_gaussian_actions(
      unrolls.make(step_type, np.ones_like(step_type), seed=0))
  # Far from the initial statistics (mean 0, variance 1).
  experience = experience._replace(
      observation=(50.0 + 5.0 * experience.observation).astype(np.float32))
  agent.train(tf.nest.map_structure(tf.convert_to_tensor, experience))
  seen = experience.observation[:, :-1].reshape(-1, 3)  # the bootstrap steps are not
  assert normalizer.count.numpy() == len(seen)
  np.testing.assert_allclose(normalizer.weights[1].numpy(), seen.mean(0), rtol=1e-5)
  # Exported, the policy normalizes raw observations itself.
  path = str(tmp_path / 'policy')
  export.export_policy(agent.policy, path)
  loaded = tf.saved_model.load(path)
  time_step = ts.TimeStep(*[tf.convert_to_tensor(x[:, 2]) for x in (
      experience.step_type, experience.reward, experience.discount,
      experience.observation)])
  want = agent.policy.action(time_step).action.numpy()
  np.testing.assert_allclose(loaded.action(time_step, ()).action, want, rtol=1e-5)
  # And the statistics matter: without them the same network acts otherwise.
  normalizer.weights[1].assign(tf.zeros([3]))
  assert not np.allclose(agent.policy.action(time_step).action, want, rtol=1e-3)


def _collected(agent, seed=0):
  """[4, 6] unrolls of Pendulum-shaped observations far from the normalizer's statistics,
  acted by `agent`'s own network now: the behaviour info (loc, log_scale, u, value) is
  what a collector holding the current variables stored."""
  step_type = np.ones((4, 6), np.int32)
  step_type[:, 0] = 0
  experience = unrolls.make(step_type, np.ones_like(step_type), seed=seed)
  rng = np.random.RandomState(seed)
  observation = (50.0 + 5.0 * rng.randn(4, 6, 3)).astype(np.float32)
  (params, values), _ = agent._network(  # pylint: disable=protected-access
      tf.constant(observation), tf.constant(step_type))
  action, extras = agent._network.head.sample(params)  # pylint: disable=protected-access
  info = dict(params, value=values, **extras)
  return experience._replace(
      observation=observation, action=action.numpy(),
      policy_info={name: tf.convert_to_tensor(x).numpy() for name, x in info.items()})


def _build(name, specs):
  """A PPO (2 epochs x 2 minibatches) or APPO agent with the normalizer on, at lr 0."""
  time_step_spec, action_spec = specs
  kwargs = dict(fc_layer_params=(8,), normalize_observations=True, learning_rate=0.0)
  if name == 'ppo':
    return ppo.create_ppo_agent(time_step_spec, action_spec, learner_lib.new_train_step(),
                                num_epochs=2, num_minibatches=2, **kwargs)
  return impala.create_impala_agent(time_step_spec, action_spec,
                                    learner_lib.new_train_step(), policy_loss='ppo',
                                    **kwargs)


def _spy_on_log_ratios(name, monkeypatch, valid):
  """A list that gets the [T, B] log importance ratios of every loss computed."""
  log_ratios = []
  if name == 'ppo':
    original = policy_gradient.clipped_surrogate_loss

    def spy(ratio, *args):
      log_ratios.append(np.log(ratio.numpy()))
      return original(ratio, *args)
    monkeypatch.setattr(policy_gradient, 'clipped_surrogate_loss', spy)
  else:
    original = vtrace.from_importance_weights

    def spy(log_rhos, *args):
      log_ratios.append(np.where(valid, log_rhos.numpy(), 0.0))  # boundaries: -1e9
      return original(log_rhos, *args)
    monkeypatch.setattr(vtrace, 'from_importance_weights', spy)
  return log_ratios


@pytest.mark.parametrize('name', ['ppo', 'impala'])
def test_the_loss_sees_the_collection_statistics_and_the_step_then_updates_them(
    name, pendulum_specs, monkeypatch):
  """At learning rate 0, the first minibatch's importance ratios are 1 (the loss
  normalizes with the statistics the batch was acted with, not with the batch folded
  in), in eager mode and in a tf.function; after the step the statistics hold the
  batch's moments (bootstrap steps left out)."""
  agent = _build(name, pendulum_specs)
  normalizer = agent._network._normalizer  # pylint: disable=protected-access
  experience = tf.nest.map_structure(tf.convert_to_tensor, _collected(agent))
  valid = experience.step_type.numpy()[:, :-1].T != ts.StepType.LAST  # [T, B]
  before = agent.loss(experience).loss.numpy()
  log_ratios = _spy_on_log_ratios(name, monkeypatch, valid)
  loss_info = agent.train(experience)  # eager: the spy sees every minibatch
  monkeypatch.undo()
  assert len(log_ratios) == (4 if name == 'ppo' else 1)  # PPO: 2 epochs x 2 minibatches
  np.testing.assert_array_equal(log_ratios[0], 0.0)
  if name == 'impala':
    np.testing.assert_allclose(loss_info.loss.numpy(), before, rtol=1e-6)
  seen = experience.observation.numpy()[:, :-1].reshape(-1, 3)
  assert normalizer.count.numpy() == len(seen)
  np.testing.assert_allclose(normalizer.weights[1].numpy(), seen.mean(0), rtol=1e-5)
  np.testing.assert_allclose(normalizer.weights[2].numpy(), seen.var(0), rtol=1e-4)
  # In a graph, too, the loss reads the statistics before the update assigns them: a
  # second batch acted with the updated statistics trains at ratio 1 (its loss is the
  # loss before training), and the count grows by its steps.
  second = tf.nest.map_structure(tf.convert_to_tensor, _collected(agent, seed=1))
  before = agent.loss(second).loss.numpy()
  agent._num_epochs = agent._num_minibatches = 1  # pylint: disable=protected-access
  loss_info = tf.function(agent.train, autograph=False)(second)
  np.testing.assert_allclose(loss_info.loss.numpy(), before, rtol=1e-5, atol=1e-6)
  if name == 'ppo':
    assert abs(float(loss_info.extra.approx_kl)) < 1e-7
    assert float(loss_info.extra.clip_fraction) == 0.0
  assert normalizer.count.numpy() == 2 * len(seen)

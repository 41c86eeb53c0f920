"""CQL for continuous actions (`tfrl.agents.cql_sac`): the conservative term against a
numpy reference, and training under MirroredStrategy exactly as on one device.

SAC and CQL draw actions at random; `DeterministicCqlSac` (also used by the mirrored
script) draws them as functions of the state instead, so that a row gives the same
samples whichever replica holds it and runs can be compared exactly.
"""
import json
import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl.agents import cql_sac
from tfrl.agents import sac
import strategy_runs  # tests/agents/strategy_runs.py
from test_bc import transitions  # tests/agents/test_bc.py

OBS, ACTION = 3, 2
LOW, HIGH = -2.0, 2.0


def state_noise(observation, width):
  """[rows, width] numbers in (-1, 1) that depend on the row's state only."""
  total = tf.reduce_sum(observation, axis=-1, keepdims=True)
  return tf.sin(37.0 * total * tf.range(1, width + 1, dtype=tf.float32) + 0.3)


def squash(dist, x):
  """The tanh-squashed Gaussian's action for its pre-squash value x."""
  return dist.action_means + dist.action_magnitudes * tf.tanh(x)


class DeterministicCqlSac(cql_sac.CqlSacAgent):
  """Reparameterized samples with state-determined noise in place of random noise."""

  def _distribution(self, time_steps):
    return self._policy.distribution(time_steps).action

  def _actions_and_log_probs(self, time_steps, training=False):
    del training
    dist = self._distribution(time_steps)
    base = dist.input_distribution
    actions = squash(dist, base.loc + base.stddev() * state_noise(time_steps.observation,
                                                                  ACTION))
    return actions, dist.log_prob(actions)

  def _sample_and_transpose_actions_and_log_probs(self, time_steps, num_action_samples,
                                                  training=False):
    del training
    dist = self._distribution(time_steps)
    base = dist.input_distribution
    noise = tf.reshape(state_noise(time_steps.observation, num_action_samples * ACTION),
                       [-1, num_action_samples, ACTION])
    actions = squash(dist, base.loc[:, None] + base.stddev()[:, None] * noise)
    log_pi = tf.transpose(dist.log_prob(tf.transpose(actions, [1, 0, 2])))
    return actions, log_pi

  def _uniform_proposal(self, observation):
    unit = 0.5 * (state_noise(observation + 1.0, ACTION) + 1.0)
    return LOW + unit * (HIGH - LOW), -ACTION * np.log(HIGH - LOW)


def make_agent(agent_class=DeterministicCqlSac, **kwargs):
  """A small CQL-SAC agent on a 3-D observation and a 2-D action in [-2, 2]."""
  observation_spec = tensor_spec.TensorSpec((OBS,), tf.float32)
  action_spec = tensor_spec.BoundedTensorSpec((ACTION,), tf.float32, LOW, HIGH)
  actor, critic = sac.sac_networks(observation_spec, action_spec, (8,), (8,))
  settings = dict(cql_alpha=2.0, num_cql_samples=4, include_critic_entropy_term=False,
                  use_lagrange_cql_alpha=False, target_update_tau=0.1, gamma=0.9)
  settings.update(kwargs)
  agent = agent_class(
      ts.time_step_spec(observation_spec), action_spec, actor_network=actor,
      critic_network=critic, actor_optimizer=tf.keras.optimizers.SGD(0.05),
      critic_optimizer=tf.keras.optimizers.SGD(0.05),
      alpha_optimizer=tf.keras.optimizers.SGD(0.05),
      cql_alpha_learning_rate=0.05, train_step_counter=tf.Variable(0, dtype=tf.int64),
      **settings)
  agent.initialize()
  return agent


def test_conservative_gap_matches_numpy():
  rng = np.random.default_rng(0)
  q_samples, log_proposal = rng.normal(size=(5, 9)), rng.normal(size=(5, 9))
  q_data = rng.normal(size=5)
  for temperature in (1.0, 0.5):
    samples = q_samples * temperature - log_proposal
    expected = np.log(np.exp(samples).sum(axis=1)) / temperature - q_data
    got = cql_sac.conservative_gap(q_samples, log_proposal, q_data, temperature)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_the_term_is_the_weighted_mean_gap_of_both_critics_without_boundary_rows():
  # The numpy reference of the CQL authors' and d3rlpy's estimator: per critic, the
  # logsumexp over N uniform actions, N of the policy at s and N at s', each valued at s
  # less its proposal's log density, less Q(s, a_data); the critics' mean, boundary rows
  # (whose step is LAST) left out, weighted over the global batch.
  rng = np.random.default_rng(1)
  agent = make_agent()
  observations = rng.uniform(-1, 1, (6, OBS)).astype(np.float32)
  next_observations = rng.uniform(-1, 1, (6, OBS)).astype(np.float32)
  actions = rng.uniform(LOW, HIGH, (6, ACTION)).astype(np.float32)
  weights = np.array([1, 2, 1, 0.5, 1, 1], np.float32)
  first = np.array([1, 1, 2, 1, 1, 0], np.int32)  # row 2 is a boundary (LAST first)
  rows = transitions(observations, actions, first)
  rows = rows._replace(observation=np.stack([observations, next_observations], axis=1))
  experience = tf.nest.map_structure(tf.convert_to_tensor, rows)

  transition = agent._as_transition(experience)  # pylint: disable=protected-access
  time_steps, next_time_steps = transition.time_step, transition.next_time_step
  agent._cql_row_weights = weights  # pylint: disable=protected-access
  agent._cql_next_time_steps = next_time_steps  # pylint: disable=protected-access
  term = agent._cql_loss(time_steps, actions).numpy()  # pylint: disable=protected-access

  sample = agent._sample_and_transpose_actions_and_log_probs  # pylint: disable=protected-access
  policy_actions, log_pi = sample(time_steps, 4)
  next_actions, log_pi_next = sample(next_time_steps, 4)
  tiled = np.repeat(observations, 4, axis=0)
  uniform, log_uniform = agent._uniform_proposal(tiled)  # pylint: disable=protected-access
  gaps = []
  for critic in (agent._critic_network_1, agent._critic_network_2):  # pylint: disable=protected-access
    q = lambda o, a: critic((o, a))[0].numpy()
    q_policy = q(tiled, tf.reshape(policy_actions, [-1, ACTION])).reshape(6, 4)
    q_next = q(tiled, tf.reshape(next_actions, [-1, ACTION])).reshape(6, 4)
    q_uniform = q(tiled, uniform).reshape(6, 4)
    samples = np.concatenate([q_policy - log_pi.numpy(), q_next - log_pi_next.numpy(),
                              q_uniform - log_uniform], 1)
    gaps.append(np.log(np.exp(samples).sum(axis=1)) - q(observations, actions))
  gap = 0.5 * (gaps[0] + gaps[1]) * (first != 2)
  np.testing.assert_allclose(term, np.sum(gap * weights) / 6, rtol=1e-5)
  # The next state's samples differ from the current state's (the third proposal is
  # not the second again).
  assert not np.allclose(next_actions.numpy(), policy_actions.numpy())


def test_a_train_step_samples_the_policy_at_the_next_states():
  rng = np.random.default_rng(2)
  agent = make_agent()
  observations = rng.uniform(-1, 1, (4, OBS)).astype(np.float32)
  next_observations = rng.uniform(-1, 1, (4, OBS)).astype(np.float32)
  rows = transitions(observations, rng.uniform(LOW, HIGH, (4, ACTION)).astype(np.float32),
                     np.ones(4, np.int32))
  rows = rows._replace(observation=np.stack([observations, next_observations], axis=1))
  sampled_at = []
  sample = agent._sample_and_transpose_actions_and_log_probs  # pylint: disable=protected-access

  def recording_sample(time_steps, num, training=False):
    sampled_at.append(time_steps.observation.numpy())
    return sample(time_steps, num, training=training)

  agent._sample_and_transpose_actions_and_log_probs = recording_sample  # pylint: disable=protected-access
  agent._train(tf.nest.map_structure(tf.convert_to_tensor, rows), np.ones(4, np.float32))  # pylint: disable=protected-access

  assert any(np.array_equal(o, observations) for o in sampled_at)
  assert any(np.array_equal(o, next_observations) for o in sampled_at)
  assert agent._cql_next_time_steps is None  # pylint: disable=protected-access


def test_uniform_actions_cover_the_bounds_with_the_box_density():
  agent = make_agent(agent_class=cql_sac.CqlSacAgent)
  actions, log_density = agent._uniform_proposal(tf.zeros([20000, OBS]))  # pylint: disable=protected-access
  actions = actions.numpy()
  assert actions.shape == (20000, ACTION)
  assert actions.min() >= LOW and actions.max() < HIGH
  np.testing.assert_allclose(actions.mean(axis=0), 0.0, atol=0.05)
  # A 4 x 4 box: density 1/16, summed over the dimensions once.
  assert float(log_density) == pytest.approx(-ACTION * np.log(HIGH - LOW))


def test_behaviour_cloning_steps_clone_actions_at_the_bounds_then_maximize_q():
  rng = np.random.default_rng(3)
  agent = make_agent(num_bc_steps=1)
  observations = rng.uniform(-1, 1, (6, OBS)).astype(np.float32)
  time_steps = ts.TimeStep(tf.ones([6], tf.int32), tf.zeros([6]), tf.ones([6]),
                           tf.constant(observations))
  at_bounds = np.tile(np.array([[LOW, HIGH]], np.float32), (6, 1))
  inside = rng.uniform(LOW, HIGH, (6, ACTION)).astype(np.float32)

  # Cloning: SAC's entropy term less the log density of the data's action, pulled to
  # 0.995 of the half-range from the middle (a tanh-squashed actor gives the bounds none).
  dist, _ = agent._actor_network(time_steps.observation, time_steps.step_type, ())  # pylint: disable=protected-access
  _, log_pi = agent._actions_and_log_probs(time_steps)  # pylint: disable=protected-access
  alpha = np.exp(agent._log_alpha.numpy())  # pylint: disable=protected-access
  for actions in (at_bounds, inside):
    clipped = np.clip(actions, 0.995 * LOW, 0.995 * HIGH)
    expected = np.mean(alpha * log_pi.numpy() - dist.log_prob(clipped).numpy())
    got = float(agent.actor_loss(time_steps, tf.constant(actions)))
    assert np.isfinite(got)
    assert got == pytest.approx(expected, rel=1e-5)

  # After num_bc_steps the loss is SAC's: the data's actions play no part.
  agent.train_step_counter.assign(1)
  assert float(agent.actor_loss(time_steps, tf.constant(at_bounds))) == pytest.approx(
      float(agent.actor_loss(time_steps, tf.constant(inside))))


def test_create_cql_sac_agent_passes_the_cloning_steps():
  observation_spec = tensor_spec.TensorSpec((OBS,), tf.float32)
  action_spec = tensor_spec.BoundedTensorSpec((ACTION,), tf.float32, LOW, HIGH)
  agent = cql_sac.create_cql_sac_agent(ts.time_step_spec(observation_spec), action_spec,
                                       tf.Variable(0, dtype=tf.int64), num_bc_steps=7,
                                       actor_fc_layer_params=(8,),
                                       critic_joint_fc_layer_params=(8,))
  assert agent._num_bc_steps == 7  # pylint: disable=protected-access


def test_create_cql_sac_agent_targets_minus_the_action_dimensions_as_sac():
  observation_spec = tensor_spec.TensorSpec((OBS,), tf.float32)
  action_spec = tensor_spec.BoundedTensorSpec((ACTION,), tf.float32, LOW, HIGH)
  build = lambda **kwargs: cql_sac.create_cql_sac_agent(
      ts.time_step_spec(observation_spec), action_spec, tf.Variable(0, dtype=tf.int64),
      actor_fc_layer_params=(8,), critic_joint_fc_layer_params=(8,), **kwargs)
  assert build()._target_entropy == -float(ACTION)  # pylint: disable=protected-access
  assert build(target_entropy=-0.5)._target_entropy == -0.5  # pylint: disable=protected-access


_MIRRORED_SCRIPT = textwrap.dedent('''
    import json, sys
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, {tests!r})
    from test_bc import transitions
    from test_cql_sac import make_agent, OBS, ACTION, LOW, HIGH
    import strategy_runs

    B, STEPS = 8, 3
    rng = np.random.RandomState(0)
    rows = B * STEPS
    first = np.where(rng.rand(rows) < 0.25, 2, 1).astype(np.int32)  # some boundaries
    data = transitions(rng.uniform(-1, 1, (rows, OBS)).astype(np.float32),
                       rng.uniform(LOW, HIGH, (rows, ACTION)).astype(np.float32), first)
    data = data._replace(reward=rng.randn(rows, 2).astype(np.float32))
    weights = np.where(first == 2, 0.0, rng.uniform(0.5, 2, rows)).astype(np.float32)

    def train(strategy, lagrange):
      with strategy.scope():
        agent = make_agent(use_lagrange_cql_alpha=lagrange, cql_tau=0.5)
        init = np.random.RandomState(1)
        for v in agent.variables:
          if v.dtype == tf.float32 and v.shape.rank:
            v.assign(0.3 * init.randn(*v.shape).astype(np.float32))
      return strategy_runs.train_weighted_rows(agent, strategy, data, weights, B, STEPS)

    # One MirroredStrategy per process: a second one's collectives clash with the
    # first's (TensorFlow 2.15). The Lagrange form trains everything the fixed one does.
    print('RESULT ' + json.dumps(dict(
        default=train(distribute.get_strategy('default'), lagrange=True),
        mirrored=train(distribute.get_strategy('mirrored', devices=devices),
                       lagrange=True))))
''')


@pytest.mark.integration
def test_under_mirrored_strategy_it_trains_as_on_one_device():
  """Two replicas of half the batch each move every variable (critics, actor, SAC's
  temperature, the Lagrange multiplier) as one device with the whole batch does."""
  run = strategy_runs.run_result_script(
      _MIRRORED_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__))),
      timeout=300)
  np.testing.assert_allclose(run['mirrored']['losses'], run['default']['losses'], rtol=1e-4)
  assert len(run['default']['variables']) >= 13  # 2 critics, 2 targets, actor, 2 alphas
  for got, want in zip(run['mirrored']['variables'], run['default']['variables']):
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-5)

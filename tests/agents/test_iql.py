"""IQL (`tfrl.agents.iql`): its losses against a numpy reference, the order of its
updates, and training under MirroredStrategy exactly as on one device."""
import functools
import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from learners.configuration.experiment import Experiment
from tfrl.agents import iql
import strategy_runs  # tests/agents/strategy_runs.py
from test_bc import transitions  # tests/agents/test_bc.py

OBS, ACTION = 3, 2
LOW, HIGH = -2.0, 2.0
GAMMA, EXPECTILE, TEMPERATURE, MAX_WEIGHT, REWARD_SCALE = 0.9, 0.7, 3.0, 2.5, 0.5


def make_agent(**kwargs):
  """A small IQL agent on a 3-D observation and a 2-D action in [-2, 2] (Adam at 0.05
  unless its actor's rate decays)."""
  observation_spec = tensor_spec.TensorSpec((OBS,), tf.float32)
  action_spec = tensor_spec.BoundedTensorSpec((ACTION,), tf.float32, LOW, HIGH)
  settings = dict(gamma=GAMMA, actor_fc_layer_params=(8,),
                  critic_joint_fc_layer_params=(8,), value_fc_layer_params=(8,),
                  expectile=EXPECTILE, temperature=TEMPERATURE, max_weight=MAX_WEIGHT,
                  reward_scale_factor=REWARD_SCALE, target_update_tau=0.1)
  settings.update(kwargs)
  agent = iql.create_iql_agent(ts.time_step_spec(observation_spec), action_spec,
                               tf.Variable(0, dtype=tf.int64), **settings)
  if not kwargs.get('actor_decay_steps'):
    for optimizer in (agent._actor_optimizer, agent._critic_optimizer,  # pylint: disable=protected-access
                      agent._value_optimizer):  # pylint: disable=protected-access
      optimizer.learning_rate = 0.05
  return agent


def scramble(agent, seed):
  """Distinct random values in every variable (targets differ from the critics)."""
  rng = np.random.RandomState(seed)
  for v in agent.variables:
    if v.dtype == tf.float32 and v.shape.rank:
      v.assign(0.3 * rng.randn(*v.shape).astype(np.float32))


def rows(seed, n=6):
  """n transitions with distinct next observations, rewards and one terminal, and row
  weights with a boundary row (weight 0)."""
  rng = np.random.default_rng(seed)
  observations = rng.uniform(-1, 1, (n, OBS)).astype(np.float32)
  data = transitions(observations, rng.uniform(LOW, HIGH, (n, ACTION)).astype(np.float32),
                     np.ones(n, np.int32))
  discount = np.ones((n, 2), np.float32)
  discount[1, 0] = 0.0  # a terminal transition
  data = data._replace(
      observation=np.stack([observations, rng.uniform(-1, 1, (n, OBS))], 1).astype(np.float32),
      reward=rng.normal(size=(n, 2)).astype(np.float32), discount=discount)
  weights = np.ones(n, np.float32)
  weights[3] = 0.0
  return tf.nest.map_structure(tf.convert_to_tensor, data), weights


def test_expectile_loss_and_advantage_weights_match_numpy():
  difference = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32)
  np.testing.assert_allclose(iql.expectile_loss(difference, 0.7).numpy(),
                             [0.3 * 4, 0.3 * 0.25, 0.0, 0.7 * 0.25, 0.7 * 4], rtol=1e-6)
  q = np.array([0.0, 1.0, 5.0], np.float32)
  v = np.array([1.0, 1.0, 0.0], np.float32)
  np.testing.assert_allclose(iql.advantage_weights(q, v, 2.0, 100.0).numpy(),
                             [np.exp(-2.0), 1.0, 100.0], rtol=1e-6)


def test_losses_are_weighted_means_of_the_numpy_reference():
  agent = make_agent()
  scramble(agent, 0)
  experience, weights = rows(1)
  loss = agent._loss(experience, weights)  # pylint: disable=protected-access

  s, s_next = experience.observation[:, 0], experience.observation[:, 1]
  a = experience.action[:, 0]
  step = experience.step_type[:, 0]
  call = lambda net, *x: net(*x, step_type=step, training=False)[0].numpy()
  value = lambda obs: call(agent._value_network, obs)  # pylint: disable=protected-access
  target_q = np.minimum(call(agent._target_critic_network_1, (s, a)),  # pylint: disable=protected-access
                        call(agent._target_critic_network_2, (s, a)))  # pylint: disable=protected-access
  difference = target_q - value(s)
  mean = lambda x: np.sum(weights * x) / len(weights)
  value_loss = mean(np.where(difference < 0, 1 - EXPECTILE, EXPECTILE) * difference ** 2)
  awr = np.minimum(np.exp(TEMPERATURE * difference), MAX_WEIGHT)
  log_pi = agent._actor_network(s, step, ())[0].log_prob(a).numpy()  # pylint: disable=protected-access
  actor_loss = mean(-awr * log_pi)
  td = (REWARD_SCALE * experience.reward[:, 0].numpy()
        + GAMMA * experience.discount[:, 0].numpy() * value(s_next))
  critic_loss = sum(mean((call(critic, (s, a)) - td) ** 2)
                    for critic in (agent._critic_network_1, agent._critic_network_2))  # pylint: disable=protected-access

  assert np.any(awr == MAX_WEIGHT) and np.any(awr < MAX_WEIGHT)  # the cap is exercised
  assert float(loss.extra['value_loss']) == pytest.approx(value_loss, rel=1e-5)
  assert float(loss.extra['actor_loss']) == pytest.approx(actor_loss, rel=1e-5)
  assert float(loss.extra['critic_loss']) == pytest.approx(critic_loss, rel=1e-5)


def test_a_train_step_moves_v_first_and_the_critics_towards_the_new_v():
  agent = make_agent()
  scramble(agent, 2)
  experience, weights = rows(3)
  before = [v.numpy() for v in agent.variables]
  old_value_loss = float(agent._loss(experience, weights).extra['value_loss'])  # pylint: disable=protected-access
  trained = agent._train(experience, weights)  # pylint: disable=protected-access
  assert int(agent.train_step_counter) == 1
  value_variables = {id(v) for v in agent._value_network.variables}  # pylint: disable=protected-access
  # Everything as before the step, except V as the step left it.
  for v, old in zip(agent.variables, before):
    if id(v) not in value_variables:
      v.assign(old)
  assert float(trained.extra['value_loss']) == pytest.approx(old_value_loss, rel=1e-6)
  with_new_v = agent._loss(experience, weights)  # pylint: disable=protected-access
  assert float(trained.extra['critic_loss']) == pytest.approx(
      float(with_new_v.extra['critic_loss']), rel=1e-5)
  assert float(trained.extra['actor_loss']) == pytest.approx(
      float(with_new_v.extra['actor_loss']), rel=1e-5)
  # ...and not from the V before the step (the value step moved it).
  for v, old in zip(agent.variables, before):
    v.assign(old)
  with_old_v = agent._loss(experience, weights)  # pylint: disable=protected-access
  assert float(with_old_v.extra['critic_loss']) != pytest.approx(
      float(trained.extra['critic_loss']), rel=1e-3)


_MIRRORED_SCRIPT = textwrap.dedent('''
    import json, sys
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, {tests!r})
    from test_iql import make_agent, scramble, rows
    import strategy_runs

    B, STEPS = 6, 3
    parts = [rows(seed) for seed in range(STEPS)]
    data = tf.nest.map_structure(lambda *x: tf.concat(x, 0), *[p[0] for p in parts])
    weights = np.concatenate([p[1] for p in parts])

    def train(strategy):
      with strategy.scope():
        agent = make_agent()
        scramble(agent, 1)
      return strategy_runs.train_weighted_rows(agent, strategy, data, weights, B, STEPS)

    print('RESULT ' + json.dumps(dict(
        default=train(distribute.get_strategy('default')),
        mirrored=train(distribute.get_strategy('mirrored', devices=devices)))))
''')


@pytest.mark.integration
def test_under_mirrored_strategy_it_trains_as_on_one_device():
  """Two replicas of half the batch each move every variable (V, both critics, their
  targets, the actor) as one device with the whole batch does."""
  run = strategy_runs.run_result_script(
      _MIRRORED_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__))),
      timeout=300)
  np.testing.assert_allclose(run['mirrored']['losses'], run['default']['losses'], rtol=1e-4)
  assert len(run['default']['variables']) >= 15
  for got, want in zip(run['mirrored']['variables'], run['default']['variables']):
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-5)


def actor_rate(agent, step: int) -> float:
  schedule = agent._actor_optimizer._learning_rate  # pylint: disable=protected-access
  return float(schedule(step)) if callable(schedule) else float(schedule)


def test_the_actors_rate_anneals_to_zero_over_the_jobs_run():
  """actor_decay_steps = 'run' anneals over the job's num_train_steps (which Experiment
  passes); a number anneals over that many steps; None keeps the rate."""
  exp = Experiment(env_name='Pendulum-v1', num_envs=1, num_train_steps=1234,
                   agent_fn=functools.partial(iql.create_iql_agent, actor_decay_steps='run',
                                              actor_learning_rate=1e-3))
  _, agent = exp.build_agent()
  assert actor_rate(agent, 0) == pytest.approx(1e-3)
  assert actor_rate(agent, 617) == pytest.approx(0.5e-3, rel=1e-3)  # a cosine's midpoint
  assert actor_rate(agent, 1234) == pytest.approx(0.0, abs=1e-9)
  fixed = make_agent(actor_decay_steps=100, actor_learning_rate=1e-3)
  assert actor_rate(fixed, 100) == pytest.approx(0.0, abs=1e-9)
  constant = make_agent()
  assert actor_rate(constant, 10**6) == pytest.approx(0.05)


def test_a_run_long_decay_needs_the_run():
  with pytest.raises(ValueError, match=r"actor_decay_steps = 'run': give a number"):
    make_agent(actor_decay_steps='run')
  with pytest.raises(ValueError, match=r"actor_decay_steps = 'walk'"):
    make_agent(actor_decay_steps='walk', num_train_steps=10)

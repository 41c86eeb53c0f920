"""CLEAR's details in tfrl.agents.impala: the paper's cloning costs by default, a maximum
policy lag spares replayed rows, and recurrent replayed unrolls burn in (R2D2) before
their loss.

References are the agent's own loss on the data a faithful implementation trains on
(the rows the lag keeps; the unroll after the burn-in, started from the state an LSTM
stepped one step at a time reaches), so what is checked is the masking and the state.
"""
# pylint: disable=protected-access
# (the tests share one network between agents, and read it, to compare them)
import functools

import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from learners import train_eval
from learners.configuration.experiment import Experiment
from tfrl import learner as learner_lib
from tfrl.agents import clear
from tfrl.agents import impala
from tfrl.networks import actor_critic

import unrolls  # tests/agents/unrolls.py

FIRST, MID, LAST = int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST)
T = 6
BURN_IN = 2
LSTM = 8
# Row 1's episode ends after the burn-in window, row 2's inside it.
STEP_TYPES = [[FIRST, MID, MID, MID, MID, MID, MID],
              [MID, MID, MID, LAST, FIRST, MID, MID],
              [MID, LAST, FIRST, MID, MID, MID, MID]]
DISCOUNTS = [[1, 1, 1, 1, 1, 1, 1],
             [1, 1, 0, 1, 1, 1, 1],
             [0, 1, 1, 1, 1, 1, 1]]
COSTS = dict(policy_cloning_cost=0.3, value_cloning_cost=0.2)


def make_agent(specs, network=None, **kwargs):
  time_step_spec, action_spec = specs
  if network is None:
    network = actor_critic.ActorCriticNetwork(time_step_spec.observation, action_spec,
                                              (16,), lstm_size=kwargs.pop('lstm', None))
  train_step = kwargs.pop('train_step', None) or learner_lib.new_train_step()
  return impala.ImpalaAgent(time_step_spec, action_spec, network,
                            tf.keras.optimizers.SGD(0.1), train_step, gamma=0.9, **kwargs)


def cloning_costs(agent):
  return agent._policy_cloning_cost, agent._value_cloning_cost


def test_clear_clones_with_the_papers_costs_and_impala_not_at_all(specs):
  build = lambda builder: builder(*specs, learner_lib.new_train_step(), fc_layer_params=(8,))
  agent = build(clear.create_clear_agent)
  assert cloning_costs(agent) == (0.01, 0.005)  # Rolnick et al. 2019
  assert 'replay_mask' in agent.train_inputs
  assert cloning_costs(build(impala.create_impala_agent)) == (0.0, 0.0)


def test_clear_cloning_costs_bind_on_create_clear_agent_not_on_impala(specs):
  build = lambda: clear.create_clear_agent(*specs, learner_lib.new_train_step(),
                                           fc_layer_params=(8,))
  gin.bind_parameter('create_clear_agent.policy_cloning_cost', 0.02)
  assert cloning_costs(build()) == (0.02, 0.005)
  # CLEAR passes its own costs down, so a binding below it would never apply: refused.
  for where in ('create_impala_agent', 'ImpalaAgent'):
    gin.bind_parameter(f'{where}.value_cloning_cost', 0.5)
    with pytest.raises(ValueError, match=rf'{where}\.value_cloning_cost is bound.*'
                                         r'create_clear_agent\.value_cloning_cost'):
      build()
    gin.clear_config()


def take(traj, rows=slice(None), steps=slice(None)):
  return tf.nest.map_structure(lambda x: x[rows, steps], traj)


def loss_and_gradients(agent, traj, **kwargs):
  """(total and every loss term, gradients) of `agent.loss` on numpy `traj`."""
  with tf.GradientTape() as tape:
    info = agent.loss(unrolls.tensors(traj), **kwargs)
  gradients = tape.gradient(info.loss, agent._network.trainable_variables)
  extra = info.extra
  values = np.array([float(x) for x in (info.loss, extra.policy_loss, extra.baseline_loss,
                                        extra.entropy_loss, extra.policy_cloning_loss,
                                        extra.value_cloning_loss)])
  return values, [g.numpy() for g in gradients]


def assert_same(a, b, rtol=1e-5, atol=1e-6):
  np.testing.assert_allclose(a[0], b[0], rtol, atol)
  for x, y in zip(a[1], b[1]):
    np.testing.assert_allclose(x, y, rtol, atol)


@pytest.fixture
def recurrent(specs):
  """(burn-in agent, plain agent on the same network, unrolls, stored states)."""
  burn = make_agent(specs, lstm=LSTM, replay_burn_in_steps=BURN_IN, **COSTS)
  plain = make_agent(specs, network=burn._network, **COSTS)
  traj = unrolls.make(STEP_TYPES, DISCOUNTS, seed=3)
  rng = np.random.RandomState(4)
  state = tuple(tf.constant(rng.randn(3, LSTM).astype(np.float32)) for _ in range(2))
  return burn, plain, traj, state


# -- max_policy_lag with CLEAR --------------------------------------------------------

def test_max_policy_lag_drops_stale_fresh_rows_and_keeps_replayed_ones(specs):
  train_step = learner_lib.new_train_step()
  train_step.assign(10)
  agent = make_agent(specs, train_step=train_step, max_policy_lag=2, **COSTS)
  traj = unrolls.make(STEP_TYPES, DISCOUNTS)
  # Row 0 fresh (lag 0), row 1 fresh and stale (lag 5), row 2 replayed (lag 8).
  versions = np.repeat(np.array([[10], [5], [2]], np.int64), T + 1, 1)
  mask = np.array([0.0, 0.0, 1.0], np.float32)
  got = loss_and_gradients(agent, traj, policy_version=versions, replay_mask=mask)
  # The rows it keeps, with no lag at all: the stale fresh row left out, the replayed
  # row in V-trace and in cloning.
  no_lag = make_agent(specs, network=agent._network, **COSTS)
  kept = loss_and_gradients(no_lag, take(traj, [0, 2]), replay_mask=mask[[0, 2]])
  assert kept[0][4] > 1e-3 and kept[0][5] > 1e-3  # the replayed row is cloned
  assert_same(got, kept)
  valid = (np.array(STEP_TYPES)[:, :-1] != LAST).sum(1)  # [6, 5, 5]
  info = agent.loss(unrolls.tensors(traj), policy_version=versions, replay_mask=mask)
  np.testing.assert_allclose(float(info.extra.fraction_dropped), valid[1] / valid.sum())
  # Without the mask every row counts as fresh (APPO): the replayed row goes as well.
  appo = agent.loss(unrolls.tensors(traj), policy_version=versions)
  np.testing.assert_allclose(float(appo.extra.fraction_dropped),
                             (valid[1] + valid[2]) / valid.sum())


def test_sequence_replay_refuses_a_lag_that_cannot_see_the_replay_mask():
  def experiment(**kwargs):
    return Experiment(env_name='CartPole-v1', num_envs=4, batch_size=8,
                      layout_settings=dict(replay_fraction=0.5), agent_fn=functools.partial(
                          clear.create_clear_agent, fc_layer_params=(8,), **kwargs))
  with pytest.raises(ValueError, match="max_policy_lag would drop the replayed unrolls "
                     r"of the SequenceQueueAndReplay layout"):
    experiment(max_policy_lag=5, policy_cloning_cost=0.0,
               value_cloning_cost=0.0).build_agent()
  _, agent = experiment(max_policy_lag=5).build_agent()  # the paper's costs: the mask
  assert set(agent.train_inputs) == {'replay_mask', 'policy_version'}


# -- Replay burn-in -------------------------------------------------------------------

def test_replayed_rows_train_on_the_steps_after_the_burn_in_from_the_refreshed_state(
    recurrent):
  burn, plain, traj, state = recurrent
  network = burn._network
  # The state after the burn-in: the LSTM stepped one step at a time from the stored
  # state (resetting at FIRST) over the first BURN_IN steps.
  refreshed = state
  for t in range(BURN_IN):
    _, refreshed = network(tf.constant(traj.observation[:, t]),
                           tf.constant(traj.step_type[:, t]), refreshed)
  assert not np.allclose(refreshed[0], state[0])
  ones = np.ones(3, np.float32)
  got = loss_and_gradients(burn, traj, replay_mask=ones, policy_state=state)
  # The unroll without its first BURN_IN steps, started from that state (a constant:
  # no gradient reaches the burn-in), with no burn-in of its own.
  expected = loss_and_gradients(plain, take(traj, steps=slice(BURN_IN, None)),
                                replay_mask=ones, policy_state=refreshed)
  assert_same(got, expected)
  # Not the unroll from the stale stored state.
  stale = loss_and_gradients(plain, take(traj, steps=slice(BURN_IN, None)),
                             replay_mask=ones, policy_state=state)
  assert abs(stale[0][0] - got[0][0]) > 1e-4


def test_the_burn_in_window_of_replayed_rows_adds_nothing_to_the_loss(recurrent):
  burn, _, traj, state = recurrent
  mask = np.array([1.0, 0.0, 1.0], np.float32)  # rows 0 and 2 replayed
  base = loss_and_gradients(burn, traj, replay_mask=mask, policy_state=state)
  rng = np.random.RandomState(5)

  def perturbed(row, steps=slice(None, BURN_IN), observation=False):
    """`traj` with new rewards, actions and behaviour outputs at `steps` of `row`."""
    new = tf.nest.map_structure(np.copy, traj)
    new.reward[row, steps] += 3.0
    new.action[row, steps] = 1 - new.action[row, steps]
    new.policy_info['logits'][row, steps] += rng.randn(2).astype(np.float32)
    new.policy_info['value'][row, steps] += 2.0
    if observation:
      new.observation[row, steps] += 1.0
    return loss_and_gradients(burn, new, replay_mask=mask, policy_state=state)

  for row in (0, 2):
    assert_same(perturbed(row), base)
  # The same change in the fresh row, or just after the window, changes the loss; and
  # the window's observations do (they make the state).
  for changed in (perturbed(1), perturbed(0, slice(BURN_IN, BURN_IN + 1)),
                  perturbed(0, observation=True)):
    assert abs(changed[0][0] - base[0][0]) > 1e-4


def test_fresh_rows_train_on_every_step_as_without_burn_in(recurrent):
  burn, plain, traj, state = recurrent
  zeros = np.zeros(3, np.float32)
  assert_same(loss_and_gradients(burn, traj, replay_mask=zeros, policy_state=state),
              loss_and_gradients(plain, traj, replay_mask=zeros, policy_state=state))


def test_burn_in_settings_are_checked(specs, recurrent):
  burn, _, traj, state = recurrent
  assert set(burn.train_inputs) == {'replay_mask', 'policy_state'}
  assert 'replay_mask' not in make_agent(specs, lstm=LSTM).train_inputs
  with pytest.raises(ValueError, match='replay_burn_in_steps=2 refreshes an LSTM state'):
    make_agent(specs, replay_burn_in_steps=2)
  with pytest.raises(ValueError, match='replay_burn_in_steps must be >= 0'):
    make_agent(specs, lstm=LSTM, replay_burn_in_steps=-1)
  with pytest.raises(ValueError, match="'replay_mask' input"):
    burn.loss(unrolls.tensors(traj), policy_state=state)
  whole = make_agent(specs, network=burn._network, replay_burn_in_steps=T)
  with pytest.raises(ValueError, match='replay_burn_in_steps=6 leaves no step to train'):
    whole.loss(unrolls.tensors(traj), replay_mask=np.ones(3, np.float32),
               policy_state=state)
  sequence = Experiment(env_name='CartPole-v1', num_envs=4, batch_size=4,
                        agent_fn=functools.partial(
                            impala.create_impala_agent, fc_layer_params=(8,),
                            lstm_size=LSTM, replay_burn_in_steps=2))
  with pytest.raises(ValueError, match=r"\['replay_mask'\].*replay_burn_in_steps to 0"):
    sequence.build_agent()


@pytest.mark.integration
def test_clear_lstm_config_trains_briefly(tmp_path):
  result = train_eval.run(
      str(tmp_path / 'run'), ['clear_lstm_cartpole_masked.gin'], num_train_steps=4,
      train_steps_per_iteration=2, collect_steps_per_iteration=16, eval_interval=4,
      num_eval_episodes=1, target_return=None, checkpoint_interval=4,
      policy_checkpoint_interval=4, summary_interval=0)
  assert result['train_step'] == 4
  assert gin.query_parameter('ImpalaAgent.replay_burn_in_steps') == 4

"""The agent protocol (`tfrl.agents.interface`): what an agent declares is checked when
a job builds it, so a misspelt or impossible declaration is an error that names it
rather than a feature silently left off (a misspelt `train_inputs` used to switch
CLEAR's cloning off without a word)."""
import functools

import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network

import tfrl.envs
from tfrl import layouts
from tfrl.agents import clear
from tfrl.agents import dqn
from tfrl.agents import hyperparameters
from tfrl.agents import impala
from tfrl.agents import interface
from tfrl.agents import ppo
from tfrl.agents import sac
from learners.configuration.experiment import Experiment


@pytest.fixture(scope='module')
def cartpole():
  env = tfrl.envs.make('CartPole-v1', num_envs=1)
  yield env.time_step_spec(), env.action_spec()
  env.close()


def tf_agents_dqn(time_step_spec, action_spec, train_step, gamma=0.99, cls=None):
  """A plain tf-agents DqnAgent, or `cls` (a subclass) built the same way."""
  network = q_network.QNetwork(time_step_spec.observation, action_spec,
                               fc_layer_params=(8,))
  return (cls or dqn_agent.DqnAgent)(time_step_spec, action_spec, network,
                                     tf.keras.optimizers.Adam(1e-3),
                                     train_step_counter=train_step, gamma=gamma)


class MisspeltInputs(dqn_agent.DqnAgent):
  train_input = ('replay_mask',)  # the declaration is `train_inputs`


class UnknownInput(dqn_agent.DqnAgent):
  train_inputs = ('replay_masks',)


class InputTrainDoesNotTake(dqn_agent.DqnAgent):
  train_inputs = ('policy_version',)  # DqnAgent._train(experience, weights) only


class OnPolicyNotABool(dqn_agent.DqnAgent):
  on_policy = 'yes'


class HyperparametersAsADict(dqn_agent.DqnAgent):
  hyperparameters = {'learning_rate': 1e-3}  # read from variables, or not at all


@pytest.mark.parametrize('cls, message', [
    (MisspeltInputs, "MisspeltInputs defines 'train_input', which tfrl does not read; did "
                     "you mean 'train_inputs'?"),
    (UnknownInput, "UnknownInput.train_inputs names 'replay_masks', which no data layout "
                   'supplies (they supply: policy_version, policy_state, replay_mask).'),
    (InputTrainDoesNotTake, "InputTrainDoesNotTake.train_inputs names 'policy_version', "
                            "but InputTrainDoesNotTake._train has no parameter"),
    (OnPolicyNotABool, "OnPolicyNotABool.on_policy must be True or False, got 'yes'."),
    (HyperparametersAsADict, 'HyperparametersAsADict.hyperparameters must be a tfrl.agents.'
                             'hyperparameters.Hyperparameters'),
], ids=['misspelt', 'unknown', 'not_taken', 'on_policy', 'hyperparameters'])
def test_a_wrong_declaration_is_an_error_naming_it(cartpole, cls, message):
  agent = tf_agents_dqn(*cartpole, tf.Variable(0, dtype=tf.int64), cls=cls)
  with pytest.raises(interface.AgentProtocolError) as raised:
    interface.check_agent(agent)
  assert str(raised.value).startswith(message)


def test_a_job_checks_the_protocol_when_it_builds_the_agent():
  builder = interface.trains_from(layouts.TransitionReplay)(
      functools.partial(tf_agents_dqn, cls=MisspeltInputs))
  with pytest.raises(interface.AgentProtocolError, match="'train_input'"):
    Experiment(agent_fn=builder, num_envs=2, batch_size=2).build_agent()


def test_tfrls_agents_and_a_plain_tf_agents_agent_pass(cartpole):
  step = tf.Variable(0, dtype=tf.int64)
  agents = [tf_agents_dqn(*cartpole, step),
            dqn.create_dqn_agent(*cartpole, step),
            ppo.create_ppo_agent(*cartpole, step, lstm_size=8),
            clear.create_clear_agent(*cartpole, step, policy_cloning_cost=0.1,
                                      max_policy_lag=4)]
  for agent in agents:
    interface.check_agent(agent)
  pendulum = tfrl.envs.make('Pendulum-v1', num_envs=1)
  interface.check_agent(sac.create_sac_agent(pendulum.time_step_spec(),
                                             pendulum.action_spec(), step))
  pendulum.close()


def test_a_plain_tf_agents_agent_offers_its_learning_rate(cartpole):
  """Population-based training can change a plain agent's rate: its optimizer's own
  variable, so the optimizer (and its checkpoint) sees the change."""
  agent = tf_agents_dqn(*cartpole, tf.Variable(0, dtype=tf.int64))
  found = hyperparameters.of(agent)
  assert found.names == ('learning_rate',)
  found.assign({'learning_rate': 0.25})
  assert float(agent._optimizer.learning_rate.numpy()) == 0.25  # pylint: disable=protected-access
  own = dqn.create_dqn_agent(*cartpole, tf.Variable(0, dtype=tf.int64))
  assert hyperparameters.of(own) is own.hyperparameters


def test_builders_name_their_layout():
  assert interface.layout_of(dqn.create_dqn_agent) is layouts.TransitionReplay
  assert interface.layout_of(sac.create_sac_agent) is layouts.TransitionReplay
  assert interface.layout_of(ppo.create_ppo_agent) is layouts.SequenceQueue
  assert interface.layout_of(impala.create_impala_agent) is layouts.SequenceQueue
  assert interface.layout_of(functools.partial(clear.create_clear_agent, lstm_size=8)
                             ) is layouts.SequenceQueueAndReplay
  with pytest.raises(interface.AgentProtocolError,
                     match='The agent builder tf_agents_dqn names no data layout'):
    interface.layout_of(tf_agents_dqn)


def test_a_builder_is_offered_only_the_job_settings_it_declares():
  """`dataset_dir=` and `num_train_steps=` reach builders that declare it, through gin's wrapper and a
  functools.partial, and no other builder (whose call it would break)."""
  from tfrl.agents import iql  # pylint: disable=g-import-not-at-top
  offered = dict(dataset_dir='/data', num_train_steps=10, unknown=1)
  wanted = {'dataset_dir': '/data', 'num_train_steps': 10}
  assert interface.offered_kwargs(iql.create_iql_agent, **offered) == wanted
  assert interface.offered_kwargs(
      functools.partial(iql.create_iql_agent, expectile=0.9), **offered) == wanted
  assert interface.offered_kwargs(dqn.create_dqn_agent, **offered) == {}
  assert interface.offered_kwargs(tf_agents_dqn, **offered) == {}

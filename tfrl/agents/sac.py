"""SAC from tf-agents, for continuous (Box) actions, configured for tfrl's transitions.

Items are n-step transitions as 2-step Trajectories (see `tfrl.agents.dqn`); with
n = 1 they are exactly what SacAgent trains on. Boundary rows get weight 0 (the
transition layout's train inputs pass `weights`: tfrl/layouts/transition.py), which
SacAgent honours.

What a population may change while SAC trains (`SacAgent.hyperparameters`): the three
Adam rates (`actor_learning_rate`, `critic_learning_rate`, `alpha_learning_rate`, alpha
being SAC's entropy temperature, which SAC learns rather than fixes) and the discount
`gamma`.

The entropy target defaults to -dim(A), the SAC paper's (Haarnoja et al. 2018, "Soft
Actor-Critic Algorithms and Applications") and SB3's 'auto'; tf-agents' own default is
-dim(A)/2 (`sac_target_entropy`).
"""
from typing import Optional, Sequence

import gin
import tensorflow as tf
from tf_agents.agents.ddpg import critic_network
from tf_agents.agents.sac import sac_agent
from tf_agents.agents.sac import tanh_normal_projection_network
from tf_agents.networks import actor_distribution_network

from tfrl import layouts
from tfrl.agents import hyperparameters as hyperparameters_lib
from tfrl.agents import interface
from tfrl.networks import critics

# SAC's optimizers, by the part of the agent each trains (`_<part>_optimizer`).
_PARTS = ('actor', 'critic', 'alpha')


def sac_hyperparameters(agent: sac_agent.SacAgent) -> hyperparameters_lib.Hyperparameters:
  """Makes a built SAC agent's (or a subclass's, CQL-SAC's) learning rates and discount
  changeable while it trains, and returns them.

  The rates are the optimizers' own variables (`hyperparameters.rate_of`, which creates
  a legacy optimizer's now); the discount, a float tf-agents reads when it traces the
  critic loss, becomes a variable kept out of the agent's checkpoint (the Learner saves
  it with the hyperparameters), so a checkpoint written before still matches the agent.

  Args:
    agent: the agent, built inside the distribution strategy's scope.

  Returns:
    {part}_learning_rate for each optimizer with a constant rate, and gamma.
  """
  # pylint: disable=protected-access
  agent._gamma = agent._no_dependency(
      hyperparameters_lib.tunable_variable(float(agent._gamma), 'gamma'))
  rates = {f'{part}_learning_rate': hyperparameters_lib.rate_of(
      getattr(agent, f'_{part}_optimizer')) for part in _PARTS}
  return hyperparameters_lib.Hyperparameters(
      **{name: rate for name, rate in rates.items() if rate is not None},
      gamma=agent._gamma)


def sac_target_entropy(action_spec, target_entropy: Optional[float] = None) -> float:
  """The entropy SAC's temperature steers the policy towards (SAC and CQL-SAC builders).

  Args:
    action_spec: the agent's (nest of) Box action specs.
    target_entropy: an explicit target, kept as given; None for the default.

  Returns:
    `target_entropy`, or minus the number of action dimensions (-dim(A), as the SAC
    paper, SB3's 'auto' and the CQL authors' code set it; tf-agents' default is half
    of it, a higher target that keeps the policy more random).
  """
  if target_entropy is not None:
    return float(target_entropy)
  return -float(sum(tf.TensorShape(spec.shape).num_elements()
                    for spec in tf.nest.flatten(action_spec)))


class SacAgent(sac_agent.SacAgent):
  """tf-agents' SacAgent with the hyperparameters a population may change."""

  def __init__(self, *args, **kwargs):
    """Args: those of tf-agents' `SacAgent`."""
    super().__init__(*args, **kwargs)
    self._hyperparameters = hyperparameters_lib.untracked(self, sac_hyperparameters(self))

  @property
  def hyperparameters(self) -> hyperparameters_lib.Hyperparameters:
    """What population-based training may change (see the module docstring)."""
    return self._hyperparameters


def sac_networks(observation_spec, action_spec, actor_fc_layer_params: Sequence[int],
                 critic_joint_fc_layer_params: Sequence[int],
                 critic_layer_norm: bool = False):
  """SAC's actor (a tanh-squashed Gaussian) and critic (Q of the observation and
  action concatenated) for flat observations.

  Args:
    observation_spec, action_spec: flat observations, Box actions.
    actor_fc_layer_params, critic_joint_fc_layer_params: hidden layer widths.
    critic_layer_norm: layer-normalize the critic's hidden layers (RLPD's critic,
      `tfrl.networks.critics.LayerNormCritic`), for learning from offline data.

  Returns:
    (actor network, critic network); the agent copies the critic for its twin and
    targets.
  """
  actor = actor_distribution_network.ActorDistributionNetwork(
      observation_spec, action_spec, fc_layer_params=tuple(actor_fc_layer_params),
      continuous_projection_net=tanh_normal_projection_network.TanhNormalProjectionNetwork)
  if critic_layer_norm:
    return actor, critics.LayerNormCritic((observation_spec, action_spec),
                                          tuple(critic_joint_fc_layer_params))
  critic = critic_network.CriticNetwork(
      (observation_spec, action_spec), observation_fc_layer_params=None,
      action_fc_layer_params=None,
      joint_fc_layer_params=tuple(critic_joint_fc_layer_params),
      kernel_initializer='glorot_uniform', last_kernel_initializer='glorot_uniform')
  return actor, critic


@gin.configurable
@interface.trains_from(layouts.TransitionReplay)
@interface.acts_in('continuous')
@interface.tunable('actor_learning_rate', 'critic_learning_rate', 'alpha_learning_rate',
                   'gamma')
def create_sac_agent(time_step_spec, action_spec, train_step: tf.Variable,
                     gamma: float = 0.99,
                     actor_fc_layer_params: Sequence[int] = (256, 256),
                     critic_joint_fc_layer_params: Sequence[int] = (256, 256),
                     actor_learning_rate: float = 3e-4,
                     critic_learning_rate: float = 3e-4,
                     alpha_learning_rate: float = 3e-4,
                     target_update_tau: float = 0.005,
                     target_update_period: int = 1,
                     reward_scale_factor: float = 1.0,
                     critic_layer_norm: bool = False,
                     target_entropy: Optional[float] = None) -> SacAgent:
  """Returns an initialized SacAgent with tanh-squashed Gaussian actor.

  Args:
    time_step_spec, action_spec: the environment's specs (Box actions).
    train_step: the learner's step variable.
    gamma: the discount.
    actor_fc_layer_params, critic_joint_fc_layer_params: hidden layer sizes.
    actor_learning_rate, critic_learning_rate, alpha_learning_rate: Adam's rates.
    target_update_tau, target_update_period: soft target updates.
    reward_scale_factor: multiplies rewards.
    critic_layer_norm: RLPD's layer-normalized critic (see `sac_networks`).
    target_entropy: the policy entropy the temperature alpha is tuned towards; None:
      -dim(A), minus the number of action dimensions (`sac_target_entropy`).

  Returns:
    The agent.
  """
  actor, critic = sac_networks(time_step_spec.observation, action_spec,
                               actor_fc_layer_params, critic_joint_fc_layer_params,
                               critic_layer_norm)
  agent = SacAgent(
      time_step_spec, action_spec, actor_network=actor, critic_network=critic,
      actor_optimizer=tf.keras.optimizers.Adam(actor_learning_rate),
      critic_optimizer=tf.keras.optimizers.Adam(critic_learning_rate),
      alpha_optimizer=tf.keras.optimizers.Adam(alpha_learning_rate),
      target_update_tau=target_update_tau, target_update_period=target_update_period,
      td_errors_loss_fn=tf.math.squared_difference, gamma=gamma,
      reward_scale_factor=reward_scale_factor,
      target_entropy=sac_target_entropy(action_spec, target_entropy),
      train_step_counter=train_step)
  agent.initialize()
  return agent

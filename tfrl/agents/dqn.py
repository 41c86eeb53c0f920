"""DQN agents from tf-agents, configured for tfrl's n-step transition items.

`NStepTransitionWriter(n, discount=gamma)` stores each n-step transition as a 2-step
Trajectory whose reward already sums the n discounted rewards and whose discount is
gamma^(k-1) * d. A DqnAgent with `n_step_update=1` and the same gamma therefore
computes the exact n-step target; do not also set the agent's n_step_update.
"""
from typing import Sequence

import gin
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.utils import common


@gin.configurable
def create_dqn_agent(time_step_spec,
                     action_spec,
                     train_step: tf.Variable,
                     fc_layer_params: Sequence[int] = (100,),
                     learning_rate: float = 1e-3,
                     gamma: float = 0.99,
                     double_q: bool = True,
                     target_update_period: int = 100,
                     target_update_tau: float = 1.0,
                     epsilon_start: float = 1.0,
                     epsilon_end: float = 0.05,
                     epsilon_decay_steps: int = 5000,
                     gradient_clipping: float = None) -> dqn_agent.DqnAgent:
  """Returns an initialized (Double) DQN agent with a fully connected Q-network.

  Args:
    time_step_spec, action_spec: from the environment.
    train_step: the learner's step variable (the agent increments it).
    fc_layer_params: hidden layer sizes of the Q-network.
    learning_rate: Adam's learning rate.
    gamma: discount; must equal the writer's `discount`.
    double_q: use Double DQN targets.
    target_update_period: train steps between target network updates.
    target_update_tau: 1.0 copies; < 1 moves the target that fraction of the way.
    epsilon_start, epsilon_end, epsilon_decay_steps: the collect policy's exploration
      falls linearly from start to end over the first decay steps (in train steps).
    gradient_clipping: clip each gradient's norm to this value (None: no clipping).

  Returns:
    A `DqnAgent` (or `DdqnAgent`).
  """
  network = q_network.QNetwork(time_step_spec.observation, action_spec,
                               fc_layer_params=tuple(fc_layer_params))

  def epsilon():
    fraction = tf.minimum(tf.cast(train_step, tf.float32) / float(epsilon_decay_steps), 1.0)
    return epsilon_start + fraction * (epsilon_end - epsilon_start)

  agent_class = dqn_agent.DdqnAgent if double_q else dqn_agent.DqnAgent
  agent = agent_class(
      time_step_spec, action_spec,
      q_network=network,
      optimizer=tf.keras.optimizers.Adam(learning_rate),
      epsilon_greedy=epsilon,
      gamma=gamma,
      target_update_period=target_update_period,
      target_update_tau=target_update_tau,
      td_errors_loss_fn=common.element_wise_huber_loss,
      gradient_clipping=gradient_clipping,
      train_step_counter=train_step)
  agent.initialize()
  return agent

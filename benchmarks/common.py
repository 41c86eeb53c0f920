"""What the benchmarks share: the DQN agent every path runs, and load readings."""
import os

import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network


def make_dqn_agent(time_step_spec, action_spec, seed: int) -> dqn_agent.DqnAgent:
  """The benchmarks' DQN agent: QNetwork fc(100), Adam 1e-3, epsilon-greedy 0.1.

  Seeded, so every path starts from the same weights: an untrained policy's episode
  lengths (and so the share of autoreset steps) depend on them.
  """
  tf.random.set_seed(seed)
  q_net = q_network.QNetwork(time_step_spec.observation, action_spec,
                             fc_layer_params=(100,))
  agent = dqn_agent.DqnAgent(
      time_step_spec, action_spec, q_network=q_net,
      optimizer=tf.keras.optimizers.Adam(1e-3), epsilon_greedy=0.1,
      n_step_update=1, gamma=0.99,
      train_step_counter=tf.Variable(0, dtype=tf.int64, name='train_step'))
  agent.initialize()
  return agent


def load_average() -> str:
  """The 1, 5 and 15 minute load averages, for the record next to each figure."""
  return ', '.join(f'{x:.2f}' for x in os.getloadavg())

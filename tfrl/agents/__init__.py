"""Agent builders: DQN/SAC/PPO from tf-agents, tfrl's own IMPALA and APPO."""

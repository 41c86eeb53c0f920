"""Agent builders: DQN and SAC (tf-agents agents), and tfrl's own actor-critics: PPO and
IMPALA (with CLEAR and APPO as configurations of it)."""

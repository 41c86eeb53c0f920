"""Agent builders: DQN and SAC (tf-agents agents), and tfrl's own actor-critics: PPO and
IMPALA (with APPO a configuration of it, and CLEAR its builder in `clear`)."""

"""What a trainer asks of an agent beyond tf-agents' `TFAgent`, with the defaults for
agents that say nothing (any tf-agents agent trains with them).

An agent may declare:
- `train_inputs`: names of the sample fields its `train` takes besides `experience`
  and `weights` (e.g. 'replay_mask' for CLEAR's cloning, 'policy_version' for a
  maximum policy lag). The data layout supplies them or refuses the agent by name.
- `priorities(loss_info)`: per-row priorities for prioritized replay (DQN: |TD error|).
- `collect_policy_for_task(task_id, num_tasks)`: the collect policy of one of several
  collectors, e.g. a spread of exploration rates (Ape-X).
- `on_policy = True`: its loss assumes the data was acted by the policy it trains
  (PPO), so separate collectors are paced to the trainer (`learners.pacing`).
  tf-agents' PPOAgent counts as on-policy without saying so.
"""
from typing import Callable, Optional, Tuple

import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.ppo import ppo_agent
from tf_agents.policies import tf_policy


def train_inputs(agent: tf_agent.TFAgent) -> Tuple[str, ...]:
  """The sample fields `agent.train` takes as keyword arguments (beyond experience)."""
  return tuple(getattr(agent, 'train_inputs', ()))


def priorities_fn(agent: tf_agent.TFAgent) -> Optional[Callable[[tf_agent.LossInfo],
                                                                  tf.Tensor]]:
  """`agent.priorities` (loss info -> one priority per row), or None if it has none."""
  return getattr(agent, 'priorities', None)


def collect_policy(agent: tf_agent.TFAgent, task_id: int = 0,
                   num_tasks: int = 1) -> tf_policy.TFPolicy:
  """The collect policy of collector `task_id` of `num_tasks`.

  Agents without `collect_policy_for_task` give every collector `agent.collect_policy`.
  Either way the policy's variables are the agent's, so pulling the learner's
  variables into `agent.collect_policy.variables()` updates it.
  """
  for_task = getattr(agent, 'collect_policy_for_task', None)
  if for_task is None or num_tasks < 2:
    return agent.collect_policy
  return for_task(task_id, num_tasks)


def on_policy(agent: tf_agent.TFAgent) -> bool:
  """Whether `agent` must train on data of the policy it trains (see the module doc)."""
  return isinstance(agent, ppo_agent.PPOAgent) or bool(getattr(agent, 'on_policy', False))

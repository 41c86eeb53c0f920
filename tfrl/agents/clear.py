"""CLEAR (Rolnick et al. 2019, "Experience Replay for Continual Learning",
arXiv:1811.11682): IMPALA trained on batches that mix fresh unrolls from the queue with
unrolls replayed from a reservoir, cloning on the replayed ones the policy and the value
they were acted with.

The builder here is `create_impala_agent`'s `ImpalaAgent` (`tfrl.agents.impala`, which
trains V-trace on every row and takes the replay mask) with the paper's cloning costs,
and the layout that feeds it both kinds of rows (`tfrl.layouts.SequenceQueueAndReplay`);
the cloning losses are `tfrl.losses.cloning`'s.
"""
import gin
import tensorflow as tf

from tfrl import layouts
from tfrl.agents import impala
from tfrl.agents import interface


@gin.configurable
@interface.trains_from(layouts.SequenceQueueAndReplay)
@interface.acts_in('discrete', 'continuous')
@interface.tunable('learning_rate', 'entropy_cost', 'reward_scale', 'clip_ratio', 'gamma')
def create_clear_agent(time_step_spec, action_spec, train_step: tf.Variable,
                       policy_cloning_cost: float = 0.01,
                       value_cloning_cost: float = 0.005,
                       **kwargs) -> impala.ImpalaAgent:
  """Builds CLEAR (Rolnick et al. 2019): `create_impala_agent`'s agent trained from the
  queue plus a replay table (`tfrl.layouts.SequenceQueueAndReplay`), with the paper's
  cloning costs unless told otherwise.

  The cloning costs bind here (`create_clear_agent.policy_cloning_cost`); the other
  agent settings on `create_impala_agent` (so a CLEAR config includes its IMPALA config
  and adds to it); the layout's on `SequenceQueueAndReplay` (and `SequenceQueue` for the
  fields it inherits).

  Args:
    time_step_spec, action_spec, train_step: see `create_impala_agent`.
    policy_cloning_cost: weight of KL(behaviour || policy) on the replayed steps; the
      paper's 0.01.
    value_cloning_cost: weight of the squared distance between the current and the
      stored value on the replayed steps; the paper's 0.005. They weigh as the paper's
      do: every loss term sums over its steps and divides by the same count of all the
      batch's valid steps (`ImpalaAgent`), which keeps the ratios of CLEAR's learner,
      where every term is a plain sum over its steps (cloning over the replayed ones).
    **kwargs: any other `create_impala_agent` argument.

  Returns:
    The agent.

  Raises:
    ValueError: a cloning cost bound in gin on `create_impala_agent` or `ImpalaAgent`,
      where this builder's own costs would override it without a word.
  """
  for configurable in (impala.create_impala_agent, impala.ImpalaAgent):
    misplaced = sorted(set(gin.get_bindings(configurable)) &
                       {'policy_cloning_cost', 'value_cloning_cost'})
    if misplaced:
      raise ValueError(
          f'{configurable.__name__}.{misplaced[0]} is bound in gin, but CLEAR passes its '
          f'own cloning costs: bind create_clear_agent.{misplaced[0]} instead.')
  return impala.create_impala_agent(time_step_spec, action_spec, train_step,
                                    policy_cloning_cost=policy_cloning_cost,
                                    value_cloning_cost=value_cloning_cost, **kwargs)

"""Sequence queue (PPO, IMPALA, APPO): unrolls in a FIFO queue, each sampled once.

Items are unrolls of `unroll_length + 1` steps of `envs_per_item` envs; consecutive
unrolls of an env share their boundary step (stride `unroll_length`), whose value
bootstraps the earlier one. Every item is tagged with the policy version that acted,
which an agent with a maximum policy lag declares as its 'policy_version' input. A
recurrent policy's items also hold the state it acted from at the unroll's first step,
its 'policy_state' input (the network unrolls from it).
"""
import dataclasses
from typing import Any, List, Optional

import gin
import reverb
from tf_agents.agents import tf_agent

from tfrl import actors
from tfrl import replay
from tfrl.layouts import base


@gin.configurable(denylist=base.JOB_SETTINGS)
@dataclasses.dataclass
class SequenceQueue(base.Layout):
  """On-policy unrolls in a queue (see the module docstring).

  Attributes:
    unroll_length: transitions per unroll (items hold one more step).
    queue_capacity: the queue's size in unrolls; writers wait while it is full, which
      bounds how stale queued unrolls get.
  """
  unroll_length: int = 16
  queue_capacity: int = 4096

  experience_table = base.QUEUE_TABLE
  provided_inputs = ('policy_version', 'policy_state')
  trains_on_collected_items = True
  time_major_items = True

  @property
  def rows_per_item(self) -> int:
    return self.envs_per_item

  @property
  def env_steps_per_item(self) -> int:
    return self.rows_per_item * self.unroll_length

  @property
  def writer_tables(self) -> List[str]:
    """The tables every unroll goes to."""
    return [self.experience_table]

  def item_signature(self, agent: tf_agent.TFAgent) -> Any:
    return replay.SequenceWriter.item_signature(
        agent.collect_data_spec, self.unroll_length + 1, self.envs_per_item,
        agent.collect_policy.policy_state_spec)

  def tables(self, agent: tf_agent.TFAgent, samples_per_insert: Optional[float] = None
             ) -> List[reverb.Table]:
    del samples_per_insert  # each unroll is sampled exactly once
    capacity = max(self.queue_capacity // self.envs_per_item, self.items_per_train_step)
    return [replay.queue_table(self.experience_table, capacity,
                               self.item_signature(agent))]

  def make_writer(self, client: reverb.Client, **kwargs):
    return replay.SequenceWriter(client, self.writer_tables, length=self.unroll_length + 1,
                                 stride=self.unroll_length,
                                 envs_per_item=self.envs_per_item, **kwargs)

  def _missing_input_hint(self, missing: List[str]) -> str:
    if 'replay_mask' in missing:
      return ("CLEAR's cloning costs and replay burn-in need replayed unrolls: build the "
              'agent with create_clear_agent (SequenceQueueAndReplay), or set the costs '
              'and replay_burn_in_steps to 0.')
    return super()._missing_input_hint(missing)

  @property
  def vector_steps_per_pull(self) -> int:
    """Before every unroll, as IMPALA's actors do: each unroll is acted by the newest
    policy its collector could see (after `warm_up`'s one step, every
    `unroll_length` vector steps completes an unroll)."""
    return self.unroll_length

  def warm_up(self, collect_actor: actors.Actor, random_actor: actors.Actor,
              initial_collect_steps: int) -> None:
    """Collects one step with the policy, and no random-action data.

    On-policy unrolls need the behaviour policy's outputs, so there is no random
    warm-up. Unrolls hold unroll_length + 1 steps and overlap by one, so an unroll is
    complete one step *after* its last transition. Collecting that one step up front
    shifts every later iteration's unroll to end exactly where its collection ends:
    the train call that follows trains on the unroll the current policy just collected
    (on-policy, bar the shared boundary step, whose behaviour outputs are recorded),
    instead of one a policy update older.
    """
    del random_actor, initial_collect_steps
    collect_actor.run(1)

  def train_steps_available(self, untrained_items: int, limit: int) -> int:
    """The full batches collected, up to `limit`.

    Sampling an empty queue would block the one-process loop forever (collection waits
    for training), so training takes only what was collected: `untrained_items`, the
    writer's items (all inserted, after its flush) minus those the train steps took.
    Not the queue's current size: the dataset's prefetch takes items out of the queue
    before the learner uses them, and a size that reads zero then would skip training
    and leave a backlog of stale unrolls.
    """
    return min(limit, untrained_items // self.items_per_train_step)

"""Sequence queue + replay (CLEAR, Rolnick et al. 2019, arXiv:1811.11682).

Every unroll goes to the queue (fresh, sampled once) and to a replay table; each batch
is `1 - replay_fraction` fresh unrolls followed by `replay_fraction` replayed ones, and
`info['replay_mask']` (1.0 on replayed rows) is what the agent's cloning losses take.
The replay table keeps a reservoir sample of all unrolls ever written (the paper's
choice: old experience stays as likely as new, which is what protects earlier tasks),
or, with `replay_remover='fifo'`, the most recent ones.
"""
import dataclasses
from typing import List, Optional

import gin
import reverb
from tf_agents.agents import tf_agent
import tensorflow as tf

from tfrl import replay
from tfrl.agents import interface
from tfrl.layouts import base
from tfrl.layouts import sequence

REPLAY_REMOVERS = ('reservoir', 'fifo')
REPLAY_MASK = 'replay_mask'


@gin.configurable(denylist=base.JOB_SETTINGS)
@dataclasses.dataclass
class SequenceQueueAndReplay(sequence.SequenceQueue):
  """CLEAR's data (see the module docstring).

  Attributes:
    replay_capacity: the replay table's size in unrolls.
    replay_fraction: the share of each batch sampled from replay, in (0, 1); the split
      is made on the global batch, in whole items, and must divide over replicas.
    replay_remover: 'reservoir' (a uniform sample of all history) or 'fifo'.

  Raises:
    ValueError: an unknown remover, or a fraction outside (0, 1).
  """
  replay_capacity: int = 100_000
  replay_fraction: float = 0.5
  replay_remover: str = 'reservoir'

  provided_inputs = ('policy_version', 'policy_state', REPLAY_MASK)

  def __post_init__(self):
    if self.replay_remover not in REPLAY_REMOVERS:
      raise ValueError(f'replay_remover must be one of {REPLAY_REMOVERS}, got '
                       f'{self.replay_remover!r}.')
    if not 0.0 < self.replay_fraction < 1.0:
      raise ValueError(f'replay_fraction must be in (0, 1) with the SequenceQueueAndReplay '
                       f'layout (a batch needs fresh and replayed rows), got '
                       f'{self.replay_fraction}.')

  def check_agent(self, agent: tf_agent.TFAgent) -> None:
    """Also refuses a maximum policy lag that cannot tell replayed rows from fresh.

    An agent that takes 'policy_version' but not the replay mask would drop replayed
    unrolls, old by design, as stale (the agent spares them only where it sees the mask).

    Raises:
      ValueError: a missing input, or 'policy_version' without 'replay_mask'.
    """
    super().check_agent(agent)
    inputs = interface.train_inputs(agent)
    if 'policy_version' in inputs and REPLAY_MASK not in inputs:
      raise ValueError(
          f"{type(agent).__name__}'s max_policy_lag would drop the replayed unrolls of "
          'the SequenceQueueAndReplay layout as stale without their replay mask: set a '
          'CLEAR cloning cost above 0 (the lag then applies to fresh rows only) or '
          'max_policy_lag=None.')

  @property
  def replayed_rows(self) -> int:
    """Rows of a (global) batch mixed in from replay, in whole items.

    Raises:
      ValueError: a replay_fraction that rounds to no replayed rows or no fresh ones.
    """
    items = int(round(self.batch_size * self.replay_fraction / self.envs_per_item))
    rows = items * self.envs_per_item
    hint = f'(items hold {self.envs_per_item} unrolls each)'
    if rows >= self.batch_size:
      raise ValueError(
          f'replay_fraction={self.replay_fraction} of batch_size={self.batch_size} leaves '
          f'no fresh unrolls {hint}: lower replay_fraction or raise batch_size.')
    if not rows:
      raise ValueError(
          f'replay_fraction={self.replay_fraction} of batch_size={self.batch_size} rounds '
          f'to no replayed unrolls {hint}: raise replay_fraction or batch_size.')
    return rows

  @property
  def fresh_rows(self) -> int:
    """Rows of a (global) batch taken from the queue."""
    return self.batch_size - self.replayed_rows

  @property
  def items_per_train_step(self) -> int:
    return self.items_per_batch(self.fresh_rows)

  @property
  def writer_tables(self) -> List[str]:
    return [self.experience_table, base.REPLAY_TABLE]

  def tables(self, agent: tf_agent.TFAgent, samples_per_insert: Optional[float] = None
             ) -> List[reverb.Table]:
    # Every unroll goes to both tables, so once the queue can serve a batch the replay
    # table holds at least those unrolls, and sampling (with replacement) needs only
    # one. A larger minimum could block the first train step of one process, which
    # trains as soon as the queue holds one batch's fresh items.
    make_table = (replay.reservoir_table if self.replay_remover == 'reservoir'
                  else replay.uniform_table)
    replay_table = make_table(base.REPLAY_TABLE,
                              max(self.replay_capacity // self.rows_per_item, 1),
                              self.item_signature(agent), min_size_to_sample=1,
                              samples_per_insert=samples_per_insert)
    return super().tables(agent) + [replay_table]

  def make_writer(self, client: reverb.Client, **kwargs):
    if self.replay_remover == 'reservoir':
      # The queue ignores priorities; the reservoir keeps the largest random keys.
      kwargs['priority'] = replay.reservoir_priority
    return super().make_writer(client, **kwargs)

  def dataset_fn(self, server_address: str, agent: tf_agent.TFAgent, sample_timeout_ms: int = -1):
    signature = self.item_signature(agent)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      # Split once on the global batch: rounding each replica's share instead gave
      # CLEAR on 2 replicas no replayed rows at all (round(0.5) == 0).
      replicas = context.num_replicas_in_sync
      rows_per_table = [
          (self.experience_table, self.rows_per_replica(self.fresh_rows, replicas,
                                                        'fresh part')),
          (base.REPLAY_TABLE, self.rows_per_replica(self.replayed_rows, replicas,
                                                    'replayed part'))]
      dataset = replay.make_mixed_dataset(server_address, rows_per_table, signature,
                                          rows_per_item=self.rows_per_item,
                                          time_major=self.time_major_items,
                                          experience_spec=agent.collect_data_spec,
                                          rate_limiter_timeout_ms=sample_timeout_ms)
      # Not converted by AutoGraph: no control flow to convert, and converting costs
      # start-up time.
      return dataset.map(tf.autograph.experimental.do_not_convert(
          lambda experience, info: (experience, dict(info, **{
              REPLAY_MASK: tf.cast(info[replay.TABLE_INDEX] == 1, tf.float32)}))))

    return dataset_fn

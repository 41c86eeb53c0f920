"""A data layout's builder: the one place that decides what an algorithm's data is.

As in Acme, each layout is a small builder whose methods every program calls
unchanged: the Reverb server calls `tables`, a collector `make_writer`, the trainer
`dataset_fn`, `train_inputs_fn` and `after_train_step_fn`, the one-process loop all of
them plus `warm_up` and `train_steps_available`. A job's settings (env, seed, budgets,
intervals) live in `learners.configuration.experiment.Experiment`, which picks the layout.

An agent builder names its layout (`tfrl.agents.interface.trains_from`); the layout's
own settings bind in gin on its class (`SequenceQueue.unroll_length = 32`), and a
subclass also takes its bases' bindings for the fields it inherits (`build`). The job
passes what it shares with the envs and the agent (`JOB_SETTINGS`, and TransitionReplay's
gamma and annealing horizon).

The layouts:
- `TransitionReplay` (DQN, SAC): n-step transitions in a uniform or prioritized table.
- `SequenceQueue` (PPO, IMPALA, APPO): unrolls in a FIFO queue, each sampled once.
- `SequenceQueueAndReplay` (CLEAR): unrolls in the queue and in a replay table, each
  batch mixing fresh and replayed ones.

Agents declare what they take from the data (`tfrl.agents.interface`); a layout
supplies it or refuses the agent, naming the input and the layout that has it.
"""
import abc
import dataclasses
from typing import Any, Callable, Dict, List, Optional

import gin
import reverb
import tensorflow as tf
from tf_agents.agents import tf_agent

from tfrl import actors
from tfrl import replay
from tfrl.agents import interface
from tfrl.replay import batched_writer

REPLAY_TABLE = 'replay'
QUEUE_TABLE = 'queue'
# Vector steps between a replay collector's pulls of the policy variables.
REPLAY_PULL_PERIOD = 50

# Every layout's settings that the job, not the layout, decides (never bound in gin on
# a layout class: `Experiment.num_envs`, `Experiment.batch_size`).
JOB_SETTINGS = ('num_envs', 'batch_size')

# (experience, info) -> agent.train's keyword arguments, per replica.
TrainInputsFn = Callable[[Any, Dict[str, tf.Tensor]], Dict[str, Any]]


@dataclasses.dataclass
class Layout(abc.ABC):
  """What the layouts share: envs grouped into items, batches made of whole items.

  Attributes:
    num_envs: envs per collector (vector env size).
    batch_size: rows (transitions or unrolls) per train step, over all replicas.
  """
  num_envs: int
  batch_size: int

  # The table every item goes to; its inserts count env steps.
  experience_table = REPLAY_TABLE
  # Sample fields (in `info`) an agent may declare as train inputs (a tuple).
  provided_inputs = ()
  # Whether items hold unrolls time-major, [T, G, ...], rather than [G, ...] rows.
  time_major_items = False
  # Whether one process's train steps must wait for the items it collected (a queue
  # serves each item once), which it then flushes before counting them.
  trains_on_collected_items = False

  @property
  def envs_per_item(self) -> int:
    """Envs packed into one Reverb item: all of them unless the batch is smaller.

    Raises:
      ValueError: batch_size neither a multiple nor a divisor of num_envs.
    """
    per_item = self.num_envs if self.batch_size % self.num_envs == 0 else self.batch_size
    if self.num_envs % per_item:
      raise ValueError(f'batch_size={self.batch_size} must be a multiple or a divisor of '
                       f'num_envs={self.num_envs}.')
    return per_item

  @property
  @abc.abstractmethod
  def rows_per_item(self) -> int:
    """Rows (transitions or unrolls) in one Reverb item."""

  @property
  @abc.abstractmethod
  def env_steps_per_item(self) -> int:
    """Env steps one item of the experience table stands for."""

  @abc.abstractmethod
  def item_signature(self, agent: tf_agent.TFAgent) -> Any:
    """What an item stores of `agent`'s collected data."""

  @abc.abstractmethod
  def tables(self, agent: tf_agent.TFAgent, samples_per_insert: Optional[float] = None
             ) -> List[reverb.Table]:
    """The experience tables (`samples_per_insert`: the replay ratio, None for none)."""

  @abc.abstractmethod
  def make_writer(self, client: reverb.Client, **kwargs) -> batched_writer.BatchedWriter:
    """The collector's writer; `kwargs` go to it (e.g. `flush_timeout_ms`)."""

  def dataset_fn(self, server_address: str, agent: tf_agent.TFAgent, sample_timeout_ms: int = -1
                 ) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """The Learner's per-replica dataset of `(experience, info)` batches.

    Each replica takes its share of the batch, in whole items, from the experience
    table. With `sample_timeout_ms` >= 0 the dataset ends (tf.errors.OutOfRangeError in
    `Learner.run`) when a sample waits longer than that for data, so a trainer whose
    collectors stopped can notice its stop signal.
    """
    signature = self.item_signature(agent)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      rows = self.rows_per_replica(self.batch_size, context.num_replicas_in_sync)
      ahead = {}
      if self.trains_on_collected_items:
        # A queue's items are taken once, and each batch fetched ahead is one more
        # policy version between acting and training: one batch in flight, one ready.
        ahead = dict(max_in_flight_samples_per_worker=self.items_per_batch(rows),
                     prefetch=1)
      return replay.make_dataset(server_address, self.experience_table, signature, rows,
                                 rows_per_item=self.rows_per_item,
                                 time_major=self.time_major_items,
                                 experience_spec=agent.collect_data_spec,
                                 rate_limiter_timeout_ms=sample_timeout_ms,
                                 shuffle_rows=self.shuffle_rows(rows), **ahead)

    return dataset_fn

  def shuffle_rows(self, rows: int) -> int:
    """The shuffle buffer (rows) a replica's batches of `rows` rows are mixed through
    (`tfrl.replay.mixing`); 0 (the default): batches of whole items."""
    del rows
    return 0

  @property
  def items_per_train_step(self) -> int:
    """Items of the experience table one train step consumes (all replicas)."""
    return self.items_per_batch(self.batch_size)

  def items_per_batch(self, rows: int) -> int:
    """Whole items that make `rows` rows.

    Raises:
      ValueError: `rows` is not a multiple of the rows per item.
    """
    if rows % self.rows_per_item:
      raise ValueError(f'batch_size={self.batch_size} must be a multiple of the '
                       f'{self.rows_per_item} rows per item.')
    return rows // self.rows_per_item

  def rows_per_replica(self, rows: int, num_replicas: int, what: str = 'batch') -> int:
    """A replica's share of `rows`, in whole items.

    Raises:
      ValueError: `rows` does not split into whole items over the replicas.
    """
    if rows % (num_replicas * self.rows_per_item):
      raise ValueError(
          f'The {what}\'s {rows} rows do not split into whole items of '
          f'{self.rows_per_item} rows over {num_replicas} replicas: make it a multiple '
          f'of {num_replicas * self.rows_per_item}.')
    return rows // num_replicas

  def check_agent(self, agent: tf_agent.TFAgent) -> None:
    """Refuses an agent whose declarations are wrong (`interface.check_agent`) or
    whose declared train inputs this layout cannot supply.

    Raises:
      interface.AgentProtocolError: a declaration that is misspelt, unknown or not
        taken by the agent's `_train`.
      ValueError: an input this layout does not supply, naming it and the layout.
    """
    interface.check_agent(agent)
    missing = [name for name in interface.train_inputs(agent)
               if name not in self.provided_inputs]
    if missing:
      raise ValueError(
          f'{type(agent).__name__} trains on {missing}, which the {type(self).__name__} '
          f'layout does not provide (it provides {list(self.provided_inputs)}): '
          f'{self._missing_input_hint(missing)}')

  def _missing_input_hint(self, missing: List[str]) -> str:
    del missing
    return "build the agent with a builder whose layout provides them (CLEAR's replay " \
           'mask: tfrl.agents.clear.create_clear_agent).'

  def train_inputs_fn(self, agent: tf_agent.TFAgent) -> TrainInputsFn:
    """Per replica: `(experience, info)` -> `agent.train`'s keyword arguments.

    Always 'experience'; then what the layout adds (`_extra_train_inputs`) and what the
    agent declares, from `info`.

    Raises:
      ValueError: the agent declares an input this layout does not provide.
    """
    self.check_agent(agent)
    declared = interface.train_inputs(agent)

    def train_inputs(experience, info):
      kwargs = {'experience': experience}
      kwargs.update(self._extra_train_inputs(experience, info, agent))
      kwargs.update({name: info[name] for name in declared})
      return kwargs

    return train_inputs

  def _extra_train_inputs(self, experience: Any, info: Dict[str, tf.Tensor],
                          agent: tf_agent.TFAgent) -> Dict[str, tf.Tensor]:
    del experience, info, agent
    return {}

  def after_train_step_fn(self, server_address: str, agent: tf_agent.TFAgent
                          ) -> Optional[Callable]:
    """What runs per replica after each train step (priority write-back), or None."""
    del server_address, agent
    return None

  def pushed_variables(self) -> Dict[str, tf.Variable]:
    """Layout state the learner pushes to collectors with the policy (default none)."""
    return {}

  @property
  def vector_steps_per_pull(self) -> int:
    """How often a separate collector pulls the policy variables, in vector steps.

    Replay layouts mix experience of many policy versions anyway: a pull every
    `REPLAY_PULL_PERIOD` vector steps keeps the collector's time on acting.
    """
    return REPLAY_PULL_PERIOD

  @abc.abstractmethod
  def warm_up(self, collect_actor: actors.Actor, random_actor: actors.Actor,
              initial_collect_steps: int) -> None:
    """A collector's first collection, before its first train step (one process) or
    its regular loop (a separate collector, after the trainer's first push)."""

  @abc.abstractmethod
  def train_steps_available(self, untrained_items: int, limit: int) -> int:
    """Train steps one process may run now, up to `limit`.

    Args:
      untrained_items: items the process's writer created (and flushed) minus those
        its train steps consumed.
      limit: the configured train steps per iteration.
    """


def bound_settings(layout_class: type) -> Dict[str, Any]:
  """The layout settings bound in gin for `layout_class`: its bases' bindings first
  (for the fields it inherits), then its own, which win."""
  settings = {}
  for cls in reversed(layout_class.__mro__):
    if not issubclass(cls, Layout):
      continue
    try:
      settings.update(gin.get_bindings(cls))
    except ValueError:  # a class that is not a gin configurable (e.g. `Layout`)
      continue
  return settings


def build(layout_class: type, num_envs: int, batch_size: int,
          **settings: Any) -> 'Layout':
  """Builds `layout_class` for a job: its gin-bound settings (`bound_settings`), then
  `settings` (the job's shared ones, and a Python caller's), which win.

  Raises:
    ValueError: settings the layout rejects (the layout's message).
  """
  return layout_class(num_envs=num_envs, batch_size=batch_size,
                      **{**bound_settings(layout_class), **settings})

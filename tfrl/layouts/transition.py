"""Transition replay (DQN, SAC): n-step transitions in a uniform or prioritized table.

Collectors make one writer call per vector step. Rows whose first step is LAST (the
LAST -> FIRST boundary) are no experience and train with weight 0.

Uniform replay: items hold `steps_per_item` consecutive vector steps' transitions of
`envs_per_item` envs (all of them by default), sampled whole, and their rows are
spread over many batches by a shuffle buffer of `shuffle_buffer_batches` batches
(`tfrl.replay.mixing`): each stored transition is equally likely and a batch draws
from dozens of vector steps and from most envs, at the per-item cost of whole-step
items (one item per transition costs ~5x the input pipeline's speed). A sampled row
reaches the learner after ~`shuffle_buffer_batches` train steps.

Prioritized replay keeps one transition per item (the writer creates num_envs items
from each vector step's one append), so each transition has its own priority.

Datasets (`tfrl.datasets`, `Experiment.dataset_dir`) are written through the same
writer (`make_dataset_writer`): into the replay table itself for offline training, or,
with `dataset_fraction` (hybrid), into a 'dataset' table of their own, each batch then
holding that share of dataset rows and the rest from the online replay (RLPD's
symmetric sampling is 0.5; Ball et al. 2023), split on the global batch in whole items.

Prioritized replay follows Schaul et al. (2016, arXiv:1511.05952): P(i) ~ p_i^alpha;
new items enter at the largest priority seen so far; after each train step the agent's
`priorities(loss_info)` are written back; importance weights (N * P(i))^-beta are
normalized by their maximum over the whole (global) batch, and beta anneals linearly
from `importance_sampling_exponent` to 1 over `beta_anneal_steps` train steps.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional

import gin
import reverb
import tensorflow as tf
from tf_agents.agents import tf_agent

from tfrl import actors
from tfrl import replay
from tfrl import replicas
from tfrl.agents import interface
from tfrl.datasets import schedule
from tfrl.layouts import base
from tfrl.replay import mixing
from tfrl.replay import tables as tables_lib

# Added to every written-back priority: a row with zero TD error stays sampleable.
PRIORITY_FLOOR = 1e-6
# A hybrid job's dataset rows (`dataset_fraction`).
DATASET_TABLE = 'dataset'


@gin.configurable(denylist=base.JOB_SETTINGS + ('gamma', 'beta_anneal_steps'))
@dataclasses.dataclass
class TransitionReplay(base.Layout):
  """n-step transitions in a replay table (see the module docstring).

  Attributes:
    n_step: steps per transition (rewards summed with `gamma`).
    gamma: the discount, shared with the agent.
    steps_per_item: consecutive vector steps whose transitions share one item; raise
      it when num_envs is small so items stay large (uniform replay only).
    capacity: replay size in transitions.
    prioritized: prioritized instead of uniform replay.
    priority_exponent: alpha.
    importance_sampling_exponent: beta at the first train step.
    beta_anneal_steps: train steps over which beta reaches 1 (None: it stays).
    shuffle_buffer_batches: uniform replay's shuffle buffer, in batches (0: batches
      of whole items).
    dataset_fraction: hybrid training: the share of each batch sampled from the
      dataset's own table, in (0, 1); None: a dataset, if the job has one, is the whole
      replay (offline training).
    dataset_capacity: the dataset table's size in transitions (hybrid).
    cast_dataset_dtypes: cast a dataset's observations and actions to the env's dtypes
      (float64 to float32, say) where they differ; False: such a dataset is refused,
      naming the field and both dtypes (`tfrl.datasets.formats.fit`).
    dataset_only_steps, online_every: a hybrid job's schedule, ALF's
      rl_train_after_update_steps and rl_train_every_update_steps
      (`tfrl.datasets.schedule`): the first dataset_only_steps train steps take dataset
      rows only (and one process collects nothing before them); after that one step
      in online_every mixes online rows, the others take dataset rows only. The
      defaults (0, 1): every step mixes.

  Raises:
    ValueError: prioritized replay with steps_per_item > 1 or with a dataset_fraction,
      a negative buffer, a dataset_fraction outside (0, 1), or a schedule without a
      dataset_fraction or out of range.
  """
  n_step: int = 1
  gamma: float = 0.99
  steps_per_item: int = 1
  capacity: int = 100_000
  prioritized: bool = False
  priority_exponent: float = 0.6
  importance_sampling_exponent: float = 0.4
  beta_anneal_steps: Optional[int] = None
  shuffle_buffer_batches: int = mixing.DEFAULT_BUFFER_BATCHES
  dataset_fraction: Optional[float] = None
  dataset_capacity: int = 1_000_000
  cast_dataset_dtypes: bool = False
  dataset_only_steps: int = 0
  online_every: int = 1

  def __post_init__(self):
    self.hybrid_schedule = schedule.HybridSchedule(self.dataset_only_steps,
                                                   self.online_every)
    if self.hybrid_schedule.active and self.dataset_fraction is None:
      raise ValueError('dataset_only_steps and online_every schedule a hybrid job\'s '
                       'batches: set TransitionReplay.dataset_fraction (and a dataset).')
    if self.dataset_fraction is not None:
      if not 0.0 < self.dataset_fraction < 1.0:
        raise ValueError(f'dataset_fraction must be in (0, 1) (None: offline, the dataset '
                         f'is the whole replay), got {self.dataset_fraction}.')
      if self.prioritized:
        raise ValueError('dataset_fraction with prioritized replay: priorities are '
                         'written back to one table; use uniform replay for hybrid jobs.')
    if self.prioritized and self.steps_per_item != 1:
      raise ValueError(f'steps_per_item={self.steps_per_item} with prioritized replay: '
                       'its items hold one transition each (a priority per transition).')
    if self.shuffle_buffer_batches < 0:
      raise ValueError(f'shuffle_buffer_batches must be >= 0, got '
                       f'{self.shuffle_buffer_batches}.')
    # New items' priority: the largest priority written back so far. Pushed with the
    # policy, so separate collectors insert at the learner's maximum too.
    self._max_priority = tf.Variable(
        1.0, dtype=tf.float32, trainable=False, name='max_priority',
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  @property
  def envs_per_item(self) -> int:
    """One env per item with prioritized replay (a priority per transition)."""
    return 1 if self.prioritized else super().envs_per_item

  def shuffle_rows(self, rows: int) -> int:
    """Uniform replay mixes a replica's `rows`-row batches (prioritized: none)."""
    return 0 if self.prioritized else mixing.buffer_rows_for(
        rows, self.shuffle_buffer_batches)

  @property
  def hybrid(self) -> bool:
    return self.dataset_fraction is not None

  @property
  def dataset_rows(self) -> int:
    """Rows of a (global) batch from the dataset table (hybrid), in whole items.

    Raises:
      ValueError: a fraction that rounds to no dataset rows or no online ones.
    """
    rows = int(round(self.batch_size * self.dataset_fraction / self.rows_per_item)
               ) * self.rows_per_item
    if not 0 < rows < self.batch_size:
      raise ValueError(
          f'dataset_fraction={self.dataset_fraction} of batch_size={self.batch_size} '
          f'rounds to {rows} dataset rows (items hold {self.rows_per_item}): a hybrid '
          'batch needs both kinds; change the fraction or the batch size.')
    return rows

  @property
  def online_rows(self) -> int:
    """Rows of a (global) batch from the online replay."""
    return self.batch_size - self.dataset_rows if self.hybrid else self.batch_size

  @property
  def items_per_train_step(self) -> int:
    return self.items_per_batch(self.online_rows)

  @property
  def dataset_capacity_rows(self) -> int:
    """The rows a dataset may make: the dataset table's, or offline the replay's."""
    return self.dataset_capacity if self.hybrid else self.capacity

  @property
  def rows_per_item(self) -> int:
    return self.envs_per_item * self.steps_per_item

  @property
  def env_steps_per_item(self) -> int:
    return self.rows_per_item

  @property
  def max_priority(self) -> tf.Variable:
    return self._max_priority

  def item_signature(self, agent: tf_agent.TFAgent) -> Any:
    return replay.NStepTransitionWriter.item_signature(agent.collect_data_spec,
                                                       self.rows_per_item)

  @property
  def dataset_table(self) -> str:
    """Where a dataset goes: its own table (hybrid), else the replay table."""
    return DATASET_TABLE if self.hybrid else self.experience_table

  def tables(self, agent: tf_agent.TFAgent, samples_per_insert: Optional[float] = None,
             dataset_items: int = 0) -> List[reverb.Table]:
    """The replay table (and with `dataset_fraction` the dataset's), where
    `dataset_items` (a dataset's size, `tfrl.datasets.feeder.LoadPlan.items`) is the
    dataset table's minimum size to sample: no batch before the whole dataset is in."""
    min_items = self.items_per_train_step
    if dataset_items and not self.hybrid:
      min_items = max(min_items, dataset_items)
    error_buffer = None
    if samples_per_insert is not None:
      # The learners' shuffle buffers (and the chunks in flight to them) take item
      # samples ahead of training: the limiter must allow them, or a learner waiting
      # to fill its buffer and collectors waiting for samples would block each other.
      ahead = 2 * mixing.fill_items(self.shuffle_rows(self.online_rows), self.rows_per_item)
      error_buffer = tables_lib.default_error_buffer(min_items, samples_per_insert) + ahead
    settings = dict(max_size=max(self.capacity // self.rows_per_item, min_items),
                    signature=self.item_signature(agent),
                    min_size_to_sample=min_items, samples_per_insert=samples_per_insert,
                    error_buffer=error_buffer)
    if self.prioritized:
      return [replay.prioritized_table(self.experience_table,
                                       priority_exponent=self.priority_exponent,
                                       **settings)]
    tables = [replay.uniform_table(self.experience_table, **settings)]
    if self.hybrid:  # filled once, before training: no rate limiter
      min_dataset_items = max(self.items_per_batch(self.dataset_rows), dataset_items)
      tables.append(replay.uniform_table(
          DATASET_TABLE, max(self.dataset_capacity // self.rows_per_item, min_dataset_items),
          self.item_signature(agent), min_size_to_sample=min_dataset_items))
    return tables

  def make_writer(self, client: reverb.Client, **kwargs):
    if self.prioritized:
      kwargs['priority'] = lambda: float(self._max_priority.numpy())
    return self._writer(client, self.experience_table, **kwargs)

  def make_dataset_writer(self, client: reverb.Client, **kwargs):
    """The writer a dataset's episodes go through (`tfrl.datasets.feeder`): to the
    dataset table when hybrid, else (offline) to the replay table."""
    if self.prioritized:
      kwargs['priority'] = lambda: float(self._max_priority.numpy())
    return self._writer(client, self.dataset_table, **kwargs)

  def _writer(self, client: reverb.Client, table: str, **kwargs):
    return replay.NStepTransitionWriter(
        client, [table], n=self.n_step, discount=self.gamma,
        steps_per_item=self.steps_per_item, envs_per_item=self.envs_per_item, **kwargs)

  def dataset_fn(self, server_address: str, agent: tf_agent.TFAgent,
                 sample_timeout_ms: int = -1):
    """The base's dataset, or (hybrid) batches of online rows then dataset rows, each
    part mixed through its own shuffle buffer."""
    if not self.hybrid:
      return super().dataset_fn(server_address, agent, sample_timeout_ms)
    signature = self.item_signature(agent)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      replicas = context.num_replicas_in_sync
      online = self.rows_per_replica(self.online_rows, replicas, 'online part')
      offline = self.rows_per_replica(self.dataset_rows, replicas, 'dataset part')
      return replay.make_mixed_dataset(
          server_address, [(self.experience_table, online), (DATASET_TABLE, offline)],
          signature, rows_per_item=self.rows_per_item, time_major=False,
          experience_spec=agent.collect_data_spec,
          rate_limiter_timeout_ms=sample_timeout_ms,
          shuffle_rows=(self.shuffle_rows(online), self.shuffle_rows(offline)))

    return dataset_fn

  def dataset_only_fn(self, server_address: str, agent: tf_agent.TFAgent,
                      sample_timeout_ms: int = -1):
    """Whole batches of dataset rows: the hybrid schedule's steps that take no online
    rows (`hybrid_schedule`). Rows carry the dataset's table index, 1, as in mixed
    batches."""
    signature = self.item_signature(agent)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      rows = self.rows_per_replica(self.batch_size, context.num_replicas_in_sync)
      dataset = replay.make_mixed_dataset(
          server_address, [(DATASET_TABLE, rows)], signature,
          rows_per_item=self.rows_per_item, time_major=False,
          experience_spec=agent.collect_data_spec,
          rate_limiter_timeout_ms=sample_timeout_ms,
          shuffle_rows=(self.shuffle_rows(rows),))
      # Not converted by AutoGraph: no control flow to convert, and converting costs
      # start-up time.
      return dataset.map(tf.autograph.experimental.do_not_convert(
          lambda experience, info: (experience, dict(
              info, **{replay.TABLE_INDEX: info[replay.TABLE_INDEX] + 1}))))

    return dataset_fn

  def _extra_train_inputs(self, experience, info, agent) -> Dict[str, tf.Tensor]:
    # Boundary rows weigh 0 (DqnAgent masks them itself; SacAgent and others do not).
    weights = replay.valid_mask(experience)
    if self.prioritized:
      weights *= self.importance_weights(info, agent.train_step_counter)
    return {'weights': weights}

  def importance_weight_exponent(self, train_step: tf.Tensor) -> tf.Tensor:
    """beta at `train_step`: from importance_sampling_exponent linearly to 1."""
    beta = tf.constant(self.importance_sampling_exponent, tf.float32)
    if not self.beta_anneal_steps:
      return beta
    progress = tf.minimum(
        tf.cast(train_step, tf.float32) / float(self.beta_anneal_steps), 1.0)
    return beta + (1.0 - beta) * progress

  def importance_weights(self, info: Dict[str, tf.Tensor], train_step: tf.Tensor
                         ) -> tf.Tensor:
    """(N * P(i))^-beta per row, divided by the largest over every replica's rows."""
    weights = tf.pow(tf.cast(info['table_size'], tf.float32) *
                     tf.cast(info['probability'], tf.float32),
                     -self.importance_weight_exponent(train_step))
    return weights / replicas.max_over_replicas(weights)

  def check_agent(self, agent: tf_agent.TFAgent) -> None:
    """Also refuses prioritized replay for an agent that reports no priorities."""
    super().check_agent(agent)
    if self.prioritized and interface.priorities_fn(agent) is None:
      raise ValueError(
          f"replay_table='prioritized' needs per-row priorities, which "
          f'{type(agent).__name__} does not report (no `priorities(loss_info)`): use '
          "tfrl's DQN agent or replay_table='uniform'.")

  def after_train_step_fn(self, server_address: str, agent: tf_agent.TFAgent
                          ) -> Optional[Callable]:
    """Writes the agent's priorities back (prioritized replay), else None.

    Raises:
      ValueError: prioritized replay with an agent without `priorities`.
    """
    if not self.prioritized:
      return None
    self.check_agent(agent)
    updater = replay.PriorityUpdater(server_address, self.experience_table)
    priorities_of = interface.priorities_fn(agent)

    def update_priorities(sample, loss_info):
      _, info = sample
      priorities = priorities_of(loss_info) + PRIORITY_FLOOR
      updater(info['key'], priorities)
      self._max_priority.assign(tf.maximum(
          self._max_priority, replicas.max_over_replicas(priorities)))

    return update_priorities

  def pushed_variables(self) -> Dict[str, tf.Variable]:
    return {'max_priority': self._max_priority} if self.prioritized else {}

  def warmup_vector_steps(self, initial_collect_steps: int) -> int:
    """Vector steps of random actions before one process's first train step.

    At least `initial_collect_steps` env steps, and always enough for the table to
    serve the first batch: a transition is written n_step - 1 steps after it starts,
    an item holds steps_per_item steps' transitions of envs_per_item envs, and the
    table's MinSize wants a batch's items. Fewer would block the first train call
    (one process is also its only collector).
    """
    items_per_step = self.num_envs // self.envs_per_item
    item_writes = -(-self.items_per_train_step // items_per_step)  # ceil
    needed = self.n_step - 1 + self.steps_per_item * item_writes
    return max(-(-initial_collect_steps // self.num_envs), needed)

  def warm_up(self, collect_actor: actors.Actor, random_actor: actors.Actor,
              initial_collect_steps: int) -> None:
    """Fills the table with random-action experience, then starts clean episodes."""
    random_actor.run(self.warmup_vector_steps(initial_collect_steps))
    collect_actor.reset()

  def train_steps_available(self, untrained_items: int, limit: int) -> int:
    """Replay can always serve: the configured number."""
    del untrained_items
    return limit

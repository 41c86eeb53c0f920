"""`Experiment`: the settings every program of one job shares, and what they build.

`train_eval` (one process) and the separate `reverb_server`, `collect`, `train` and
`eval` programs read the same .gin file, which binds `Experiment.*` and the agent
builder. Building specs, tables, writers and datasets here is what keeps a collector's
items and the server's tables in agreement.

Two data layouts cover the algorithms:
- 'transition' (DQN, SAC): n-step transitions in a uniform or prioritized replay table.
- 'sequence' (IMPALA, APPO, CLEAR): unrolls of unroll_length + 1 steps in a FIFO queue
  (each sampled once); CLEAR also writes them to a replay table and mixes
  `replay_fraction` of each batch from it.
"""
import dataclasses
from typing import Any, Callable, List, Optional, Sequence, Tuple

import gin
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent

import tfrl.envs
from tfrl import learner as learner_lib
from tfrl import replay
from tfrl.agents import dqn
from tfrl.agents import impala  # pylint: disable=unused-import (registers gin names)
from tfrl.agents import ppo  # pylint: disable=unused-import
from tfrl.agents import sac  # pylint: disable=unused-import

REPLAY_TABLE = 'replay'
QUEUE_TABLE = 'queue'
LAYOUTS = ('transition', 'sequence')
TABLE_KINDS = ('uniform', 'prioritized')
TRAIN_KWARGS = ('policy_version', 'replay_mask')


@gin.configurable
@dataclasses.dataclass
class Experiment:
  """One training job's settings (bind them in gin as `Experiment.<field>`).

  Attributes:
    env_name: a gymnasium id.
    seed: seeds TF, the collect envs (seed + 1000 * task) and the eval envs (+ 10000).
    agent_fn: builds the agent from (time_step_spec, action_spec, train_step, gamma=).
    gamma: the discount, shared by the agent and the n-step writer.
    data_layout: 'transition' or 'sequence' (see the module docstring).
    n_step: steps per transition ('transition').
    steps_per_item: consecutive vector steps whose transitions share one Reverb item
      ('transition'); raise it when num_envs is small so items stay large.
    unroll_length: transitions per unroll ('sequence'; items hold one more step).
    num_envs: parallel envs per collector.
    replay_capacity: replay size in rows (transitions or unrolls).
    replay_table: 'uniform' or 'prioritized' (prioritized: importance weights go to
      `agent.train(weights=)` and |TD errors| come back as priorities).
    priority_exponent: alpha of prioritized replay.
    importance_sampling_exponent: beta of prioritized replay.
    queue_capacity: the on-policy queue's size in rows ('sequence').
    replay_fraction: CLEAR's share of each batch sampled from the replay table, in
      [0, 1); rounded to whole items, it must leave fresh unrolls in every batch.
    train_kwargs: extra `agent.train` arguments fed from the data: 'policy_version'
      (APPO's lag masking), 'replay_mask' (CLEAR's cloning).
    batch_size: rows per train step (a multiple or a divisor of num_envs).
    samples_per_insert: with separate programs, the replay table's target ratio of
      sampled to inserted rows (None: no limiter). One process fixes the ratio with
      collect/train steps per iteration instead.
    initial_collect_steps: env steps of random actions before training starts.
    collect_steps_per_iteration: (one process) vector steps collected per iteration.
    train_steps_per_iteration: train steps per `Learner.run` call ('sequence' in one
      process: as many as the queue holds batches for, up to this).
    num_train_steps: the train step budget.
    eval_interval: train steps between evaluations.
    num_eval_episodes: episodes per evaluation.
    target_return: stop once a confirmed evaluation reaches it.
    checkpoint_interval: train steps between learner checkpoints.
    max_checkpoints_to_keep: learner checkpoints kept (older ones are deleted).
    policy_checkpoint_interval: train steps between variables-only policy checkpoints.
    summary_interval: train steps between training summaries.
  """
  env_name: str = 'CartPole-v1'
  seed: int = 0
  agent_fn: Callable[..., Any] = dqn.create_dqn_agent
  gamma: float = 0.99
  data_layout: str = 'transition'
  n_step: int = 1
  steps_per_item: int = 1
  unroll_length: int = 16
  num_envs: int = 16
  replay_capacity: int = 100_000
  replay_table: str = 'uniform'
  priority_exponent: float = 0.6
  importance_sampling_exponent: float = 0.4
  queue_capacity: int = 4096
  replay_fraction: float = 0.0
  train_kwargs: Sequence[str] = ()
  batch_size: int = 64
  samples_per_insert: Optional[float] = None
  initial_collect_steps: int = 1_000
  collect_steps_per_iteration: int = 1
  train_steps_per_iteration: int = 1
  num_train_steps: int = 100_000
  eval_interval: int = 1_000
  num_eval_episodes: int = 10
  target_return: Optional[float] = None
  checkpoint_interval: int = 10_000
  max_checkpoints_to_keep: int = 3
  policy_checkpoint_interval: int = 10_000
  summary_interval: int = 1_000

  def __post_init__(self):
    if self.data_layout not in LAYOUTS:
      raise ValueError(f'data_layout must be one of {LAYOUTS}, got {self.data_layout!r}.')
    if self.replay_table not in TABLE_KINDS:
      raise ValueError(f'replay_table must be one of {TABLE_KINDS}, got '
                       f'{self.replay_table!r}.')
    if not 0.0 <= self.replay_fraction < 1.0:
      raise ValueError(f'replay_fraction must be in [0, 1) (a batch needs fresh rows), got '
                       f'{self.replay_fraction}.')
    unknown = set(self.train_kwargs) - set(TRAIN_KWARGS)
    if unknown:
      raise ValueError(f'Unknown train_kwargs {sorted(unknown)}; known: {TRAIN_KWARGS}.')
    if self.replay_table == 'prioritized' and self.is_sequence:
      raise ValueError("replay_table='prioritized' needs a priority per row, which only "
                       "the 'transition' layout's agents (DQN) report: use "
                       "replay_table='uniform' with data_layout='sequence'.")

  # -- Shapes ---------------------------------------------------------------------

  @property
  def is_sequence(self) -> bool:
    return self.data_layout == 'sequence'

  @property
  def envs_per_item(self) -> int:
    """Envs packed into one Reverb item: all of them unless the batch is smaller."""
    per_item = self.num_envs if self.batch_size % self.num_envs == 0 else self.batch_size
    if self.num_envs % per_item:
      raise ValueError(f'batch_size={self.batch_size} must be a multiple or a divisor of '
                       f'num_envs={self.num_envs}.')
    return per_item

  @property
  def rows_per_item(self) -> int:
    """Rows (transitions or unrolls) in one Reverb item."""
    rows = self.envs_per_item * (1 if self.is_sequence else self.steps_per_item)
    if self.batch_size % rows:
      raise ValueError(f'batch_size={self.batch_size} must be a multiple of the '
                       f'{rows} rows per item (envs_per_item x steps_per_item).')
    return rows

  @property
  def experience_table(self) -> str:
    """The table every item goes to (and whose inserts count env steps)."""
    return QUEUE_TABLE if self.is_sequence else REPLAY_TABLE

  @property
  def env_steps_per_item(self) -> int:
    return self.rows_per_item * (self.unroll_length if self.is_sequence else 1)

  @property
  def uses_replay_table(self) -> bool:
    return not self.is_sequence or self.replay_fraction > 0

  def item_signature(self, agent) -> Any:
    if self.is_sequence:
      return replay.SequenceWriter.item_signature(
          agent.collect_data_spec, self.unroll_length + 1, self.envs_per_item)
    return replay.NStepTransitionWriter.item_signature(agent.collect_data_spec,
                                                       self.rows_per_item)

  def items_per_batch(self, rows: Optional[int] = None) -> int:
    return max(1, (rows or self.batch_size) // self.rows_per_item)

  def warmup_vector_steps(self) -> int:
    """Vector steps of random actions before one process's first train step.

    At least `initial_collect_steps` env steps, and always enough for the table to
    serve the first batch: a transition is written n_step - 1 steps after it starts,
    an item holds steps_per_item steps' transitions of envs_per_item envs, and the
    table's MinSize wants `items_per_batch()` items. Fewer would block the first train
    call (this one process is also the only collector).
    """
    items_per_step = self.num_envs // self.envs_per_item
    item_writes = -(-self.items_per_batch() // items_per_step)  # ceil
    needed = self.n_step - 1 + self.steps_per_item * item_writes
    return max(-(-self.initial_collect_steps // self.num_envs), needed)

  def replay_rows(self, batch_size: int) -> int:
    """Rows of a (global) batch mixed in from CLEAR's replay table (0 unless 'sequence').

    Raises:
      ValueError: a replay_fraction that rounds to no replayed rows or no fresh ones
        (items hold envs_per_item unrolls each).
    """
    if not self.is_sequence:
      return 0
    rows = int(round(batch_size * self.replay_fraction / self.envs_per_item))
    rows *= self.envs_per_item
    if self.replay_fraction and rows >= batch_size:
      raise ValueError(
          f'replay_fraction={self.replay_fraction} of batch_size={batch_size} leaves no '
          f'fresh unrolls (items hold {self.envs_per_item} unrolls each): lower '
          'replay_fraction or raise batch_size.')
    if self.replay_fraction and not rows:
      raise ValueError(
          f'replay_fraction={self.replay_fraction} of batch_size={batch_size} rounds to no '
          f'replayed unrolls (items hold {self.envs_per_item} unrolls each): raise '
          'replay_fraction or batch_size.')
    return rows

  def rows_per_replica(self, num_replicas: int) -> Tuple[int, int]:
    """(fresh, replayed) rows of each replica's share of a batch.

    The split is made once, on the global batch, and each part must divide into whole
    items per replica: rounding each replica's share instead would give CLEAR on 2
    replicas no replayed rows at all (round(0.5) == 0) and twice the fresh ones.

    Raises:
      ValueError: a part that does not divide into whole items per replica.
    """
    replayed = self.replay_rows(self.batch_size)
    fresh = self.batch_size - replayed
    for name, rows in (('fresh', fresh), ('replayed', replayed)):
      if rows % (num_replicas * self.rows_per_item):
        raise ValueError(
            f'The batch\'s {rows} {name} rows (batch_size={self.batch_size}, '
            f'replay_fraction={self.replay_fraction}) do not split into whole items of '
            f'{self.rows_per_item} rows over {num_replicas} replicas: make each part a '
            f'multiple of {num_replicas * self.rows_per_item}.')
    return fresh // num_replicas, replayed // num_replicas

  # -- Builders -------------------------------------------------------------------

  def make_env(self, num_envs: Optional[int] = None, seed: Optional[int] = None):
    return tfrl.envs.make(self.env_name, num_envs=num_envs or self.num_envs,
                          seed=self.seed if seed is None else seed)

  def make_eval_env(self):
    return tfrl.envs.make(self.env_name, num_envs=min(self.num_eval_episodes, 10),
                          seed=self.seed + 10_000)

  def make_agent(self, env, train_step: tf.Variable):
    return self.agent_fn(env.time_step_spec(), env.action_spec(), train_step,
                         gamma=self.gamma)

  def build_agent(self, strategy: Optional[tf.distribute.Strategy] = None):
    """Builds (train_step, agent) for a program that needs the agent, not the env."""
    env = self.make_env(num_envs=self.envs_per_item)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
      train_step = learner_lib.new_train_step()
      agent = self.make_agent(env, train_step)
    env.close()
    return train_step, agent

  def experience_tables(self, agent, samples_per_insert: Optional[float] = None) -> List:
    """The queue and/or replay tables for this layout."""
    signature = self.item_signature(agent)
    min_items = self.items_per_batch()
    tables = []
    if self.is_sequence:
      tables.append(replay.queue_table(
          QUEUE_TABLE, max(self.queue_capacity // self.envs_per_item, min_items), signature))
    if self.uses_replay_table:
      if self.is_sequence:
        # CLEAR: every unroll goes to both tables, so once the queue can serve a batch
        # the replay table holds at least those unrolls, and sampling (with replacement)
        # needs only one. A larger minimum could block the first train step of one
        # process, which trains as soon as the queue holds one batch's fresh items.
        min_items = 1
      capacity = max(self.replay_capacity // self.rows_per_item, min_items)
      limiter = dict(min_size_to_sample=min_items, samples_per_insert=samples_per_insert)
      if self.replay_table == 'prioritized':
        tables.append(replay.prioritized_table(REPLAY_TABLE, capacity, signature,
                                               self.priority_exponent, **limiter))
      else:
        tables.append(replay.uniform_table(REPLAY_TABLE, capacity, signature, **limiter))
    return tables

  def pushed_variables(self, agent, train_step: tf.Variable) -> dict:
    """What the learner pushes and actors pull: the collect policy's variables and step."""
    return {'policy': agent.collect_policy.variables(), 'train_step': train_step}

  def tables(self, agent, train_step: tf.Variable) -> list:
    """Every table a separate reverb_server serves: experience and variables."""
    signature = replay.VariableContainer.signature(self.pushed_variables(agent, train_step))
    return (self.experience_tables(agent, self.samples_per_insert) +
            [replay.variables_table(signature)])

  def make_writer(self, client, **kwargs):
    """The experience writer; `kwargs` go to it (e.g. `flush_timeout_ms`)."""
    tables = [self.experience_table] + (
        [REPLAY_TABLE] if self.is_sequence and self.uses_replay_table else [])
    if self.is_sequence:
      return replay.SequenceWriter(client, tables, length=self.unroll_length + 1,
                                   stride=self.unroll_length,
                                   envs_per_item=self.envs_per_item, **kwargs)
    return replay.NStepTransitionWriter(client, tables, n=self.n_step, discount=self.gamma,
                                        steps_per_item=self.steps_per_item,
                                        envs_per_item=self.envs_per_item, **kwargs)

  # -- Learner inputs -------------------------------------------------------------

  def dataset_fn(self, server_address: str, agent, sample_timeout_ms: int = -1):
    """The Learner's per-replica dataset of `(train kwargs, info)` samples.

    The kwargs always hold 'experience'; with prioritized replay 'weights' (importance
    weights); and what `train_kwargs` asks for. Build the Learner with
    `use_kwargs_in_agent_train=True`. With `sample_timeout_ms` >= 0 the dataset ends
    (tf.errors.OutOfRangeError in `Learner.run`) when a sample waits longer than that for
    data, so a trainer whose collectors stopped can notice a stop signal.
    """
    signature = self.item_signature(agent)
    spec = agent.collect_data_spec

    def tagged(table, rows, is_replay):
      dataset = replay.make_dataset(server_address, table, signature, rows,
                                    experience_spec=spec,
                                    rate_limiter_timeout_ms=sample_timeout_ms)
      return dataset.map(lambda exp, info: (exp, dict(
          info, replay_mask=tf.fill([rows], float(is_replay)))))

    def dataset_fn(context: tf.distribute.InputContext):
      fresh_rows, replay_rows = self.rows_per_replica(context.num_replicas_in_sync)
      parts = [tagged(self.experience_table, fresh_rows, False)]
      if replay_rows:
        parts.append(tagged(REPLAY_TABLE, replay_rows, True))
      dataset = parts[0] if len(parts) == 1 else tf.data.Dataset.zip(tuple(parts)).map(
          lambda *samples: tf.nest.map_structure(lambda *x: tf.concat(x, 0), *samples))
      return dataset.map(self._to_train_kwargs)

    return dataset_fn

  def _to_train_kwargs(self, experience, info):
    kwargs = {'experience': experience}
    if not self.is_sequence:
      # Boundary rows (LAST -> FIRST) are no experience: weight 0. (DqnAgent masks them
      # itself; SacAgent and others do not.)
      kwargs['weights'] = replay.valid_mask(experience)
      if self.replay_table == 'prioritized':
        weights = tf.pow(tf.cast(info['table_size'], tf.float32) *
                         tf.cast(info['probability'], tf.float32),
                         -self.importance_sampling_exponent)
        kwargs['weights'] *= weights / tf.reduce_max(weights)
    for name in self.train_kwargs:
      kwargs[name] = info[name]
    return kwargs, info

  def after_train_step_fn(self, server_address: str, agent) -> Optional[Callable]:
    """Writes |TD error| back as priorities (prioritized replay), else None.

    Raises:
      ValueError: prioritized replay with an agent that reports no TD error per row
        (tf-agents' SAC, for one).
    """
    if self.replay_table != 'prioritized' or not self.uses_replay_table:
      return None
    if not isinstance(agent, dqn_agent.DqnAgent):
      raise ValueError(f"replay_table='prioritized' needs per-row TD errors, which "
                       f'{type(agent).__name__} does not report: use a DQN agent or '
                       "replay_table='uniform'.")
    updater = replay.PriorityUpdater(server_address, REPLAY_TABLE)

    def update_priorities(sample, loss_info):
      _, info = sample
      updater(info['key'], tf.abs(loss_info.extra.td_error) + 1e-6)

    return update_priorities

  def make_learner(self, root_dir: str, server_address: str, agent, train_step,
                   strategy=None, sample_timeout_ms: int = -1,
                   **kwargs) -> learner_lib.Learner:
    """A Learner fed from `server_address` with this experiment's data and settings.

    `sample_timeout_ms`: see `dataset_fn`; `kwargs` go to the Learner.
    """
    return learner_lib.Learner(
        root_dir, train_step, agent,
        experience_dataset_fn=self.dataset_fn(server_address, agent, sample_timeout_ms),
        after_train_strategy_step_fn=self.after_train_step_fn(server_address, agent),
        checkpoint_interval=self.checkpoint_interval,
        max_checkpoints_to_keep=self.max_checkpoints_to_keep,
        summary_interval=self.summary_interval, use_kwargs_in_agent_train=True,
        strategy=strategy, **kwargs)

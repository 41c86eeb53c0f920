"""`Experiment`: the settings every program of one job shares, and what they build.

`train_eval` (one process) and the separate `reverb_server`, `collect`, `train` and
`eval` programs read the same .gin file, which binds `Experiment.*` and the agent
builder. Building specs, tables and writers here is what keeps a collector's items and
the server's tables in agreement.
"""
import dataclasses
from typing import Any, Callable, Optional

import gin
import tensorflow as tf

import tfrl.envs
from tfrl import learner as learner_lib
from tfrl import replay
from tfrl.agents import dqn

REPLAY_TABLE = 'replay'


@gin.configurable
@dataclasses.dataclass
class Experiment:
  """One training job's settings (bind them in gin as `Experiment.<field>`).

  Attributes:
    env_name: a gymnasium id.
    seed: seeds TF, the collect envs (seed + 1000 * task) and the eval envs (+ 10000).
    agent_fn: builds the agent from (time_step_spec, action_spec, train_step, gamma=).
    gamma: the discount, shared by the agent and the n-step writer.
    n_step: steps per transition.
    num_envs: parallel envs per collector.
    replay_capacity: replay size in transitions.
    batch_size: transitions per train step (a multiple or a divisor of num_envs).
    samples_per_insert: with separate programs, the Reverb rate limiter's target ratio
      of sampled to inserted transitions (None: no limiter). One process fixes the ratio
      with collect/train steps per iteration instead.
    initial_collect_steps: env steps of random actions before training starts.
    collect_steps_per_iteration: (one process) vector steps collected per iteration.
    train_steps_per_iteration: train steps per `Learner.run` call.
    num_train_steps: the train step budget.
    eval_interval: train steps between evaluations.
    num_eval_episodes: episodes per evaluation.
    target_return: (one process) stop once a confirmed evaluation reaches it.
    checkpoint_interval: train steps between learner checkpoints.
    policy_checkpoint_interval: train steps between variables-only policy checkpoints.
    summary_interval: train steps between training summaries.
  """
  env_name: str = 'CartPole-v1'
  seed: int = 0
  agent_fn: Callable[..., Any] = dqn.create_dqn_agent
  gamma: float = 0.99
  n_step: int = 1
  num_envs: int = 16
  replay_capacity: int = 100_000
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
  policy_checkpoint_interval: int = 10_000
  summary_interval: int = 1_000

  @property
  def envs_per_item(self) -> int:
    """Envs packed into one Reverb item: all of them unless the batch is smaller."""
    per_item = self.num_envs if self.batch_size % self.num_envs == 0 else self.batch_size
    if self.num_envs % per_item:
      raise ValueError(f'batch_size={self.batch_size} must be a multiple or a divisor of '
                       f'num_envs={self.num_envs}.')
    return per_item

  def make_env(self, num_envs: Optional[int] = None, seed: Optional[int] = None):
    return tfrl.envs.make(self.env_name, num_envs=num_envs or self.num_envs,
                          seed=self.seed if seed is None else seed)

  def make_eval_env(self):
    return tfrl.envs.make(self.env_name, num_envs=min(self.num_eval_episodes, 10),
                          seed=self.seed + 10_000)

  def make_agent(self, env, train_step: tf.Variable):
    return self.agent_fn(env.time_step_spec(), env.action_spec(), train_step,
                         gamma=self.gamma)

  def item_signature(self, agent) -> Any:
    return replay.NStepTransitionWriter.item_signature(agent.collect_data_spec,
                                                       self.envs_per_item)

  def min_items_to_sample(self) -> int:
    return max(1, self.batch_size // self.envs_per_item)

  def replay_table(self, agent):
    """The experience table: uniform replay with the configured rate limiting."""
    min_items = self.min_items_to_sample()
    return replay.uniform_table(
        REPLAY_TABLE, max(self.replay_capacity // self.envs_per_item, min_items),
        self.item_signature(agent), min_size_to_sample=min_items,
        samples_per_insert=self.samples_per_insert)

  def make_writer(self, client):
    return replay.NStepTransitionWriter(client, REPLAY_TABLE, n=self.n_step,
                                        discount=self.gamma,
                                        envs_per_item=self.envs_per_item)

  def dataset_fn(self, server_address: str, agent):
    """The Learner's per-replica dataset function for `server_address`."""
    signature = self.item_signature(agent)

    def dataset_fn(context: tf.distribute.InputContext):
      per_replica = context.get_per_replica_batch_size(self.batch_size)
      return replay.make_dataset(server_address, REPLAY_TABLE, signature, per_replica,
                                 experience_spec=agent.collect_data_spec)

    return dataset_fn

  def pushed_variables(self, agent, train_step: tf.Variable) -> dict:
    """What the learner pushes and actors pull: the collect policy's variables and step."""
    return {'policy': agent.collect_policy.variables(), 'train_step': train_step}

  def tables(self, agent, train_step: tf.Variable) -> list:
    """Every table a separate reverb_server serves: experience and variables."""
    signature = replay.VariableContainer.signature(self.pushed_variables(agent, train_step))
    return [self.replay_table(agent), replay.variables_table(signature)]

  def build_agent(self, strategy: Optional[tf.distribute.Strategy] = None):
    """Builds (env specs, train_step, agent) for a program that only needs the agent."""
    env = self.make_env(num_envs=self.envs_per_item)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
      train_step = learner_lib.new_train_step()
      agent = self.make_agent(env, train_step)
    env.close()
    return train_step, agent

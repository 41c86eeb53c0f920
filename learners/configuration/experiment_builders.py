"""What a job builds from its settings: envs, evaluators, the agent, tables, the learner.

`ExperimentBuilders` is `learners.configuration.experiment.Experiment`'s base class. Its
methods read the fields and properties the `Experiment` dataclass defines (`num_envs`,
`tasks`, `layout`, ...), so every program of a job builds its parts from the same
calls: a collector's envs and a trainer's tables agree because both come from here.
"""
import threading
from typing import Optional

import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

import tfrl.envs
from learners.configuration import tasks as tasks_lib
from tfrl import actors
from tfrl import learner as learner_lib
from tfrl import replay
from tfrl import seeding
from tfrl import triggers as triggers_lib
from tfrl.agents import interface


class ExperimentBuilders:
  """The builders of `Experiment` (see the module docstring); not used on its own."""

  def dataset_only_iterator(self, learner: learner_lib.Learner, server_address: str,
                            agent, sample_timeout_ms: int = -1):
    """The iterator of the hybrid schedule's dataset-only steps (None without one)."""
    if not self.hybrid_schedule.active:
      return None
    return learner.make_iterator(self.layout.dataset_only_fn(server_address, agent,
                                                             sample_timeout_ms))

  def _env_name(self, task: Optional[int]):
    if self.tasks is None:
      return self.env_name
    if task is None and self.multi_task:
      # Sub-env i runs task i % len(tasks).
      return tasks_lib.TaskRoundRobin(self.tasks, self.task_index_input)
    if self.task_index_input:
      return tasks_lib.TaskEnv(self.tasks[task or 0], task or 0, len(self.tasks), True)
    return self.tasks[task or 0]

  def env_options(self) -> dict:
    """The observation settings every env of the job (collect and eval) shares."""
    keys = self.observation_keys
    if keys is not None and self.task_index_input:
      keys = (*keys, 'task')  # the entry TaskIndexObservation adds
    return dict(observation_indices=self.observation_indices,
                observation_keys=keys,
                frame_stack=self.frame_stack, atari=self.atari,
                terminal_on_life_loss=self.terminal_on_life_loss,
                fire_reset=self.fire_reset, clip_reward=self.clip_reward,
                normalize_reward=self.gamma if self.normalize_reward else None,
                backend=self.env_backend)

  def make_env(self, num_envs: Optional[int] = None, seed: Optional[int] = None,
               collect: bool = True, task: Optional[int] = None):
    """A collector's envs (`num_envs`, in `env_workers` processes), or with
    collect=False the same envs in this process (e.g. to read their specs); of task
    `task` with `tasks` (default: the first)."""
    return tfrl.envs.make(self._env_name(task), num_envs=num_envs or self.num_envs,
                          seed=self.collect_seed() if seed is None else seed,
                          num_workers=self.env_workers if collect else 0,
                          step_timeout_s=self.env_step_timeout_s if collect else 0,
                          **self.env_options())

  def collect_seed(self, task_id: int = 0) -> int:
    """The first env seed of collector `task_id`'s envs (sub-env i: it + i)."""
    return seeding.derive(self.seed, seeding.COLLECT, task_id)

  @property
  def eval_seed(self) -> int:
    """The first evaluation's first env seed (`tfrl.actors.Evaluator`'s seed)."""
    return seeding.derive(self.seed, seeding.EVALUATE)

  @property
  def confirm_seed(self) -> int:
    """The first confirmation's first env seed: a stream no evaluation draws from."""
    return seeding.derive(self.seed, seeding.CONFIRM)

  def make_eval_env(self, video_dir: Optional[str] = None, task: Optional[int] = None,
                    num_episodes: Optional[int] = None, seed: Optional[int] = None):
    """The envs that play an evaluation of `num_episodes` (num_eval_episodes), at most
    max_eval_envs at once, of task `task` with `tasks`, reset with `seed` (eval_seed); with
    `video_dir`, each evaluation's episodes are recorded there as MP4s
    (`tfrl.envs.video`)."""
    episodes = num_episodes or self.num_eval_episodes
    return tfrl.envs.make(self._env_name(task), num_envs=min(episodes, self.max_eval_envs),
                          seed=self.eval_seed if seed is None else seed,
                          step_timeout_s=self.env_step_timeout_s, video_dir=video_dir,
                          video_episodes=episodes, **self.env_options())

  def make_evaluator(self, policy, video_dir: Optional[str] = None,
                     stop_event: Optional[threading.Event] = None,
                     confirm: bool = False) -> tasks_lib.TaskEvaluators:
    """`policy`'s evaluator on every task's eval envs (env_name's alone without
    tasks), num_eval_episodes on each; close() closes the envs. `video_dir` records the
    first task's; a set `stop_event` ends an evaluation under way
    (`tfrl.actors.EvaluationStopped`). With `confirm`, the confirmations' evaluator:
    num_confirm_episodes on each task, from the confirmation seed stream."""
    episodes = self.num_confirm_episodes if confirm else self.num_eval_episodes
    seed = self.confirm_seed if confirm else self.eval_seed
    envs = [self.make_eval_env(video_dir if i == 0 else None, task=i, num_episodes=episodes,
                               seed=seed)
            for i in range(len(self.task_names))]
    return tasks_lib.TaskEvaluators(
        {name: actors.Evaluator(env, policy, episodes, seed=seed, stop_event=stop_event)
         for name, env in zip(self.task_names, envs)}, envs)

  def make_agent(self, env, train_step: tf.Variable):
    """`agent_fn`'s agent for `env`'s specs, with `gamma` and the optional arguments
    it takes (`dataset_dir`, `num_train_steps`); build it under a strategy's scope for
    a distributed learner (`build_agent` does)."""
    return self.agent_fn(env.time_step_spec(), env.action_spec(), train_step,
                         gamma=self.gamma, **interface.offered_kwargs(
                             self.agent_fn, dataset_dir=self.dataset_dir,
                             num_train_steps=self.num_train_steps))

  def build_agent(self, strategy: Optional[tf.distribute.Strategy] = None):
    """Builds (train_step, agent) for a program that needs the agent, not the env.

    Raises:
      ValueError: the agent trains on inputs the data layout does not provide.
    """
    env = self.make_env(num_envs=self.layout.envs_per_item, collect=False)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
      train_step = learner_lib.new_train_step()
      agent = self.make_agent(env, train_step)
    env.close()
    self.layout.check_agent(agent)
    return train_step, agent

  def pushed_variables(self, agent, train_step: tf.Variable) -> dict:
    """What the learner pushes and actors pull: the collect policy's variables, the
    train step, and the layout's own (prioritized replay's largest priority)."""
    return {'policy': agent.collect_policy.variables(), 'train_step': train_step,
            **self.layout.pushed_variables()}

  def tables(self, agent, train_step: tf.Variable, dataset_items: int = 0) -> list:
    """Every table a separate reverb_server serves: experience and variables.

    Args:
      agent, train_step: the job's.
      dataset_items: the size of `dataset_dir` in items (`feeder.LoadPlan.items`): its
        table samples only once it holds them all. Offline, the replay table has no
        rate limiter (nothing is inserted while training).
    """
    signature = replay.VariableContainer.signature(self.pushed_variables(agent, train_step))
    samples_per_insert = None if self.offline else self.samples_per_insert
    extra = dict(dataset_items=dataset_items) if dataset_items else {}
    return (self.layout.tables(agent, samples_per_insert, **extra) +
            [replay.variables_table(signature)])

  def make_learner(self, root_dir: str, server_address: str, agent, train_step,
                   strategy=None, sample_timeout_ms: int = -1,
                   **kwargs) -> learner_lib.Learner:
    """A Learner fed from `server_address` with this experiment's data and settings.

    Args:
      root_dir, server_address, agent, train_step, strategy: see `Learner`.
      sample_timeout_ms: see `tfrl.layouts.Layout.dataset_fn`.
      **kwargs: more `Learner` arguments (triggers, checkpoint_extras, ...); the
        layout's pushed variables join checkpoint_extras.

    Returns:
      The Learner.

    Raises:
      ValueError: the agent does not fit the layout (e.g. prioritized replay without
        priorities, cloning costs without replayed unrolls).
    """
    if self.summary_interval and self.summary_interval > 0:
      # 'train_steps_per_sec' in root_dir/train beside the agent's losses.
      kwargs['triggers'] = list(kwargs.get('triggers') or []) + [
          triggers_lib.StepsPerSecondLogTrigger(train_step, self.summary_interval,
                                                log_to_terminal=False)]
    # The layout's state (prioritized replay's largest priority) is checkpointed with
    # the agent: a resumed job inserts, and pushes to its collectors, the restored one.
    kwargs['checkpoint_extras'] = {**self.layout.pushed_variables(),
                                   **(kwargs.get('checkpoint_extras') or {})}
    return learner_lib.Learner(
        root_dir, train_step, agent,
        experience_dataset_fn=self.layout.dataset_fn(server_address, agent,
                                                      sample_timeout_ms),
        train_inputs_fn=self.layout.train_inputs_fn(agent),
        after_train_strategy_step_fn=self.layout.after_train_step_fn(server_address, agent),
        checkpoint_interval=self.checkpoint_interval,
        max_checkpoints_to_keep=self.max_checkpoints_to_keep,
        summary_interval=self.summary_interval, strategy=strategy, **kwargs)

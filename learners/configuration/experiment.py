"""`Experiment`: the settings every program of one job shares, and its data layout.

`train_eval` (one process) and the separate `reverb_server`, `collect`, `train` and
`eval` programs read the same .gin file, which binds `Experiment.*`, the agent builder
and the layout's own settings. `Experiment.layout` is the job's data-layout builder
(`tfrl.layouts`): the tables, writer, dataset and train hooks every program builds from
the same calls, which keeps a collector's items and the server's tables in agreement.

The agent builder names the layout (`tfrl.agents.interface.trains_from`):
- `TransitionReplay` (DQN, SAC): n-step transitions in a uniform or prioritized
  replay table (`TransitionReplay.n_step = 3`, `TransitionReplay.prioritized = True`).
- `SequenceQueue` (PPO, IMPALA, APPO): unrolls in a FIFO queue, each sampled once
  (`SequenceQueue.unroll_length = 128`).
- `SequenceQueueAndReplay` (CLEAR, `create_clear_agent`): the queue plus a replay table
  that `replay_fraction` of each batch comes from
  (`SequenceQueueAndReplay.replay_fraction = 0.5`; it also takes `SequenceQueue.*`).
The job's shared settings (`num_envs`, `batch_size`, `gamma`, `num_train_steps`) stay
here; Python callers without gin give the layout's own in `layout_settings`. What a
program builds from them (envs, evaluators, the agent, tables, the learner) comes from
the dataclass's base class, `experiment_builders.ExperimentBuilders`.
"""
import dataclasses
import functools
from typing import Any, Callable, Dict, Optional, Tuple, Union

import gin
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)

from learners.configuration import experiment_builders
from learners.configuration import experiment_checks
from learners.configuration import tasks as tasks_lib
from learners.configuration import validation
from tfrl import layouts
from tfrl.agents import builders  # the built-in builders, registered with gin
from tfrl.agents import dqn
from tfrl.agents import interface
from tfrl.datasets import schedule
from tfrl.envs import sources


@gin.configurable
@dataclasses.dataclass
class Experiment(experiment_builders.ExperimentBuilders):
  """One training job's settings (bind them in gin as `Experiment.<field>`).

  Attributes:
    env_name: the env: a gymnasium id ('CartPole-v1'); 'module:function', an
      importable function returning a gymnasium env (the form flags and gin files can
      name); in Python the function itself, or an env object that every env of the
      job copies (`tfrl.envs.sources`).
    observation_indices: keep only these entries of the (flat) observation, in order
      (None: all); e.g. (0, 2) is CartPole without its velocities.
    observation_keys: keep only these keys of a Dict observation (None: all); e.g.
      ('image', 'direction') of MiniGrid, without its mission text.
    frame_stack: stack the last k observations (0: none); images come out channel-last
      [H, W, k * C] in their own dtype (see `tfrl.envs.make`).
    atari: gymnasium's AtariPreprocessing and 4 stacked frames, uint8 [84, 84, 4]
      (needs the 'atari' extra; see `tfrl.envs.make`).
    terminal_on_life_loss: (atari) a lost life ends the training episode while the
      game goes on (RL-Zoo's AtariWrapper; `tfrl.envs.atari_wrappers`).
    fire_reset: (atari) FIRE after every reset in games that have it (AtariWrapper).
    clip_reward: rewards clipped to their sign (AtariWrapper). With any of these three
      the returns reported (training episodes, evaluations) are whole games' raw
      scores; evaluation envs take the same options, as RL-Zoo's.
    normalize_reward: divide training rewards by the running standard deviation of
      the return discounted by `gamma`, clipped to [-10, 10] (SB3's VecNormalize
      norm_reward, which RL-Zoo's MuJoCo PPO settings use; `tfrl.envs.reward_normalization`).
      Reported returns stay raw. Its statistics live in the envs: a restarted job
      starts them afresh.
    env_backend: what steps the envs: 'gymnasium' (its vector envs, in this process
      or in `env_workers` processes), or 'envpool' (the 'envpool' extra: EnvPool's C++
      envs in its own threads, stepping while the policy acts; registered ids of the
      classic-control, Box2D, MuJoCo and Atari envs it has; no env_workers,
      observation_indices or observation_keys: `tfrl.envs.envpool_env`). Collect and
      eval envs alike.
    seed: seeds TF, Python and NumPy (the networks' first weights, the policies'
      sampling) and, through `tfrl.seeding.derive`, the envs: each launched
      collector's (by its task_id; a one-process job's are task 0), the evaluations'
      and the confirmations' are separate streams, and no two experiment seeds share
      an env seed.
    deterministic: make TensorFlow's ops deterministic too (process-wide, for good:
      `tf.config.experimental.enable_op_determinism`). With it, two one-process runs
      of one seed give the same evaluations where the data path allows: the queue
      layouts (PPO, IMPALA, APPO) do; replay sampling does not (Reverb's selectors draw
      from a generator no seed reaches), so DQN, SAC and CLEAR's replay half vary.
    agent_fn: builds the agent from (time_step_spec, action_spec, train_step, gamma=),
      and `dataset_dir=`, `num_train_steps=` where it declares them
      (`tfrl.agents.interface`);
      it names the data layout (`tfrl.agents.interface.trains_from`).
    gamma: the discount, shared by the agent and the n-step writer.
    layout_settings: the layout's own settings as keyword arguments, for Python
      callers (gin configs bind them on the layout class instead); they win over gin.
    num_envs: parallel envs per collector.
    env_workers: step a collector's envs in this many worker processes, so its policy
      and Reverb writer run while they step (`tfrl.envs.make(num_workers=)`); 0 steps
      them in the collector's own process. Worth it when the envs cost as much as the
      policy and the writer (Atari, MuJoCo) and a core is free.
    env_step_timeout_s: the longest one env step may take before the program ends
      with EnvStepTimeoutError naming the env (a hung simulator; status 5 where the
      env steps in the program's own process); 0 disables.
    batch_size: rows per train step (a multiple or a divisor of num_envs).
    samples_per_insert: with separate programs, the replay table's target ratio of
      sampled to inserted rows (None: no limiter). One process fixes the ratio with
      collect/train steps per iteration instead.
    initial_collect_steps: env steps of random actions before training starts (the
      replay layout's warm-up; on-policy layouts have none and ignore it).
    collect_steps_per_iteration: (one process) vector steps collected per iteration.
    train_steps_per_iteration: train steps per `Learner.run` call ('sequence' in one
      process: as many as the queue holds batches for, up to this).
    num_train_steps: the train step budget.
    eval_interval: train steps between evaluations.
    eval_every_env_steps: when set, evaluations come instead at the first train step
      at or past each multiple of this many env steps: an env-step grid, as SB3's and
      RL-Zoo's evaluations are placed, whatever a train step's env steps (a comparison
      evaluates both sides on one grid).
    log_interval: (one process) train steps between progress lines (None: one at each
      evaluation). A line between evaluations gives the training episodes' return
      (the collect policy's, last 100 episodes) and no eval return.
    max_train_seconds: (one process) a wall-clock budget: training stops at the first
      iteration past this many seconds from the first train step, then evaluates,
      checkpoints and exports as at the end of num_train_steps (None: no budget).
    dataset_dir: (one process) train from this RLDS dataset (`tfrl.datasets`:
      episodes recorded by `tfrl-eval --record_dir` or any RLDS writer, with this
      job's observations and actions), written through the collectors' writer before
      the first train step. Offline (the default): it is the replay table, nothing is
      collected and the envs only evaluate. Hybrid (`TransitionReplay.dataset_fraction`):
      it fills a table of its own, collection goes on, and each batch mixes both. For
      transition-replay agents (DQN, SAC, BC); its table must hold it. A finished
      job's Reverb checkpoint serves too (its root, its reverb/ directory or one
      checkpoint: `tfrl.datasets.reverb_checkpoint`), restored instead of written.
      None: collect as usual.
    record_dir: (one process) also record every collected episode, random warm-up
      included, as an RLDS dataset in this new directory (a job's whole experience, as
      D4RL's 'medium-replay' sets are). Not with terminal_on_life_loss (a dataset's
      episodes would be lives).
    num_eval_episodes: episodes per evaluation.
    target_return: stop once an evaluation reaches it and a confirmation, on
      `num_confirm_episodes` fresh episodes, does too.
    num_confirm_episodes: the episodes a confirmation averages: 100, over which
      gymnasium's reward thresholds (CartPole-v1's 475, LunarLander's 200) are
      defined. Its episodes come from a seed stream of their own, so no evaluation
      has played them.
    max_eval_envs: the most envs an evaluation or a confirmation plays at once: 10,
      as the peers' evaluations in benchmarks/ do. More play a confirmation's
      episodes in fewer policy calls (the test suite's jobs use 100); the episodes
      stay fresh ones from the same seed stream, so the rule does not change.
    checkpoint_interval: train steps between learner checkpoints.
    max_checkpoints_to_keep: learner checkpoints kept (older ones are deleted).
    policy_checkpoint_interval: train steps between variables-only policy checkpoints.
    saved_model_interval: train steps between exports of the policy SavedModels, each
      also a new TF Serving version (`policies/serving/<name>/<step>/`); None: at a
      resumed job's start and at its end only.
    summary_interval: train steps between training summaries.
    tasks: (one process) several tasks in place of env_name: env names (as env_name
      takes them) whose envs have the same observation and action specs. Every
      evaluation evaluates every task (the job's eval return is their mean), and the
      result reports each one's best and final return
      (`learners/configuration/tasks.py`). How they are trained is `task_mode`. None:
      train on env_name.
    task_mode: 'sequence': trained in order, `task_env_steps` env steps each,
      `task_cycles` times round (CLEAR's setting: the report says what each task
      forgot); 'multi_task': all at once, sub-env i of the num_envs running task
      i % len(tasks) (no env_workers).
    task_env_steps: (sequence) env steps on one task before the next: one count for
      every task, or a tuple with one per task (a harder task may need longer).
    task_cycles: (sequence) times round the task list; after the last, the last task
      goes on.
    task_target_returns: (with tasks, in place of target_return) one threshold per
      task, in the tasks' order: the target is reached when every task's return
      reaches its own (and a confirmation repeats it). None: target_return on the
      tasks' mean return.
    task_index_input: tell the agent which task each observation comes from: every
      task's observations gain a Discrete entry 'task' (a Dict; a plain observation
      becomes {'observation': ..., 'task': ...};
      `learners.configuration.tasks.TaskIndexObservation`), which the networks' encoders
      one-hot. Off by default, as in CLEAR, whose agent is not told the task.
  """
  env_name: Any = 'CartPole-v1'  # str, a function or a gymnasium.Env: see above
  observation_indices: Optional[Tuple[int, ...]] = None
  observation_keys: Optional[Tuple[str, ...]] = None
  frame_stack: int = 0
  atari: bool = False
  terminal_on_life_loss: bool = False
  fire_reset: bool = False
  clip_reward: bool = False
  normalize_reward: bool = False
  env_backend: str = 'gymnasium'
  seed: int = 0
  deterministic: bool = False
  agent_fn: Callable[..., Any] = dqn.create_dqn_agent
  gamma: float = 0.99
  layout_settings: Optional[Dict[str, Any]] = None
  num_envs: int = 16
  env_workers: int = 0
  env_step_timeout_s: float = 60.0
  batch_size: int = 64
  samples_per_insert: Optional[float] = None
  initial_collect_steps: int = 1_000
  collect_steps_per_iteration: int = 1
  train_steps_per_iteration: int = 1
  num_train_steps: int = 100_000
  eval_interval: int = 1_000
  eval_every_env_steps: Optional[int] = None
  log_interval: Optional[int] = None
  max_train_seconds: Optional[float] = None
  dataset_dir: Optional[str] = None
  record_dir: Optional[str] = None
  num_eval_episodes: int = 10
  target_return: Optional[float] = None
  num_confirm_episodes: int = 100
  max_eval_envs: int = 10
  checkpoint_interval: int = 10_000
  max_checkpoints_to_keep: int = 3
  policy_checkpoint_interval: int = 10_000
  saved_model_interval: Optional[int] = None
  summary_interval: int = 1_000
  tasks: Optional[Tuple[str, ...]] = None
  task_mode: str = 'sequence'
  task_env_steps: Union[int, Tuple[int, ...]] = 0
  task_cycles: int = 1
  task_target_returns: Optional[Tuple[float, ...]] = None
  task_index_input: bool = False

  def __post_init__(self):
    """Raises:
      learners.configuration.validation.ValidationError: a field outside what it
        accepts (one line naming the field, its value and what is allowed), an agent
        builder's setting outside its range (`validation.AGENT_RULES`), or an unknown
        env id.
      ValueError: settings that do not fit together
        (`learners.configuration.experiment_checks`, and the layout's).
    """
    validation.validate_experiment(self)
    validation.validate_agent_settings(self.agent_fn, builders.AGENT_CLASSES)
    experiment_checks.check_settings_fit(self)

  @functools.cached_property
  def layout(self) -> layouts.Layout:
    """The data-layout builder the agent names (one per Experiment: it holds the
    layout's variables), with its gin-bound settings and `layout_settings`.

    Raises:
      tfrl.agents.interface.AgentProtocolError: agent_fn names no layout.
      learners.configuration.validation.ValidationError: a layout setting outside what
        it accepts, or one this layout does not have.
      ValueError: gin bindings on a layout the agent does not train from, or layout
        settings that do not fit together.
    """
    layout_class = interface.layout_of(self.agent_fn)
    for other in layouts.ALL:
      if not issubclass(layout_class, other) and gin.get_bindings(other):
        bound = ', '.join(f'{other.__name__}.{name}' for name in gin.get_bindings(other))
        raise ValueError(f'{bound} bound, but the agent trains from {layout_class.__name__}'
                         ' (its builder names it): bind the settings on that layout.')
    settings = dict(self.layout_settings or {})
    validation.validate_layout_settings(
        layout_class, {**layouts.bound_settings(layout_class), **settings})
    if issubclass(layout_class, layouts.TransitionReplay):
      settings.update(gamma=self.gamma, beta_anneal_steps=self.num_train_steps)
    return layouts.build(layout_class, self.num_envs, self.batch_size, **settings)

  @property
  def hybrid_schedule(self) -> schedule.HybridSchedule:
    """Which train steps take online rows (a hybrid layout's; else all of them)."""
    return getattr(self.layout, 'hybrid_schedule', schedule.HybridSchedule())

  @property
  def offline(self) -> bool:
    """Trains from `dataset_dir` alone (no collection): a dataset and no
    `TransitionReplay.dataset_fraction` (which mixes it with collected experience)."""
    return self.dataset_dir is not None and not getattr(self.layout, 'hybrid', False)

  @property
  def task_sequence(self) -> Optional[tasks_lib.TaskSequence]:
    """The task sequence `tasks` names, by display name (None without one)."""
    if self.tasks is None or self.multi_task:
      return None
    steps = self.task_env_steps
    return tasks_lib.TaskSequence(self.task_names,
                                  steps if isinstance(steps, int) else tuple(steps),
                                  self.task_cycles)

  @property
  def target(self) -> tasks_lib.Target:
    """The job's target: `target_return` on the eval return, or each task's
    `task_target_returns`."""
    return tasks_lib.Target(self.target_return, None if self.task_target_returns is None
                            else dict(zip(self.task_names, self.task_target_returns)))

  @property
  def multi_task(self) -> bool:
    """Every task trains at once (`task_mode` 'multi_task' with `tasks`)."""
    return self.tasks is not None and self.task_mode == 'multi_task'

  @property
  def task_names(self) -> Tuple[str, ...]:
    """What to call each task in results and summaries: `tasks`' display names, or
    env_name's alone."""
    return tuple(sources.display_name(name) for name in (self.tasks or [self.env_name]))

  @property
  def env_display_name(self) -> str:
    """What the job trains on, for messages: the env, or its task sequence."""
    if self.tasks is None:
      return sources.display_name(self.env_name)
    kind = f'{len(self.tasks)} tasks at once' if self.multi_task else (
        f'a sequence of {len(self.tasks)} tasks')
    return f'{kind} ({", ".join(self.task_names)})'

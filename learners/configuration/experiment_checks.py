"""The `Experiment` settings that do not fit together, refused at configuration time.

Each field's own range is `learners.configuration.validation`'s; these are the rules
between fields (Atari options without Atari, a dataset for an agent that cannot use one,
tasks and their per-task counts), each one line that says what to change. The data
layout's own rules (a batch its items cannot fill) run last, by building it.
"""
from typing import Optional, Sequence, Tuple

import gymnasium as gym

from tfrl import envs
from tfrl import layouts
from tfrl.agents import builders
from tfrl.agents import interface

# (gin file, env_name, agent builder name) of a config; see `learners.configuration.config`.
ConfigSummary = Tuple[str, Optional[str], Optional[str]]


def check_settings_fit(experiment) -> None:
  """Refuses settings of `experiment` (a `learners.configuration.experiment.Experiment`)
  that do not fit together.

  Args:
    experiment: the Experiment, its fields already validated one by one.

  Raises:
    ValueError: the first rule the settings break, naming the fields and the way out;
      or, from building the layout, settings the layout cannot serve.
  """
  if (experiment.terminal_on_life_loss or experiment.fire_reset) and not experiment.atari:
    raise ValueError('terminal_on_life_loss and fire_reset are Atari options: they '
                     'need atari=True.')
  if experiment.env_backend == 'envpool' and experiment.env_workers:
    raise ValueError(f'Experiment.env_workers = {experiment.env_workers} with '
                     "env_backend = 'envpool': EnvPool steps the envs in its own "
                     'threads; set env_workers = 0.')
  if (experiment.dataset_dir is not None
      and not isinstance(experiment.layout, layouts.TransitionReplay)):
    raise ValueError(f'Experiment.dataset_dir is for transition-replay agents (DQN, SAC); '
                     f'this agent trains from {type(experiment.layout).__name__}.')
  if getattr(experiment.layout, 'hybrid', False) and experiment.dataset_dir is None:
    raise ValueError('TransitionReplay.dataset_fraction mixes a dataset into each batch: '
                     'set Experiment.dataset_dir too.')
  if (experiment.tasks is not None and not experiment.multi_task
      and not experiment.task_env_steps):
    raise ValueError('Experiment.tasks trains them one after the other: set '
                     'Experiment.task_env_steps, the env steps on each task.')
  # Per-task env step counts that do not fit the tasks fail now.
  experiment.task_sequence  # pylint: disable=pointless-statement
  if experiment.tasks is not None and len(set(experiment.task_names)) < len(experiment.tasks):
    raise ValueError(f'Experiment.tasks = {tuple(experiment.tasks)} names a task twice: '
                     'list each once (task_cycles goes round the list again).')
  if experiment.multi_task and experiment.num_envs % len(experiment.tasks):
    raise ValueError(f'Experiment.num_envs = {experiment.num_envs} with '
                     f"{len(experiment.tasks)} tasks in 'multi_task' mode: each task gets "
                     'an equal share of the envs; make num_envs a multiple of the number '
                     'of tasks.')
  targets = experiment.task_target_returns
  if targets is not None and (experiment.tasks is None
                              or len(targets) != len(experiment.tasks)):
    raise ValueError(f'Experiment.task_target_returns = {tuple(targets)}'
                     ' gives each task of Experiment.tasks its threshold: one per task '
                     f'({len(experiment.tasks or ())} tasks).')
  if experiment.task_target_returns is not None and experiment.target_return is not None:
    raise ValueError('Experiment.target_return and Experiment.task_target_returns are '
                     'two targets: set one (and the other to None).')
  if experiment.task_index_input and experiment.tasks is None:
    raise ValueError('Experiment.task_index_input tells the agent its task: set '
                     'Experiment.tasks too.')
  if experiment.multi_task and experiment.env_workers:
    raise ValueError("Experiment.env_workers with 'multi_task' tasks: the tasks share the "
                     'envs in this process; set env_workers = 0.')
  if experiment.tasks is not None and experiment.dataset_dir is not None:
    raise ValueError('Experiment.tasks with Experiment.dataset_dir: a dataset holds one '
                     "task's experience; train on a task sequence or from a dataset.")
  if experiment.record_dir is not None and experiment.terminal_on_life_loss:
    raise ValueError('Experiment.record_dir with terminal_on_life_loss would record '
                     'lives, not games: record without terminal_on_life_loss.')
  # Build the layout now: settings it cannot serve (a batch that items cannot fill, a
  # replay share that rounds to nothing) fail at configuration time.
  experiment.layout.items_per_train_step  # pylint: disable=pointless-statement


def _action_kind(space: gym.Space) -> Optional[str]:
  if isinstance(space, gym.spaces.Discrete):
    return 'discrete'
  if isinstance(space, gym.spaces.Box):
    return 'continuous'
  return None  # MultiDiscrete, Tuple, ...: left to the agent to accept or refuse


def check_agent_fits_env(experiment, configs: Sequence[ConfigSummary] = ()) -> None:
  """Refuses an agent builder that declares action kinds (`interface.acts_in`) the
  job's env (each task's) does not have, before anything is built.

  Args:
    experiment: a `learners.configuration.experiment.Experiment`.
    configs: the bundled configs, to name those that fit the env.

  Raises:
    ValueError: one line naming the builder, the env, both kinds, and the configs for
      this env (or the builders) that act in its kind.
  """
  kinds = interface.action_kinds_of(experiment.agent_fn)
  if kinds is None:
    return
  for env in experiment.tasks or (experiment.env_name,):
    try:
      space = envs.action_space(env)
    except Exception:  # pylint: disable=broad-except (the job reports it where it makes the env)
      continue
    kind = _action_kind(space)
    if kind is None or kind in kinds:
      continue
    builder = getattr(experiment.agent_fn, '__name__', None) or getattr(
        getattr(experiment.agent_fn, 'func', None), '__name__', repr(experiment.agent_fn))
    env_name = envs.sources.display_name(env)
    fitting = sorted(name for name, env_of, agent in configs
                     if env_of == env_name and agent in builders.BUILDERS and
                     kind in (interface.action_kinds_of(builders.BUILDERS[agent]) or ()))
    if fitting:
      way_out = f'configs for {env_name}: {", ".join(fitting)}'
    else:
      way_out = 'agents that can: ' + ', '.join(
          name for name, fn in builders.BUILDERS.items()
          if kind in (interface.action_kinds_of(fn) or ()))
    raise ValueError(f'{builder} acts in {" or ".join(kinds)} action spaces; {env_name} '
                     f'has {kind} actions ({space}). Use another agent ({way_out}).')

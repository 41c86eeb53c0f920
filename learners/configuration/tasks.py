"""Task sequences: which task a job trains on at each env step, and what it forgot.

CLEAR (Rolnick et al. 2019) is measured on a sequence of tasks trained one after the
other (A, then B, then C, optionally cycling): an agent that forgets loses its return on
A while it trains on C. An `Experiment` with `tasks` trains on task k for
`task_env_steps` env steps (one count, or one per task), then on task k + 1,
`task_cycles` times round the list, and evaluates every task at each evaluation
(`learners/job/one_process_job.py`). Also here: the multi-task envs (`TaskRoundRobin`), the
task index input, the evaluation of every task (`TaskEvaluators`) and the job's target
(`Target`: on the tasks' mean return, or a threshold per task).

The schedule is a function of the job's env steps alone, which the checkpoint holds, so
a resumed job trains on the task it was on when it stopped.
"""
import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np

from learners.configuration import transfer
import tfrl.envs
from tfrl.envs import sources


@dataclasses.dataclass(frozen=True)
class TaskSequence:
  """Tasks trained in order, `env_steps_per_task` each, `cycles` times round.

  Attributes:
    names: the tasks' env names (as `Experiment.env_name` takes them), in order.
    env_steps_per_task: env steps on one task before the next: one count for every
      task, or one per task in the list's order (a harder task may need longer).
    cycles: times round the whole list; after the last, the last task goes on.

  Raises:
    ValueError: per-task counts that do not match the tasks one to one.
  """
  names: Tuple[str, ...]
  env_steps_per_task: Union[int, Tuple[int, ...]]
  cycles: int = 1

  def __post_init__(self):
    if (not isinstance(self.env_steps_per_task, int) and
        len(self.env_steps_per_task) != len(self.names)):
      raise ValueError(
          f'Experiment.task_env_steps = {tuple(self.env_steps_per_task)} gives '
          f'{len(self.env_steps_per_task)} counts for {len(self.names)} tasks: give one '
          'count for all, or one per task.')

  def _phase_env_steps(self) -> List[int]:
    """Each phase's env steps, phases in order (the list `cycles` times)."""
    per_task = ([self.env_steps_per_task] * len(self.names)
                if isinstance(self.env_steps_per_task, int)
                else list(self.env_steps_per_task))
    return per_task * self.cycles

  def index_at(self, env_steps: int) -> int:
    """The index of the task trained at `env_steps` (the last one past the end)."""
    starts = [start for start, _ in self.switches()]
    phase = int(np.searchsorted(starts, env_steps, side='right')) - 1
    return phase % len(self.names)

  def switches(self) -> List[Tuple[int, int]]:
    """(env step, task index) of every phase's start, the first at 0."""
    starts = np.concatenate([[0], np.cumsum(self._phase_env_steps())[:-1]])
    return [(int(start), phase % len(self.names)) for phase, start in enumerate(starts)]


# Relative tolerance of a target comparison: a few float32 roundings (eps ~1.2e-7).
TARGET_RTOL = 1e-6


def at_least(value: float, threshold: float) -> bool:
  """value >= threshold, up to float32 rounding of either (`TARGET_RTOL`)."""
  return value >= threshold - TARGET_RTOL * max(1.0, abs(threshold))


@dataclasses.dataclass(frozen=True)
class Target:
  """The return that ends a job once a confirmation repeats it: `mean_return` on the
  eval return (with tasks, their mean), or every task's `per_task` threshold.

  Attributes:
    mean_return: `Experiment.target_return` (None: not this kind).
    per_task: task name -> its threshold (`Experiment.task_target_returns`; None: not
      this kind).
  """
  mean_return: Optional[float] = None
  per_task: Optional[Mapping[str, float]] = None

  @property
  def is_set(self) -> bool:
    return self.mean_return is not None or self.per_task is not None

  def reached(self, result: Mapping[str, Any]) -> bool:
    """Whether an evaluation (`TaskEvaluators.run`'s result) reaches the target, within
    float32 rounding: an optimum of exactly 0.6 summed in float32 reads 0.59999999."""
    if self.per_task is not None:
      return all(at_least(result['task_returns'][name], threshold)
                 for name, threshold in self.per_task.items())
    return self.mean_return is not None and at_least(result['AverageReturn'],
                                                     self.mean_return)

  def __str__(self) -> str:
    if self.per_task is not None:
      return ', '.join(f'{name} {threshold:g}' for name, threshold in self.per_task.items())
    return f'{self.mean_return:g}' if self.mean_return is not None else 'none'


def check_same_specs(specs: Mapping[str, Tuple[Any, Any]]) -> None:
  """Refuses tasks whose envs differ in observation or action spec.

  Args:
    specs: task name -> (time_step_spec, action_spec) of its env, in the list's order.

  Raises:
    ValueError: naming the first task and one that differs from it, and the spec.
  """
  (first, (first_steps, first_actions)), *others = specs.items()
  for name, (steps, actions) in others:
    for what, want, got in (('observation', first_steps.observation, steps.observation),
                            ('action', first_actions, actions)):
      if want != got:
        raise ValueError(f'Experiment.tasks: {name!r} has another {what} spec than '
                         f'{first!r} (every task must share them): {got} vs {want}.')


def returns_report(history: Sequence[Mapping[str, Any]], names: Sequence[str]
                   ) -> Dict[str, Any]:
  """Each task's best, final and mean return over a job's evaluations.

  Args:
    history: evaluations in order, each with 'env_steps' and 'task_returns' (task name
      -> average return).
    names: the tasks.

  Returns:
    'tasks': per task name, 'best_return' (over every evaluation), 'final_return' (the
    last evaluation's) and 'mean_return' (the area under its return-vs-env-steps curve
    over the evaluated span, divided by the span: CLEAR's cumulative performance);
    'mean_return', their mean over the tasks.

  Raises:
    ValueError: an empty history.
  """
  if not history:
    raise ValueError('A task report needs at least one evaluation.')
  steps = np.array([row['env_steps'] for row in history], dtype=np.float64)
  span = steps[-1] - steps[0]
  per_task = {}
  for name in names:
    returns = np.array([row['task_returns'][name] for row in history], dtype=np.float64)
    area = np.sum((returns[1:] + returns[:-1]) / 2 * np.diff(steps))  # trapezoids
    per_task[name] = {'best_return': float(returns.max()),
                      'final_return': float(returns[-1]),
                      'mean_return': float(area / span) if span > 0 else float(returns.mean())}
  return {'tasks': per_task,
          'mean_return': float(np.mean([t['mean_return'] for t in per_task.values()]))}


def forgetting_report(history: Sequence[Mapping[str, Any]], sequence: TaskSequence
                      ) -> Dict[str, Any]:
  """`returns_report` of a sequence, with what each task forgot and the transfer
  between the tasks.

  Args:
    history: evaluations in env-step order, each with 'env_steps' and 'task_returns'
      (task name -> average return).
    sequence: the tasks' schedule.

  Returns:
    `returns_report`'s, each task also with 'forgetting' (its best return less its
    final one); 'mean_forgetting' over the tasks trained before the last phase's task
    (the ones the sequence can make it forget; NaN while still on the first);
    'switches' (env step, task name) for drawing; and `transfer.transfer_report`'s
    'phases', 'accuracy_matrix', 'baseline_returns', 'backward_transfer' and
    'forward_transfer'.

  Raises:
    ValueError: an empty history.
  """
  report = returns_report(history, sequence.names)
  per_task = report['tasks']
  for task in per_task.values():
    task['forgetting'] = task['best_return'] - task['final_return']
  last_step = history[-1]['env_steps']
  started = dict.fromkeys(sequence.names[i] for start, i in sequence.switches()
                          if start < last_step)
  current = sequence.names[sequence.index_at(last_step)]
  earlier = [name for name in started if name != current]
  report['mean_forgetting'] = (float(np.mean([per_task[n]['forgetting'] for n in earlier]))
                               if earlier else float('nan'))
  report['switches'] = [(step, sequence.names[i]) for step, i in sequence.switches()]
  report.update(transfer.transfer_report(history, report['switches']))
  return report


class TaskRoundRobin:
  """An env factory whose successive envs cycle through the tasks, so that sub-env i
  of a vector env built in order (gymnasium's sync vector env) runs task i % len(names):
  'multi_task' in one process. A copy starts the cycle again, so env worker processes
  (each builds its share from a copy) are not supported.
  """

  def __init__(self, names: Sequence[str], with_index: bool = False):
    self.tasks = [TaskEnv(name, i, len(names), with_index) for i, name in enumerate(names)]
    self._made = 0

  def __call__(self, **kwargs):
    task = self.tasks[self._made % len(self.tasks)]
    self._made += 1
    return task(**kwargs)

  def __repr__(self) -> str:
    return ' + '.join(task.name for task in self.tasks)


class TaskIndexObservation(gym.ObservationWrapper):
  """Adds the task's index to an env's observations, as a Discrete entry 'task' (the
  encoders one-hot it): a Dict observation gains the key, any other becomes
  {'observation': it, 'task': index}. For `Experiment.task_index_input`."""

  def __init__(self, env: gym.Env, index: int, num_tasks: int):
    super().__init__(env)
    self._index = np.int64(index)
    self._wraps_dict = isinstance(env.observation_space, gym.spaces.Dict)
    entries = (dict(env.observation_space.spaces) if self._wraps_dict
               else {'observation': env.observation_space})
    self.observation_space = gym.spaces.Dict(
        {**entries, 'task': gym.spaces.Discrete(num_tasks)})

  def observation(self, observation):
    entries = dict(observation) if self._wraps_dict else {'observation': observation}
    return {**entries, 'task': self._index}


class TaskEnv:
  """An env factory for one task: its env, told its index when `with_index`
  (`TaskIndexObservation`). Picklable, for env worker processes."""

  def __init__(self, name: str, index: int, num_tasks: int, with_index: bool):
    self.name, self.index, self.num_tasks = name, index, num_tasks
    self.with_index = with_index

  def __call__(self, **kwargs):
    source = sources.resolve(self.name)
    if source.env_id is not None:
      tfrl.envs.check_registered(source.env_id)  # imports minigrid, ale_py, ... if needed
      env = gym.make(source.env_id.split(':')[-1], **kwargs)
    else:
      env = source.factory(**kwargs)
    return (TaskIndexObservation(env, self.index, self.num_tasks) if self.with_index
            else env)

  def __repr__(self) -> str:
    return self.name


class TaskEvaluators:
  """One `tfrl.actors.Evaluator` per task, run together as one evaluation: the
  result's 'AverageReturn' is the mean over the tasks, 'task_returns' each task's.
  `Experiment.make_evaluator` builds it (one task without `Experiment.tasks`)."""

  def __init__(self, evaluators: Mapping[str, Any], envs: Sequence[Any]):
    """Args:
      evaluators: task name -> Evaluator, in the tasks' order.
      envs: their envs, closed by `close`.
    """
    self._evaluators = dict(evaluators)
    self._envs = list(envs)

  def run(self) -> Dict[str, Any]:
    """Evaluates every task; returns the Evaluator's figures averaged over them (episode
    counts summed) and 'task_returns'."""
    results = {name: evaluator.run() for name, evaluator in self._evaluators.items()}
    each = list(results.values())
    return {
        'AverageReturn': float(np.mean([r['AverageReturn'] for r in each])),
        'AverageEpisodeLength': float(np.mean([r['AverageEpisodeLength'] for r in each])),
        'NumberOfEpisodes': float(sum(r['NumberOfEpisodes'] for r in each)),
        'returns': [value for r in each for value in r['returns']],
        'task_returns': {name: r['AverageReturn'] for name, r in results.items()},
    }

  @property
  def last_seed(self) -> Optional[int]:
    """The first task's last evaluation seed (every task's evaluator uses the same)."""
    return next(iter(self._evaluators.values())).last_seed

  def close(self) -> None:
    for env in self._envs:
      env.close()

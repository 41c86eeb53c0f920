"""A job's end, recorded so that running it again does not train it again.

When a job (`learners.train_eval`, or one launched by `learners.launch`) ends at its
target or its train-step budget, it writes `root_dir/finished.json` (the end's train
step, env steps, eval return, target). Run again with a config that asks for nothing
more, the job reads it and says it is finished instead of building everything and
training on past its end. A config that asks for more (a higher `num_train_steps`
without a target, a target the recorded return does not reach) trains on from the
checkpoint as before.
"""
import os
from typing import Any, Dict, Optional

from learners.configuration import tasks as tasks_lib
from learners.configuration.experiment import Experiment
from tfrl import checkpoints
from tfrl import files
from tfrl import learner as learner_lib
from tfrl import logs
from tfrl import triggers

FINISHED_FILE = 'finished.json'


def record(root_dir: str, exp: Experiment, result: Dict[str, Any]) -> None:
  """Writes the end of a job that reached its target or spent its train steps (any other
  end, a signal or a time budget, leaves nothing: the job is not finished).

  Args:
    root_dir: the job's directory.
    exp: its settings.
    result: what `train_eval` returns (of it: train_step, which must be the final
      checkpoint's, env_steps, eval_return, reached_target, confirmation_seed and the
      history's last row's task_returns).
  """
  path = os.path.join(root_dir, FINISHED_FILE)
  if not (result['reached_target'] or result['train_step'] >= exp.num_train_steps):
    files.remove_tree(path)
    return
  files.write_json(path, {
      'train_step': int(result['train_step']),
      'env_steps': int(result['env_steps']),
      'eval_return': float(result['eval_return']),
      'task_returns': (result.get('history') or [{}])[-1].get('task_returns'),
      'reached_target': bool(result['reached_target']),
      'confirmation_seed': result['confirmation_seed'],
      'target': str(exp.target),
  })


def finished_result(root_dir: str, exp: Experiment) -> Optional[Dict[str, Any]]:
  """`train_eval`'s result for a job that already ended where `exp` would end it, else
  None (never run, stopped early, trained on since, or asked for more).

  Args:
    root_dir: the job's directory.
    exp: the settings of the run about to start.
  """
  end = files.read_json(os.path.join(root_dir, FINISHED_FILE))
  if not end:
    return None
  prefixes = checkpoints.checkpoint_prefixes(
      os.path.join(root_dir, learner_lib.TRAIN_DIR, learner_lib.CHECKPOINT_DIR))
  if not prefixes or int(prefixes[0].rsplit('-', 1)[1]) != end['train_step']:
    return None  # no checkpoint of that end, or training went on past it
  evaluation = {'AverageReturn': end['eval_return'],
                'task_returns': end.get('task_returns') or {}}
  reached = exp.target.is_set and _reaches(exp.target, evaluation) and end['reached_target']
  if not reached and end['train_step'] < exp.num_train_steps:
    return None
  return {
      'train_step': end['train_step'], 'env_steps': end['env_steps'],
      'eval_return': end['eval_return'], 'reached_target': reached,
      'stopped_by': None, 'confirmation_seed': end['confirmation_seed'],
      'greedy_policy_dir': os.path.join(root_dir, triggers.POLICY_DIR,
                                        triggers.GREEDY_POLICY),
      'train_seconds': 0.0, 'history': [], 'progress': [], 'already_finished': True,
  }


def announce(root_dir: str, exp: Experiment, finished: Dict[str, Any]) -> None:
  """Says (a progress line) that the job at `root_dir` already ended and how to go on."""
  logs.progress('%s already ended at train step %d (%s); nothing to train. For more, '
                'raise Experiment.num_train_steps (with no target) or the target; to '
                'start over, --overwrite.', root_dir, finished['train_step'],
                'target %s reached' % exp.target if finished['reached_target']
                else 'all its train steps')


def _reaches(target: tasks_lib.Target, evaluation: Dict[str, Any]) -> bool:
  try:
    return target.reached(evaluation)
  except KeyError:  # per-task targets over tasks the recorded end did not evaluate
    return False

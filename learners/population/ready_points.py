"""A population member's side of population-based training (`learners.pbt`), whichever
program trains it: the one-process job (`learners.pbt_member`'s callback) or the trainer
of a launched job (`learners.train --pbt_dir=...`).

At ready point k (env steps at or past k * ready_interval, at an evaluation) the member
writes a checkpoint, reports (`member_<i>/report_<k>.json` in the population's directory:
env steps, train step, the evaluation's return, the checkpoint, its hyperparameters) and
waits for `decision_<k>.json`: carry on, or take another member's checkpoint (weights,
optimizer state, normalizer statistics; its own train step stays) and the
hyperparameters given, which the train step reads from variables from the next step on
(`tfrl.agents.hyperparameters`). It checkpoints again after a copy, so a member killed
then resumes as the decision left it. A fresh member (train step 0) starts from
`member_<i>/start.json`'s hyperparameters; a resumed one from its checkpoint's, then
takes a `replacement_<n>.json` it has not applied (the runner's copy of a top member
after this member failed with an error).
"""
import os
import threading
import time
from typing import Any, Dict, Optional

import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

from learners.population import population
from tfrl import logs
from tfrl.agents import hyperparameters as hyperparameters_lib

_POLL_S = 0.2


def copy_agent(agent: tf.Module, train_step: tf.Variable, prefix: str) -> None:
  """Exploit: takes the agent (weights, optimizer state, normalizer statistics) of the
  checkpoint at `prefix`, another member's, keeping this job's train step.

  Raises:
    AssertionError: the checkpoint holds a different agent (another config).
  """
  own_step = int(train_step.numpy())
  status = tf.train.Checkpoint(agent=agent).restore(prefix)
  status.assert_existing_objects_matched().expect_partial()
  train_step.assign(own_step)  # the agent's counter is this job's, not the source's


class ReadyPoints:
  """One member's reports and the decisions it applies (see the module docstring)."""

  def __init__(self, pbt_dir: str, member: int, ready_interval: int,
               decision_timeout_s: float = 3600.0):
    """Args:
      pbt_dir: the population's directory (`learners.pbt`).
      member: this member's index.
      ready_interval: env steps between ready points.
      decision_timeout_s: how long to wait for a decision before failing.

    Raises:
      ValueError: ready_interval < 1.
    """
    if ready_interval < 1:
      raise ValueError(f'ready_interval must be >= 1 env step, got {ready_interval}')
    self.directory = population.member_dir(pbt_dir, member)
    self.member, self.ready_interval = member, ready_interval
    self.decision_timeout_s = decision_timeout_s
    self.hyperparameters: Optional[hyperparameters_lib.Hyperparameters] = None
    self.next_round: Optional[int] = None
    self._agent = self._learner = self._stop_event = None

  def start(self, agent: tf.Module, learner, env_steps: int,
            stop_event: Optional[threading.Event]) -> None:
    """Takes the start's hyperparameters (a fresh member) or the decisions a resumed
    member had not applied yet.

    Args:
      agent: the member's agent (its hyperparameters: `tfrl.agents.hyperparameters`).
      learner: its `tfrl.learner.Learner` (checkpoints, the train step).
      env_steps: the member's env steps now (for the log).
      stop_event: set when the job is told to stop (a wait for a decision then ends).

    Raises:
      tfrl.agents.hyperparameters.NotTunable: the agent lacks a hyperparameter the
        population's bounds name (or has none): a configuration error, which the
        member's program ends with exit status 2 so the runner does not restart it.
      TimeoutError: a pending decision did not come within decision_timeout_s.
    """
    self._agent, self._learner, self._stop_event = agent, learner, stop_event
    start = population.read_json(os.path.join(self.directory, 'start.json'))
    # Checked before any training: the start's names are the population's bounds.
    self.hyperparameters = hyperparameters_lib.require(
        agent, (start or {}).get('hyperparameters', {}))
    if learner.train_step_numpy == 0 and start is not None:
      self.hyperparameters.assign(start['hyperparameters'])
    # Ready point k: the first evaluation at or past k * ready_interval env steps, in
    # order (a member that falls behind reports one round per evaluation, never skips
    # one: the runner waits for each). A resumed member goes on after its last report,
    # first taking that round's decision if it was killed before it had.
    last = population.last_round(self.directory, 'report')
    if last > self._applied().get('round', 0):
      self._decide(last, env_steps)
    # A member restarted after an error takes the copy the runner chose for it.
    replacement = population.last_round(self.directory, 'replacement')
    if replacement > self._applied().get('replacement', 0):
      self._apply(population.read_json(os.path.join(
          self.directory, f'replacement_{replacement}.json')), env_steps,
                  {'replacement': replacement})
    self.next_round = last + 1
    logs.progress('Population member %d: hyperparameters %s; next ready point at %d env '
                  'steps.', self.member, _format(self.hyperparameters.values()),
                  self.next_round * self.ready_interval)

  def due(self, env_steps: int) -> bool:
    """Whether an evaluation at `env_steps` is the next ready point."""
    return env_steps >= self.next_round * self.ready_interval

  def last_report(self) -> Optional[Dict[str, Any]]:
    """This member's latest report, None before its first."""
    last = population.last_round(self.directory, 'report')
    return population.read_json(os.path.join(self.directory, f'report_{last}.json'))

  def report(self, env_steps: int, train_step: int, score: float) -> None:
    """Ready point: checkpoints, reports, waits for the decision and applies it.

    Args:
      env_steps, train_step: where the member is.
      score: its recent evaluation's return.

    Raises:
      TimeoutError: no decision within decision_timeout_s (the runner is gone).
    """
    round_ = self.next_round
    checkpoint = self._learner.save_checkpoint()
    population.write_json(os.path.join(self.directory, f'report_{round_}.json'), {
        'round': round_, 'env_steps': int(env_steps), 'train_step': int(train_step),
        'score': float(score), 'checkpoint': checkpoint,
        'hyperparameters': self.hyperparameters.values()})
    self._decide(round_, int(env_steps))
    self.next_round += 1

  def write_result(self, result: Dict[str, Any]) -> None:
    """The job's end, for the runner: `member_<i>/result.json` (train_step, env_steps,
    eval_return, reached_target, greedy_policy_dir)."""
    population.write_json(os.path.join(self.directory, 'result.json'), {
        key: result[key] for key in ('train_step', 'env_steps', 'eval_return',
                                     'reached_target', 'greedy_policy_dir')})

  def _applied(self) -> Dict[str, int]:
    """The last round's decision and the last replacement this member applied."""
    return population.read_json(os.path.join(self.directory, 'applied.json')) or {}

  def _decide(self, round_: int, env_steps: int) -> None:
    """Waits for round `round_`'s decision and applies it (`_apply`)."""
    decision = self._wait_for(os.path.join(self.directory, f'decision_{round_}.json'))
    if decision is None:  # told to stop while waiting: the job saves and ends
      return
    self._apply(decision, env_steps, {'round': round_})

  def _apply(self, decision: Dict[str, Any], env_steps: int, done: Dict[str, int]) -> None:
    """Takes a decision ('exploit': the source's checkpoint, when it names one, and the
    hyperparameters given), checkpoints, and notes it applied (`applied.json` updated
    with `done`), so a member killed after this does not apply it twice."""
    learner = self._learner
    if decision['action'] == 'exploit':
      if decision['checkpoint'] is not None:
        try:
          copy_agent(self._agent, learner.train_step, decision['checkpoint'])
        except tf.errors.NotFoundError:  # pruned since (a member resumed late): keep own
          logs.progress('Population member %d: member %d\'s checkpoint %s is gone; '
                        'keeping its own weights.', self.member, decision['source'],
                        decision['checkpoint'])
      self.hyperparameters.assign(decision['hyperparameters'])
      learner.save_checkpoint()
      logs.progress('Population member %d took %s at %d env steps; hyperparameters now %s.',
                    self.member, 'fresh hyperparameters' if decision['source'] is None
                    else f'member {decision["source"]}\'s weights', env_steps,
                    _format(self.hyperparameters.values()))
    population.write_json(os.path.join(self.directory, 'applied.json'),
                          {**self._applied(), **done})

  def _wait_for(self, path: str) -> Optional[Dict[str, Any]]:
    """The decision at `path`; None if the job is told to stop first.

    Raises:
      TimeoutError: none came within decision_timeout_s (the runner is gone).
    """
    deadline = time.monotonic() + self.decision_timeout_s
    stop_event = self._stop_event
    while time.monotonic() < deadline:
      decision = population.read_json(path)
      if decision is not None:
        return decision
      if stop_event is not None and stop_event.wait(_POLL_S):
        return None
      if stop_event is None:
        time.sleep(_POLL_S)
    raise TimeoutError(f'population member {self.member} waited {self.decision_timeout_s:.0f}'
                       f' s for its decision {path}: is the population runner running?')


def _format(values: Dict[str, Any]) -> str:
  return ', '.join(f'{name} {value:.4g}' for name, value in values.items())

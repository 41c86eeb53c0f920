"""A launched job's trainer as a member of a population (`learners.pbt
--member_program=launch`): `learners.train --pbt_dir=... --member=i` reports at its ready
points and applies the population's decisions (`learners.population.ready_points`).

What differs from a one-process member is where the numbers come from:
- Env steps: what the job's Reverb server took in since this trainer started, on top of
  the env steps of this member's last report (the server's own count starts again when
  it restarts, and a restarted job starts a new server).
- The score: the evaluator's (`eval_barrier.last_result`: root_dir/eval/results.json). Once the env steps pass
  the next ready point, the member reports the first evaluation the evaluator finishes
  after that, as a one-process member reports its first evaluation past it. (The
  checkpoint it reports is the trainer's at that moment: the evaluated weights are
  those pulled when that evaluation began, at most an evaluation's train steps older.)

While it waits for the decision its heartbeat says 'wait for the population', which is
not a stall, nor for the collectors held behind it (`heartbeat.HOLD_ACTIVITIES`). After a
copy the trainer pushes the new weights at once, so collectors and the evaluator act
with them from their next pull.
"""
import os
import threading
import time
from typing import Any, Dict, Optional

import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

from learners.job import eval_barrier
from learners.population import ready_points
from learners.processes import heartbeat as heartbeat_lib
from tfrl import layouts
from tfrl import replay
from tfrl import triggers

_LOOK_INTERVAL_S = 1.0  # between looks at the env steps and the evaluator's results


class TrainerMember:
  """Reports a launched job's evaluations at its ready points (see the module doc)."""

  def __init__(self, points: ready_points.ReadyPoints, root_dir: str, address: str,
               layout: layouts.Layout, beat: heartbeat_lib.Heartbeat):
    """Args:
      points: the member's side of the population.
      root_dir: the job's directory (the evaluator's results are in root_dir/eval).
      address: 'host:port' of the job's Reverb server.
      layout: the job's replay layout (its experience table, env steps per item).
      beat: the trainer's heartbeat.
    """
    self.points, self.root_dir, self.address = points, root_dir, address
    self.layout, self.beat = layout, beat
    self._base_env_steps = 0
    self._inserted_at_start = 0
    self._due_since: Optional[float] = None  # when the env steps passed the ready point
    self._last_look = 0.0

  def start(self, agent: tf.Module, learner, stop_event: threading.Event) -> None:
    """Starts counting env steps and applies what `ReadyPoints.start` does.

    Raises:
      tfrl.agents.hyperparameters.NotTunable: the agent lacks a hyperparameter the
        population's bounds name.
      TimeoutError: a pending decision did not come within its timeout.
    """
    last = self.points.last_report()
    self._base_env_steps = last['env_steps'] if last else 0
    self._inserted_at_start = self._inserted()
    with self.beat.doing('wait for the population'):
      self.points.start(agent, learner, self.env_steps(), stop_event)

  def env_steps(self) -> int:
    """The member's env steps (see the module docstring)."""
    return self._base_env_steps + ((self._inserted() - self._inserted_at_start) *
                                   self.layout.env_steps_per_item)

  def maybe_report(self, train_step: int) -> bool:
    """At a ready point with its evaluation in: reports and applies the decision.

    Args:
      train_step: the trainer's train step.

    Returns:
      Whether it reported (and so may have taken another member's weights: push them).

    Raises:
      TimeoutError: no decision within its timeout (the runner is gone).
    """
    now = time.monotonic()
    if now - self._last_look < _LOOK_INTERVAL_S:
      return False
    self._last_look = now
    env_steps = self.env_steps()
    if self._due_since is None:
      if not self.points.due(env_steps):
        return False
      self._due_since = time.time()
    row = eval_barrier.last_result(self.root_dir)
    if row is None or row['time'] < self._due_since:
      return False  # the evaluation at or past the ready point is not in yet
    with self.beat.doing('wait for the population'):
      self.points.report(env_steps, train_step, row['return'])
    self._due_since = None
    return True

  def _inserted(self) -> int:
    return replay.inserted_items(self.address, self.layout.experience_table)


def write_result(points: ready_points.ReadyPoints, root_dir: str,
                 last: Dict[str, Any]) -> None:
  """A launched member's end, for the runner (`member_<i>/result.json`), written by its
  launcher once the job has ended: the evaluator's last result `last` ({} if none; its
  train step and env steps as the evaluator counted them, since the job's server
  started) and the export.
  """
  points.write_result({
      'train_step': last.get('train_step', 0), 'env_steps': last.get('env_steps', 0),
      'eval_return': last.get('return', float('nan')),
      'reached_target': bool(last.get('reached_target', False)),
      'greedy_policy_dir': os.path.join(root_dir, triggers.POLICY_DIR,
                                        triggers.GREEDY_POLICY)})

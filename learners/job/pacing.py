"""Paces a separate collector of an on-policy agent (PPO) to the trainer's policy versions.

PPO's loss assumes the unrolls it trains on were acted by the policy being trained;
its clipped ratio tolerates a little drift, not the several versions a queue holds when
free-running collectors outpace the trainer (docs/results/ppo.md, "PPO under
tfrl-launch: env steps to 475 as the collectors were paced"). So a collector of such an
agent starts each unroll only once the trainer has pushed the version that will train
on it, as the one-process loop alternates collecting and training.

The trainer pushes once per `Learner.run` and consumes `items_per_push` items in it;
the job's `num_collectors` collectors make `items_per_unroll` items per unroll each.
Turn n of collector c comes once the server has taken

    floor((n * num_collectors + c) * items_per_unroll / items_per_push)

pushes in all (the variables table's insert count, the same number for every
collector). Over the collectors that is one push's worth of items per push, staggered
so that each unroll is acted right after the push that trains on it (with two
collectors of one batch each, collector 0 acts after pushes 0, 2, 4, ... and collector
1 after 1, 3, 5, ...). A collector that starts, or reconnects to a restarted server,
takes the first of its turns not yet past. Pushes that consume nothing (the trainer's
first, or one while the evaluator holds it) only move turns earlier, so by any push
the collectors have made at least the items the trainer needs for the next: the
trainer never waits on a collector that waits on it. Each such push after the first
leaves the collectors one unroll further ahead, which the queue's capacity bounds. The cost is that a collector
idles while the trainer trains, as the one-process loop does.
"""
import threading
import time
from typing import Callable

# How often a waiting collector asks the server how many pushes it took: asking is one
# small RPC, far shorter than the train step it waits for.
_POLL_S = 0.005


class PolicyVersionTimeoutError(RuntimeError):
  """The trainer did not push the version a collector waited for in time."""


class UnrollPacing:
  """When a collector of an on-policy agent may start its next unroll (module doc)."""

  def __init__(self, task_id: int, num_collectors: int, items_per_unroll: int,
               items_per_push: int):
    """Args:
      task_id: this collector's index (staggers it among the others).
      num_collectors: the job's collectors.
      items_per_unroll: items one unroll of this collector makes (its envs / envs per
        item).
      items_per_push: items the trainer consumes between two pushes.

    Raises:
      ValueError: a count below 1, or task_id outside [0, num_collectors).
    """
    if min(num_collectors, items_per_unroll, items_per_push) < 1 or not (
        0 <= task_id < num_collectors):
      raise ValueError(f'UnrollPacing needs counts >= 1 and 0 <= task_id < num_collectors; '
                       f'got task_id={task_id}, num_collectors={num_collectors}, '
                       f'items_per_unroll={items_per_unroll}, '
                       f'items_per_push={items_per_push}.')
    self._task_id, self._num_collectors = task_id, num_collectors
    self._items_per_unroll, self._items_per_push = items_per_unroll, items_per_push
    self._turn = None  # the next turn; set from the push count at the first wait

  def pushes_before(self, turn: int) -> int:
    """The pushes in all after which this collector's turn `turn` comes."""
    return ((turn * self._num_collectors + self._task_id) * self._items_per_unroll //
            self._items_per_push)

  def _first_turn_not_past(self, pushes: int) -> int:
    turn = max(0, pushes * self._items_per_push //
               (self._num_collectors * self._items_per_unroll) - 1)
    while self.pushes_before(turn) < pushes:
      turn += 1
    return turn

  def ready(self, pushes: int) -> bool:
    """Whether the next turn has come once the server has taken `pushes` pushes."""
    if self._turn is None:
      self._turn = self._first_turn_not_past(pushes)
    return pushes >= self.pushes_before(self._turn)

  def wait_for_turn(self, pushes: Callable[[], int], stop_event: threading.Event,
                    timeout_s: float) -> bool:
    """Waits until this collector's next turn, then counts it as taken.

    Args:
      pushes: the pushes the server has taken (e.g. `VariableContainer.pushes`).
      stop_event: when set, gives up at once.
      timeout_s: how long to wait for the trainer.

    Returns:
      True when it is this collector's turn; False when `stop_event` was set.

    Raises:
      PolicyVersionTimeoutError: no turn within `timeout_s`.
    """
    now = pushes()
    deadline = time.monotonic() + timeout_s
    while not self.ready(now):
      if stop_event.wait(_POLL_S):
        return False
      if time.monotonic() >= deadline:
        raise PolicyVersionTimeoutError(
            f'Waited {timeout_s:.0f} s for the trainer\'s push '
            f'{self.pushes_before(self._turn)} (it has made {now}) before collecting: is '
            f'the trainer running, and are all {self._num_collectors} collectors of the '
            'job feeding it?')
      now = pushes()
    self._turn += 1
    return True

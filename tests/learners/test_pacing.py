"""learners/job/pacing.py: when a collector of an on-policy agent may act its next
unroll."""
import threading

import pytest

from learners.job import pacing


def simulate(num_collectors, items_per_unroll, items_per_push, pushes=40, restarts=(),
             extra_pushes=()):
  """Runs a trainer and collectors in lockstep, in one thread.

  The trainer pushes once at start, then trains whenever the queue holds a push's worth
  of items; a collector acts whenever its turn has come. At each push count in
  `restarts` collector 0 starts again (a new UnrollPacing: a restarted program);
  `extra_pushes` are push counts after which the trainer pushes once more without
  training (the evaluator holding it). Returns the lags (push count at training minus
  push count when acted) of the trained items; raises AssertionError on a deadlock.
  """
  stop = threading.Event()
  new = lambda c: pacing.UnrollPacing(c, num_collectors, items_per_unroll, items_per_push)
  collectors = [new(c) for c in range(num_collectors)]
  count = {'pushes': 1}  # the trainer's first push, before any data
  queue, lags = [], []
  while count['pushes'] < pushes:
    if count['pushes'] in restarts:
      collectors[0] = new(0)
    acted = False
    for collector in collectors:
      if collector.ready(count['pushes']):
        assert collector.wait_for_turn(lambda: count['pushes'], stop, timeout_s=0.1)
        queue.extend([count['pushes']] * items_per_unroll)
        acted = True
    if len(queue) >= items_per_push:
      trained, queue[:] = queue[:items_per_push], queue[items_per_push:]
      lags.extend(count['pushes'] - acted_at for acted_at in trained)
      count['pushes'] += 1
      if count['pushes'] in extra_pushes:
        count['pushes'] += 1
    elif not acted:
      raise AssertionError(f'deadlock at push {count["pushes"]} with {len(queue)} items')
  return lags


@pytest.mark.parametrize('num_collectors,items_per_unroll,items_per_push', [
    (2, 1, 1),   # ppo_cartpole under launch: each unroll is a whole batch
    (1, 1, 1),
    (4, 1, 1),
    (2, 1, 2),   # both collectors' unrolls make one batch
    (1, 1, 4),   # one collector acts four unrolls per batch
    (3, 2, 4),   # shares that do not divide
])
def test_every_unroll_is_trained_at_the_version_that_acted_it(num_collectors,
                                                              items_per_unroll,
                                                              items_per_push):
  lags = simulate(num_collectors, items_per_unroll, items_per_push)
  assert len(lags) >= 30 * items_per_push
  assert max(lags) <= (1 if items_per_unroll * num_collectors % items_per_push else 0), lags


def test_two_collectors_take_turns():
  collectors = [pacing.UnrollPacing(c, 2, 1, 1) for c in range(2)]
  turns = []
  for pushes in range(1, 9):  # the trainer trains each unroll at once
    turns.append([c for c, collector in enumerate(collectors) if collector.ready(pushes)])
    for c in turns[-1]:
      assert collectors[c].wait_for_turn(lambda: pushes, threading.Event(), timeout_s=1)
  assert turns == [[1], [0], [1], [0], [1], [0], [1], [0]]


def test_restarts_and_pushes_without_training_never_deadlock():
  """Each push without training leaves the collectors one item ahead (in a job the
  queue's capacity bounds that); a restarted collector takes its next turn."""
  extra = {5, 20, 21, 33}
  lags = simulate(2, 1, 1, pushes=60, restarts={7, 30}, extra_pushes=extra)
  assert len(lags) >= 50
  assert lags[:3] == [0, 0, 0] and max(lags) <= len(extra), lags


def test_waiting_ends_with_the_stop_event_or_a_timeout_naming_the_push():
  collector = pacing.UnrollPacing(1, 2, 1, 1)
  stop = threading.Event()
  with pytest.raises(pacing.PolicyVersionTimeoutError, match=r"push 1 \(it has made 0\)"):
    collector.wait_for_turn(lambda: 0, stop, timeout_s=0.05)
  stop.set()
  assert collector.wait_for_turn(lambda: 0, stop, timeout_s=10) is False


def test_bad_counts_are_refused():
  with pytest.raises(ValueError, match='task_id=2, num_collectors=2'):
    pacing.UnrollPacing(2, 2, 1, 1)
  with pytest.raises(ValueError, match='items_per_push=0'):
    pacing.UnrollPacing(0, 1, 1, 0)

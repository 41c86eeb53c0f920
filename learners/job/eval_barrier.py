"""The trainer holds still while the evaluator confirms a policy (separate programs).

The evaluator follows the trainer asynchronously, so by the time an evaluation at train
step S has reached the target, the trainer is thousands of steps further on, and the
policy it would export at its end is one nobody evaluated (DQN's returns swing from 500
to 150 within a few thousand steps on CartPole). So once an evaluation reaches the
target, the evaluator asks the trainer to pause, evaluates the paused policy twice (an
evaluation and a confirmation on fresh episodes), and either leaves it paused (target
confirmed: the trainer ends there, its final checkpoint and exports holding exactly the
confirmed policy) or lets it go on. Training pauses only for candidates, not for every
evaluation.

The two sides talk through files in root_dir/eval (root_dir is already shared by the
programs): the evaluator's request, and the trainer's acknowledgement with the train
step it paused at (after pushing that step's variables).
"""
import json
import os
import threading
import time
from typing import Callable, Optional

EVAL_DIR = 'eval'
RESULTS_JSON = 'results.json'  # the evaluator's rows, newest last
REQUEST = 'pause_request'
PAUSED_AT = 'paused_at.json'


def _path(root_dir: str, name: str) -> str:
  return os.path.join(root_dir, EVAL_DIR, name)


def last_result(root_dir: str) -> Optional[dict]:
  """The evaluator's newest row (`root_dir/eval/results.json`), None before its first."""
  try:
    with open(_path(root_dir, RESULTS_JSON)) as f:
      return json.load(f)[-1]
  except (OSError, ValueError, IndexError):
    return None


def confirmed_step(root_dir: str) -> Optional[int]:
  """The train step of the evaluator's last row if it reached the target, else None."""
  last = last_result(root_dir)
  if last is None:
    return None
  return int(last['train_step']) if last.get('reached_target') else None


def _remove(path: str) -> None:
  try:
    os.remove(path)
  except FileNotFoundError:
    pass


class TrainerSide:
  """What the trainer calls between two `Learner.run`s."""

  def __init__(self, root_dir: str):
    self._root_dir = root_dir
    _remove(_path(root_dir, PAUSED_AT))  # a previous run's acknowledgement
    self.paused_at = None

  def requested(self) -> bool:
    """Whether the evaluator asks for a pause (one stat call)."""
    return os.path.exists(_path(self._root_dir, REQUEST))

  def hold(self, train_step: int, push: Callable[[], None]) -> None:
    """Call while `requested()`: says the trainer holds still at `train_step`, after
    `push()`ing that step's variables, unless it already said so for this request."""
    if os.path.exists(_path(self._root_dir, PAUSED_AT)):
      return
    push()
    tmp = _path(self._root_dir, PAUSED_AT + '.tmp')
    with open(tmp, 'w') as f:
      json.dump({'train_step': int(train_step)}, f)
    os.replace(tmp, _path(self._root_dir, PAUSED_AT))
    self.paused_at = int(train_step)

  def resume(self) -> None:
    """Call once the request is gone."""
    self.paused_at = None


class EvaluatorSide:
  """What the evaluator calls around the evaluations of a candidate policy."""

  def __init__(self, root_dir: str):
    self._root_dir = root_dir
    self.release()  # a previous run's request

  def request(self) -> None:
    os.makedirs(os.path.dirname(_path(self._root_dir, REQUEST)), exist_ok=True)
    with open(_path(self._root_dir, REQUEST), 'w') as f:
      f.write('pause\n')

  def wait_until_paused(self, timeout_s: float,
                        stop_event: threading.Event) -> Optional[int]:
    """The train step the trainer paused at; None if it did not within `timeout_s`
    (e.g. it already finished its budget) or a stop came first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not stop_event.is_set():
      try:
        with open(_path(self._root_dir, PAUSED_AT)) as f:
          return int(json.load(f)['train_step'])
      except (OSError, ValueError, KeyError):
        stop_event.wait(0.05)
    return None

  def release(self) -> None:
    """Lets the trainer go on (and forgets its acknowledgement, so the next request
    waits for a new one)."""
    _remove(_path(self._root_dir, REQUEST))
    _remove(_path(self._root_dir, PAUSED_AT))

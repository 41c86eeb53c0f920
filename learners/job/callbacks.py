"""Callbacks: code of the user's own that runs inside a one-process job (`train_eval`).

A `Callback` sees each progress line and each evaluation, can stop training (the job
then ends as at its budget: a final checkpoint and exports at the last train step), can
save a checkpoint and the policies at any point (`JobContext.save`), and can add
triggers that run after every train call (the Learner's own hooks), e.g.

    class StopWhenStuck(callbacks.Callback):
      def on_evaluation(self, row):
        return row['train_step'] > 10_000 and row['eval_return'] < 50  # True: stop

    train_eval.run(root_dir, ['ppo_cartpole.gin'],
                   callbacks=[callbacks.StopOnNoImprovement(patience=5), StopWhenStuck()])

The plain functions `on_evaluation=` and `on_progress=` of `train_eval` only observe:
their return values are ignored.
"""
import dataclasses
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

from tfrl import logs

Row = Dict[str, Any]
Trigger = Callable[[int], Any]


@dataclasses.dataclass
class JobContext:
  """What a callback may use of the running job.

  Attributes:
    root_dir: the job's directory.
    experiment: its `Experiment`.
    agent: the agent being trained.
    learner: its `tfrl.learner.Learner` (train_step_numpy, save_checkpoint, ...).
    save: writes a checkpoint and the policy SavedModels at the current train step,
      as the job's end does; returns the policies' directories by name.
    stop_event: set once the job is told to stop (a signal, `stop_event=`): a callback
      that waits on something else must also watch it.
    env_steps: the job's env steps so far.
  """
  root_dir: str
  experiment: Any
  agent: Any
  learner: Any
  save: Callable[[], Dict[str, str]]
  stop_event: Optional[threading.Event] = None
  env_steps: Optional[Callable[[], int]] = None


class Callback:
  """Override any of these. `on_progress` and `on_evaluation` stop training by
  returning True."""

  context: Optional[JobContext] = None

  def triggers(self) -> Sequence[Trigger]:
    """Callables of the train step run after every train call (asked once, before
    the job's Learner is built; they run after `on_train_start`)."""
    return ()

  def on_train_start(self, context: JobContext) -> None:
    """Before the first train step of this run (after a resume too). `self.context` is
    set before this is called, so an override need not call `super()`."""
    del context

  def on_progress(self, row: Row) -> Optional[bool]:
    """Each progress line's row (train_step, env_steps, train_return, eval_return, env
    and train steps per second, seconds); True stops training."""
    del row
    return None

  def on_evaluation(self, row: Row) -> Optional[bool]:
    """Each evaluation's row (train_step, env_steps, eval_return, seconds); True stops
    training."""
    del row
    return None

  def on_train_end(self, result: Dict[str, Any]) -> None:
    """After the final checkpoint and exports, with `train_eval`'s result."""
    del result


class StopOnNoImprovement(Callback):
  """Stops training when `patience` evaluations in a row have not beaten the best eval
  return by more than `min_delta` (SB3's StopTrainingOnNoModelImprovement)."""

  def __init__(self, patience: int = 5, min_delta: float = 0.0):
    """Args:
      patience: evaluations without improvement before stopping (>= 1).
      min_delta: how much a return must exceed the best one to count as better.

    Raises:
      ValueError: patience < 1.
    """
    if patience < 1:
      raise ValueError(f'patience must be >= 1, got {patience}.')
    self.patience, self.min_delta = patience, min_delta
    self.best, self.without_improvement = float('-inf'), 0

  def on_evaluation(self, row: Row) -> bool:
    if row['eval_return'] > self.best + self.min_delta:
      self.best, self.without_improvement = row['eval_return'], 0
    else:
      self.without_improvement += 1
    return self.without_improvement >= self.patience


class Hooks:
  """Calls a job's callbacks and plain observer functions; remembers a stop request."""

  def __init__(self, callbacks: Sequence[Callback] = (),
               on_evaluation: Optional[Callable[[Row], Any]] = None,
               on_progress: Optional[Callable[[Row], Any]] = None):
    """Raises:
      TypeError: a callback that is not a `Callback` (e.g. a plain function: pass it
        as on_evaluation or on_progress).
    """
    for callback in callbacks:
      if not isinstance(callback, Callback):
        raise TypeError(f'callbacks takes tfrl Callback objects (learners.job.callbacks), '
                        f'got {callback!r}; a plain function goes in on_evaluation= or '
                        'on_progress=.')
    self.callbacks = list(callbacks)
    self._on_evaluation, self._on_progress = on_evaluation, on_progress
    self.stopped_by: Optional[str] = None

  @property
  def stop_requested(self) -> bool:
    return self.stopped_by is not None

  def triggers(self) -> List[Trigger]:
    return [trigger for callback in self.callbacks for trigger in callback.triggers()]

  def train_start(self, context: JobContext) -> None:
    for callback in self.callbacks:
      callback.context = context  # here, not in on_train_start, which may be overridden
      callback.on_train_start(context)

  def _dispatch(self, method: str, function, row: Row) -> None:
    if function is not None:
      function(row)
    for callback in self.callbacks:
      if getattr(callback, method)(row) and self.stopped_by is None:
        self.stopped_by = type(callback).__name__
        logs.progress('Stopping at train step %d: %s asked to stop.', row['train_step'],
                      self.stopped_by)

  def progress(self, row: Row) -> None:
    self._dispatch('on_progress', self._on_progress, row)

  def evaluation(self, row: Row) -> None:
    self._dispatch('on_evaluation', self._on_evaluation, row)

  def train_end(self, result: Dict[str, Any]) -> None:
    for callback in self.callbacks:
      callback.on_train_end(result)

"""Callbacks in a one-process job (learners/job/callbacks.py): they stop training through
the job's own end (final checkpoint and exports), save on demand, and add triggers."""
import glob
import os

import pytest

from learners import train_eval
from learners.job import callbacks
from tfrl import export

TINY = dict(num_envs=4, batch_size=8, initial_collect_steps=64, collect_steps_per_iteration=1,
            train_steps_per_iteration=5, eval_interval=25, num_eval_episodes=2,
            checkpoint_interval=1000, policy_checkpoint_interval=1000, target_return=None,
            log_interval=10)


class _Recorder(callbacks.Callback):
  """Stops at its `stop_at`-th evaluation; saves at the first progress line past
  `save_after`; records everything it is called with."""

  def __init__(self, stop_at: int, save_after: int):
    self.stop_at, self.save_after = stop_at, save_after
    self.evaluations, self.progress, self.trigger_steps = [], [], []
    self.started_at, self.saved, self.result = None, None, None

  def triggers(self):
    return [self.trigger_steps.append]

  def on_train_start(self, context):  # no super(): self.context is set all the same
    self.started_at = context.learner.train_step_numpy

  def on_progress(self, row):
    self.progress.append(row)
    if self.saved is None and row['train_step'] > self.save_after:
      self.saved = (row['train_step'], self.context.save())

  def on_evaluation(self, row):
    self.evaluations.append(row)
    return len(self.evaluations) >= self.stop_at

  def on_train_end(self, result):
    self.result = result


@pytest.mark.integration
def test_a_callback_stops_saves_and_triggers_through_the_jobs_own_paths(tmp_path):
  root = str(tmp_path / 'run')
  recorder = _Recorder(stop_at=2, save_after=30)
  seen = []
  result = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=100_000,
                          on_evaluation=seen.append, callbacks=[recorder], **TINY)

  # Stopped after its second evaluation (step 50), not at the 100k budget, and ended as
  # a budget does: a final checkpoint and exports of that step.
  assert result['train_step'] == 50 and result['stopped_by'] == '_Recorder'
  assert [row['train_step'] for row in recorder.evaluations] == [25, 50] == [
      row['train_step'] for row in seen]
  assert export.exported_train_step(result['greedy_policy_dir']) == 50
  assert os.path.exists(os.path.join(root, 'train', 'checkpoints', 'ckpt-50.index'))
  assert recorder.result is result and recorder.started_at == 0
  # Its trigger ran after every train call, with the step reached.
  assert recorder.trigger_steps == sorted(recorder.trigger_steps)
  assert recorder.trigger_steps[0] > 0 and recorder.trigger_steps[-1] == 50
  # The save it asked for at its first progress row past step 30 wrote a checkpoint
  # of that step (the exports were replaced by the final ones since).
  step, paths = recorder.saved
  assert step == next(r['train_step'] for r in recorder.progress if r['train_step'] > 30)
  assert set(paths) >= {'greedy_policy', 'collect_policy'}
  assert os.path.exists(os.path.join(root, 'train', 'checkpoints', f'ckpt-{step}.index'))


def test_a_callback_has_its_context_whatever_it_overrides():
  class NoSuper(callbacks.Callback):
    def on_train_start(self, context):
      self.seen = context

  callback = NoSuper()
  context = callbacks.JobContext('root', None, None, None, save=dict)
  callbacks.Hooks([callback], None, None).train_start(context)
  assert callback.context is context and callback.seen is context


def test_stop_on_no_improvement_counts_evaluations_without_a_better_return():
  stopper = callbacks.StopOnNoImprovement(patience=2, min_delta=1.0)
  returns = [10.0, 12.0, 12.5, 13.5, 11.0]
  stops = [stopper.on_evaluation({'eval_return': r, 'train_step': i})
           for i, r in enumerate(returns)]
  # 12.5 is not better than 12 by more than 1 (one), 13.5 is (reset), 11 is not (one).
  assert stops == [False, False, False, False, False]
  assert stopper.on_evaluation({'eval_return': 12.0, 'train_step': 5})  # two in a row
  with pytest.raises(ValueError, match='patience must be >= 1'):
    callbacks.StopOnNoImprovement(patience=0)


def test_a_plain_function_is_refused_as_a_callback_with_where_it_goes(tmp_path):
  with pytest.raises(TypeError, match='on_evaluation= or on_progress='):
    train_eval.run(str(tmp_path / 'run'), ['dqn_cartpole.gin'], callbacks=[print], **TINY)
  assert not glob.glob(str(tmp_path / 'run' / '*'))  # nothing built

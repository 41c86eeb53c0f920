"""learners/job/eval_barrier.py: the trainer holds still while the evaluator confirms a
policy."""
import json
import os
import threading

from learners.job import eval_barrier


def test_request_hold_confirm_and_release(tmp_path):
  root = str(tmp_path)
  trainer, evaluator = eval_barrier.TrainerSide(root), eval_barrier.EvaluatorSide(root)
  never = threading.Event()
  assert not trainer.requested()
  assert evaluator.wait_until_paused(0.2, never) is None  # nobody asked, nobody held

  pushes = []
  evaluator.request()
  assert trainer.requested()
  trainer.hold(7, lambda: pushes.append(7))
  trainer.hold(7, lambda: pushes.append('again'))  # one push per request
  assert pushes == [7] and trainer.paused_at == 7
  assert evaluator.wait_until_paused(1.0, never) == 7

  # Not confirmed: released, the acknowledgement is gone, the next request waits anew.
  evaluator.release()
  assert not trainer.requested()
  trainer.resume()
  assert trainer.paused_at is None
  evaluator.request()
  assert evaluator.wait_until_paused(0.2, never) is None
  trainer.hold(9, lambda: pushes.append(9))
  assert evaluator.wait_until_paused(1.0, never) == 9 and pushes == [7, 9]

  # Confirmed: the evaluator's last row names the held step.
  assert eval_barrier.confirmed_step(root) is None
  with open(os.path.join(root, 'eval', eval_barrier.RESULTS_JSON), 'w') as f:
    json.dump([{'train_step': 5, 'reached_target': False},
               {'train_step': 9, 'reached_target': True}], f)
  assert eval_barrier.confirmed_step(root) == 9 == trainer.paused_at


def test_a_new_job_forgets_the_last_ones_request_and_acknowledgement(tmp_path):
  root = str(tmp_path)
  eval_barrier.EvaluatorSide(root).request()
  eval_barrier.TrainerSide(root).hold(3, lambda: None)
  eval_barrier.EvaluatorSide(root)  # a restarted evaluator
  assert not eval_barrier.TrainerSide(root).requested()
  assert eval_barrier.EvaluatorSide(root).wait_until_paused(0.1, threading.Event()) is None

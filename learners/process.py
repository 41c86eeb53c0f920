"""Running a program's work so that SIGTERM/SIGINT always stop it in bounded time."""
import os
import signal
import sys
import threading
from typing import Any, Callable

from absl import logging


def run_until_signal(work: Callable[[threading.Event], Any], name: str,
                     grace_s: float = 20.0) -> Any:
  """Runs `work(stop_event)` in a thread; SIGTERM/SIGINT set `stop_event`.

  The work is expected to notice the event within a moment and return cleanly
  (flushing writers, writing a checkpoint). A thread blocked inside Reverb (an insert
  held by the rate limiter once the learner stopped sampling, or a sample waiting for
  collectors that are gone) cannot notice it; after `grace_s` the process exits anyway,
  saying so, rather than hang.

  Args:
    work: the program's body; it gets the stop event.
    name: the program's name, for messages.
    grace_s: seconds the work gets to stop after a signal.

  Returns:
    What `work` returned.

  Raises:
    Whatever `work` raised.
  """
  stop_event, done = threading.Event(), threading.Event()
  outcome = {}

  def runner():
    try:
      outcome['result'] = work(stop_event)
    except BaseException as e:  # pylint: disable=broad-except
      outcome['error'] = e
    finally:
      done.set()

  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *unused: stop_event.set())
  threading.Thread(target=runner, name=name, daemon=True).start()
  while not done.wait(0.5):
    if stop_event.is_set() and not done.wait(grace_s):
      logging.warning('%s did not stop within %.0f s of the signal (blocked inside Reverb: '
                      'an insert held by the rate limiter, or a sample waiting for data); '
                      'exiting without the final flush.', name, grace_s)
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(0)  # pylint: disable=protected-access
  if 'error' in outcome:
    raise outcome['error']
  return outcome.get('result')

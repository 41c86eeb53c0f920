"""Replay errors, and the two helpers that make a lost Reverb server visible.

Reverb 0.14 has few timeouts of its own: opening a trajectory writer, sampling (and the
signature lookup `Client.sample` does first) and inserting wait forever when no server
answers. `call_with_timeout` bounds such calls; `is_server_lost` tells the errors that
mean "the server went away or does not answer" (worth a reconnect) from real bugs.
"""
import threading
from typing import Any, Callable, Optional

import reverb
import tensorflow as tf


class ReplayServerUnreachableError(ConnectionError):
  """Raised when no Reverb server answers at an address within the timeout."""


class CheckpointMismatchError(ValueError):
  """A Reverb checkpoint holds tables configured differently from the given ones.

  Reverb 0.14 would silently keep the checkpoint's settings (capacity, sampler, rate
  limiter, signature) and ignore the new configuration, so tfrl refuses to start.
  """


class WriterStoppedError(Exception):
  """A writer waiting for the server to accept items saw its `stop_event` set."""


def call_with_timeout(fn: Callable[[], Any], timeout_s: Optional[float], what: str,
                      discard: Optional[Callable[[Any], None]] = None) -> Any:
  """Returns `fn()`, or raises if it has not returned within `timeout_s`.

  `fn` runs in a daemon thread, because the Reverb calls this guards cannot be
  interrupted: on a timeout the thread is left behind, still blocked, and ends when
  the call finally returns (e.g. once a server appears at the address).

  Args:
    fn: the call, taking no arguments.
    timeout_s: how long to wait; None waits forever (calls `fn` in this thread).
    what: what is being waited for, naming the server address, e.g. "the Reverb
      server at '127.0.0.1:1234' (opening a writer for table 'replay')".
    discard: called with the result of a call that returns after the timeout, so
      what it opened (a writer, a sample stream) is released instead of leaked.

  Returns:
    What `fn` returned.

  Raises:
    ReplayServerUnreachableError: `fn` did not return within `timeout_s`.
    Exception: whatever `fn` raised, re-raised here.
  """
  if timeout_s is None:
    return fn()
  lock = threading.Lock()
  outcome = {}

  def run():
    try:
      result = fn()
    except BaseException as e:  # pylint: disable=broad-except
      with lock:
        outcome['error'] = e
      return
    with lock:
      late = outcome.get('abandoned', False)
      outcome['result'] = result
    if late and discard is not None:
      try:
        discard(result)
      except Exception:  # pylint: disable=broad-except
        pass  # Nobody is left to report to; the caller already got its timeout.

  thread = threading.Thread(target=run, name=f'call_with_timeout({what})', daemon=True)
  thread.start()
  thread.join(max(0.0, timeout_s))
  with lock:
    if 'error' in outcome:
      raise outcome['error']
    if 'result' in outcome:
      return outcome['result']
    outcome['abandoned'] = True  # Under the lock: a late result sees it and discards.
  raise ReplayServerUnreachableError(
      f'Gave up after {timeout_s:g} s waiting for {what}: the server is not running, is '
      'restarting, or cannot be reached (check the address, the reverb_server program '
      'and the network).')


# What Reverb 0.14 raises when its server goes away (measured with a server in another
# process, killed with SIGKILL, and with an in-process server stopped):
# - TrajectoryWriter.append / create_item: nothing (data is buffered); flush and
#   end_episode with a timeout_ms: reverb.errors.DeadlineExceededError ("Flush call did
#   not complete within provided timeout ..."); the raw pybind error behind it is a
#   RuntimeError containing "Timeout exceeded". close(): returns at once.
# - Client.server_info(timeout=...): reverb.errors.DeadlineExceededError (raw:
#   RuntimeError('Deadline Exceeded')); without a timeout it blocks until a server is
#   back.
# - Client.checkpoint(): RuntimeError('connections to all backends failing') at once.
# - Client.insert / sample / mutate_priorities, TrajectoryDataset and TFClient ops,
#   and creating a trajectory writer: block (the gRPC channel retries UNAVAILABLE
#   itself) and carry on by themselves once a server listens there again: they raise
#   nothing, hence `call_with_timeout`.
# gRPC statuses that do surface reach Python as tf.errors.UnavailableError /
# DeadlineExceededError / CancelledError from TF ops, or as a RuntimeError (ValueError
# for some) carrying the status name or gRPC's message in its text.
_LOST_TYPES = (ReplayServerUnreachableError, ConnectionError,
               reverb.errors.DeadlineExceededError, tf.errors.UnavailableError,
               tf.errors.DeadlineExceededError, tf.errors.CancelledError)
# gRPC status names: matched with their case, so plain words ("unavailable") in other
# messages do not count.
_LOST_STATUS_NAMES = ('UNAVAILABLE', 'DEADLINE_EXCEEDED')
# gRPC / Reverb messages, matched without case.
_LOST_PHRASES = ('socket closed', 'failed to connect',
                 'connections to all backends failing', 'deadline exceeded',
                 'timeout exceeded', 'connection refused', 'connection reset')


def is_server_lost(exc: BaseException) -> bool:
  """True when `exc` means the Reverb server went away or does not answer.

  Callers use it to tell a lost server (reconnect and carry on) from a bug (fail).

  Args:
    exc: an exception raised by a Reverb, TF or tfrl replay call.

  Returns:
    True for `ReplayServerUnreachableError` and other `ConnectionError`s, Reverb's and
    TF's deadline errors, TF's unavailable and cancelled errors, and RuntimeErrors,
    ValueErrors and TF op errors whose message carries a gRPC UNAVAILABLE or
    DEADLINE_EXCEEDED status or gRPC's connection messages ("Socket closed", "failed
    to connect", ...). False for anything else.
  """
  if isinstance(exc, _LOST_TYPES):
    return True
  if isinstance(exc, (RuntimeError, ValueError, tf.errors.OpError)) and not isinstance(
      exc, NotImplementedError):
    message = str(exc)
    if any(name in message for name in _LOST_STATUS_NAMES):
      return True
    lowered = message.lower()
    return any(phrase in lowered for phrase in _LOST_PHRASES)
  return False

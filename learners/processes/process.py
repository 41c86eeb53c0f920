"""What every program shares: stopping on signals in bounded time, exit statuses,
waiting out a lost Reverb server, and a quick exit once everything is saved."""
import faulthandler
import logging as std_logging
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Optional

from absl import logging

from learners.processes import disk_full
from learners.processes import stop_plan
from tfrl import metrics
from tfrl import envs
from tfrl import replay
from tfrl import run_dir
from tfrl.agents import hyperparameters as hyperparameters_lib

# The exit statuses (tfrl.exit_statuses), where the programs and the launcher look.
from tfrl.exit_statuses import (  # pylint: disable=unused-import,g-bad-import-order
    EXIT_DISK_FULL, EXIT_SERVER_LOST, EXIT_STALLED, EXIT_STATUS_MEANING, EXIT_STOP_TIMEOUT)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def on_stop_signals(handler: Callable[[int, Any], None]) -> None:
  """Calls `handler(signum, frame)` on SIGTERM, SIGINT and SIGHUP.

  The handler runs in the main thread between two bytecodes, possibly again while it
  runs: it must take no lock (to set an event, use `set_on_stop_signals`).

  SIGTERM (what timeout, Slurm, Kubernetes and systemd send) is always handled. SIGINT
  or SIGHUP already ignored stays ignored: a shell's background job ignores Ctrl-C,
  and `nohup` asks to outlive the terminal.

  Args:
    handler: the signal handler.
  """
  for sig in STOP_SIGNALS:
    if sig == signal.SIGTERM or signal.getsignal(sig) is not signal.SIG_IGN:
      signal.signal(sig, handler)


class _SignalToEvent:
  """Sets a threading.Event on a signal without taking a lock in the signal handler.

  A Python signal handler runs in the main thread between two bytecodes, possibly while
  that thread holds the very lock `Event.set` needs (inside `Event.wait` or an earlier
  `Event.set`): calling `stop_event.set()` there deadlocks. Repeated signals make that
  likely: the kernel sends PR_SET_PDEATHSIG's SIGTERM once per thread of the dying
  parent (each thread's exit reparents the child to the next), and the launcher runs
  several. So the handler only writes a byte to a pipe, and a watcher thread sets the
  event. One pipe and one thread per process; each `watch` replaces the event.
  """

  def __init__(self):
    self._read_fd, self._write_fd = os.pipe()
    os.set_blocking(self._write_fd, False)  # a flood of signals must not block the handler
    self._event: Optional[threading.Event] = None
    threading.Thread(target=self._run, name='stop-signal-watcher', daemon=True).start()

  def watch(self, event: threading.Event) -> None:
    self._event = event

  def handler(self, unused_signum, unused_frame) -> None:
    try:
      os.write(self._write_fd, b'\0')
    except BlockingIOError:
      pass  # the pipe is full of earlier signals: the event is being set anyway

  def _run(self) -> None:
    while os.read(self._read_fd, 4096):
      event = self._event
      if event is not None:
        event.set()


_signal_to_event: Optional[_SignalToEvent] = None


def set_on_stop_signals(stop_event: threading.Event) -> None:
  """Sets `stop_event` on SIGTERM, SIGINT and SIGHUP (as `on_stop_signals` chooses them),
  safely under repeated signals: the handler takes no lock (see _SignalToEvent).

  Args:
    stop_event: the event to set.
  """
  global _signal_to_event
  if _signal_to_event is None:
    _signal_to_event = _SignalToEvent()
  _signal_to_event.watch(stop_event)
  on_stop_signals(_signal_to_event.handler)


def ignore_stop_signals() -> None:
  """Ignores SIGTERM, SIGINT and SIGHUP: once everything is saved, a signal must not cut
  the exit short (Python restores the default action of signals with Python handlers
  while it shuts down, and a SIGTERM then would end a clean finish with -15)."""
  for sig in STOP_SIGNALS:
    signal.signal(sig, signal.SIG_IGN)


def _stderr_with_fd():
  """Where faulthandler can write stacks: stderr, or the process's own where stderr is
  replaced by an object without a file descriptor (pytest's capture, a notebook's)."""
  for stream in (sys.stderr, sys.__stderr__):
    try:
      stream.fileno()
      return stream
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
      continue
  return None


def run_until_signal(work: Callable[[threading.Event], Any], name: str,
                     grace_s: Optional[float] = None,
                     server_address: Optional[str] = None) -> Any:
  """Runs `work(stop_event)` in a thread; SIGTERM/SIGINT/SIGHUP set `stop_event`.

  The work is expected to notice the event within a moment and return cleanly
  (flushing writers, writing a checkpoint). A thread blocked inside Reverb (a sample
  from a server that went away) cannot notice it; after `grace_s` the process exits
  anyway with EXIT_STOP_TIMEOUT, saying so, rather than hang or pretend it finished,
  and first writes every thread's Python stack to stderr (where it was blocked).
  SIGUSR1 writes the same stacks at any time without stopping (`kill -USR1 PID`).

  Args:
    work: the program's body; it gets the stop event.
    name: the program's name, for messages.
    grace_s: seconds the work gets to stop after a signal (default: the share of the
      launcher's stop grace it was given, see stop_plan, else 30 s).
    server_address: the Reverb server the work waits on, if any. After a signal it is
      probed; once it has not answered for SERVER_GONE_S the process exits as at the
      end of the grace without waiting that out: a sample from a server that is gone
      never returns. (A launcher killed with SIGKILL stops its children all at once,
      and the server may stop before the trainer's last train call has its data.)

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

  if grace_s is None:
    grace_s = stop_plan.program_grace_s()
  set_on_stop_signals(stop_event)
  stacks_file = _stderr_with_fd()
  if stacks_file is not None:
    faulthandler.register(signal.SIGUSR1, file=stacks_file, all_threads=True)
  threading.Thread(target=runner, name=name, daemon=True).start()
  while not done.wait(0.5):
    signalled = time.monotonic()
    if stop_event.is_set() and not _done_within_grace(done, grace_s, server_address):
      logging.error('%s did not stop within %.0f s of the signal; exiting with status %d '
                    'WITHOUT its final save. Where its threads were:', name,
                    time.monotonic() - signalled, EXIT_STOP_TIMEOUT)
      sys.stdout.flush()
      sys.stderr.flush()
      if stacks_file is not None:
        faulthandler.dump_traceback(file=stacks_file, all_threads=True)
      os._exit(EXIT_STOP_TIMEOUT)  # pylint: disable=protected-access
  ignore_stop_signals()  # the work is done (and saved)
  if 'error' in outcome:
    raise outcome['error']
  return outcome.get('result')


# After a stop signal: how long the work's server may fail to answer before the work is
# taken as blocked on it for good (several probes apart: a loaded server answers late,
# not never).
SERVER_GONE_S = 5.0


def _done_within_grace(done: threading.Event, grace_s: float,
                       server_address: Optional[str]) -> bool:
  """Waits up to `grace_s` for `done`; False at the end of the grace, or as soon as
  `server_address` (if given) has not answered for SERVER_GONE_S (said in a line)."""
  if server_address is None:
    return done.wait(grace_s)
  deadline = time.monotonic() + grace_s
  unanswered_since = None
  while not done.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
    now = time.monotonic()
    if now >= deadline:
      return False
    try:
      replay.wait_for_server(server_address, timeout_s=1.0)
      unanswered_since = None
    except replay.ReplayServerUnreachableError:
      unanswered_since = unanswered_since or now
      if now - unanswered_since >= SERVER_GONE_S and not done.is_set():
        logging.error('The Reverb server at %s is gone (no answer for %.0f s since the '
                      'stop signal): what waits on it cannot finish.', server_address,
                      now - unanswered_since)
        return False
  return True


def wait_for_server_with_backoff(address: str, timeout_s: float,
                                 stop_event: threading.Event) -> bool:
  """Waits for the Reverb server at `address` to answer again, backing off to 30 s.

  Returns:
    True once it answers; False if `stop_event` was set first.

  Raises:
    ReplayServerUnreachableError: it did not answer within `timeout_s`.
  """
  deadline, delay = time.monotonic() + timeout_s, 1.0
  while not stop_event.is_set():
    try:
      replay.wait_for_server(address, timeout_s=min(delay, 10.0))
      return True
    except replay.ReplayServerUnreachableError as e:
      if time.monotonic() > deadline:
        raise replay.ReplayServerUnreachableError(
            f'The Reverb server at {address} did not come back within {timeout_s:.0f} s.'
        ) from e
      logging.warning('Reverb server %s still unreachable; retrying in %.0f s.', address,
                      delay)
      stop_event.wait(delay)
      delay = min(2 * delay, 30.0)
  return False


class ProgramError(Exception):
  """An error a program reports in one line ('error: ...') rather than a traceback."""


def _exit_with(status: int, error: BaseException) -> None:
  logging.error('%s', error)
  print(f'error: {error}', file=sys.stderr, flush=True)
  sys.exit(status)


def run_program(work: Callable[[threading.Event], Any], name: str,
                grace_s: Optional[float] = None,
                server_address: Optional[str] = None) -> Any:
  """`run_until_signal`, with the errors a person can act on turned into one line.

  An unreachable or lost Reverb server exits with EXIT_SERVER_LOST; a full disk with
  EXIT_DISK_FULL; an env step past its timeout with EXIT_STALLED; a busy or
  not-resumable root_dir, or a population member whose agent lacks the hyperparameters
  its population changes, with 2; a spec mismatch, variables never pushed, or a
  `ProgramError` with 1. Anything else (an error from the environment or the policy)
  propagates: a traceback and status 1.

  Args:
    work, name, grace_s, server_address: as `run_until_signal`'s.

  Returns:
    What `work` returned.
  """
  try:
    return run_until_signal(work, name, grace_s, server_address)
  except replay.ReplayServerUnreachableError as e:
    _exit_with(EXIT_SERVER_LOST, e)
  except (replay.SpecMismatchError, replay.VariablesNotPushedError, ProgramError) as e:
    _exit_with(1, e)
  except run_dir.START_ERRORS as e:  # root_dir busy or not resumable: bad usage
    _exit_with(2, e)
  except hyperparameters_lib.NotTunable as e:  # the config: no restart can fix it
    _exit_with(2, e)
  except envs.EnvStepTimeoutError as e:  # a hung simulator in an env worker
    _exit_with(EXIT_STALLED, e)
  except Exception as e:  # pylint: disable=broad-except
    disk_full.exit_if_disk_full(e)
    raise


def seconds_since_start() -> float:
  """Seconds since this process started (interpreter start-up and imports included),
  from /proc (Linux, where tfrl runs); since this module's import elsewhere."""
  try:
    with open('/proc/self/stat') as f:
      # Field 22, after the parenthesized command name: start time in clock ticks.
      start_ticks = int(f.read().rsplit(')', 1)[1].split()[19])
    with open('/proc/uptime') as f:
      uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf('SC_CLK_TCK')
  except (OSError, ValueError, IndexError):
    return time.monotonic() - _IMPORTED_AT


_IMPORTED_AT = time.monotonic()


def exit_now(status: int = 0) -> None:
  """Ends a program whose work is done and saved, without Python's interpreter teardown.

  With TensorFlow loaded, the teardown (destroying modules and the C++ objects behind
  them) takes 1-2 s of a short job's wall clock and does nothing a finished program
  needs: the summaries, logs and standard streams are flushed here first, and every
  checkpoint, export and Reverb checkpoint was written before the program returned.

  Args:
    status: the exit status.
  """
  metrics.flush_summary_writers()
  logging.flush()
  for handler in std_logging.getLogger().handlers + std_logging.getLogger('absl').handlers:
    handler.flush()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)  # pylint: disable=protected-access

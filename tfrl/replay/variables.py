"""`VariableContainer`: policy variables from the learner to actors through Reverb."""
import threading
import time
from typing import Any, Dict, Optional

import numpy as np
import reverb
import tensorflow as tf

from tfrl.replay import errors
from tfrl.replay import server as server_lib
from tfrl.replay import tables

DEFAULT_PULL_TIMEOUT_S = 60.0
DEFAULT_PUSH_TIMEOUT_S = 60.0
# How long one question to the server may take while a stop signal is watched.
_STOPPABLE_WAIT_S = 2.0
# The read after the size check saw an item: a server that dies in between leaves
# Reverb's sampler retrying forever, so the read is bounded well inside a pull's timeout
# (a collector's is 600 s), long enough for a large network's values on a loaded host.
_READ_TIMEOUT_S = 30.0


class VariablesNotPushedError(TimeoutError):
  """No learner pushed variables within the timeout."""


class VariableContainer:
  """Pushes a nest of variables into the size-1 variables table and pulls them back.

  The learner calls `push(train_step)` after each `Learner.run`; actors call
  `update(variables)` every few steps and get the newest copy (not a queue: pushing
  replaces the previous copy).
  """

  def __init__(self, server_address: str, variables: Dict[str, Any],
               table_name: str = tables.VARIABLES_TABLE):
    """Args:
      server_address: 'host:port' of the Reverb server.
      variables: a dict of variable nests, e.g. {'policy': policy.variables(),
        'train_step': train_step}; both sides must build the same structure.
      table_name: the variables table (see `tables.variables_table`).
    """
    self._address = server_address
    self._client = reverb.Client(server_address)
    self._variables = variables
    self._table = table_name

  @staticmethod
  def signature(variables: Dict[str, Any]) -> Any:
    """The variables table signature for `variables` (for `tables.variables_table`)."""
    return tables.spec_of_variables(variables)

  def pushes(self, timeout_s: float = DEFAULT_PULL_TIMEOUT_S) -> int:
    """How many pushes the server's table has taken since the server started.

    One small RPC (the table's insert count), far cheaper than a pull: what a
    collector polls while it waits for a policy version (`learners.job.pacing`).

    Raises:
      ReplayServerUnreachableError: the server did not answer within `timeout_s`.
    """
    # Its own client: a new one per call opened a gRPC channel every poll (5 ms apart).
    info = server_lib.wait_for_server(self._address, timeout_s, self._client)[self._table]
    return int(info.rate_limiter_info.insert_stats.completed)

  def push(self, timeout_s: float = DEFAULT_PUSH_TIMEOUT_S) -> None:
    """Inserts the current values, replacing what the table held.

    Args:
      timeout_s: how long opening the Reverb writer and sending the values may take
        in all (Reverb alone would wait forever for a server that is gone).

    Raises:
      ReplayServerUnreachableError: the server did not take the values in time; the
        message names the address and the table.
    """
    deadline = time.monotonic() + timeout_s
    values = tf.nest.map_structure(lambda v: v.numpy(), self._variables)
    what = (f'the Reverb server at {self._address!r} (pushing variables to table '
            f'{self._table!r})')
    writer = errors.call_with_timeout(
        lambda: self._client.trajectory_writer(num_keep_alive_refs=1), timeout_s, what,
        discard=lambda late_writer: late_writer.close())
    # Not `with writer:` - its __exit__ flushes without a timeout.
    try:
      writer.append(values)
      writer.create_item(self._table, 1.0,
                         tf.nest.map_structure(lambda c: c[-1], writer.history))
      remaining_ms = max(1, int(1000 * (deadline - time.monotonic())))
      try:
        writer.flush(timeout_ms=remaining_ms)
      except reverb.errors.DeadlineExceededError as e:
        raise errors.ReplayServerUnreachableError(
            f'Gave up after {timeout_s:g} s waiting for {what}: the server is not '
            'running, is restarting, or cannot be reached.') from e
    finally:
      writer.close()

  def pull(self, timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
           stop_event: Optional[threading.Event] = None,
           lost_after_s: Optional[float] = None) -> Any:
    """Returns the newest pushed values as numpy arrays (same structure as variables).

    Args:
      timeout_s: how long to wait for a first push; the whole call is bounded by
        about this (and at least 1 s more for the final read).
      stop_event: when set while waiting, gives up at once (raises).
      lost_after_s: when given, a server that has not answered for this long is lost
        (raises ReplayServerUnreachableError) instead of waited for up to `timeout_s`:
        for a caller that reconnects on its own, and says so (a collector).

    Raises:
      VariablesNotPushedError: the table stayed empty for `timeout_s` (or the wait was
        stopped).
      ReplayServerUnreachableError: the server stopped answering, or the table emptied
        again (a restarted server) before the values could be read.
    """
    deadline = time.monotonic() + timeout_s
    lost_at = None if lost_after_s is None else time.monotonic() + lost_after_s
    delay = 0.05
    while True:
      wait_s = max(1.0, deadline - time.monotonic())
      if stop_event is not None:
        # A lost server must not hold up a stop: ask in short calls, watching the signal.
        wait_s = min(wait_s, _STOPPABLE_WAIT_S)
      try:
        info = server_lib.wait_for_server(self._address, wait_s, self._client)
        if lost_after_s is not None:
          lost_at = time.monotonic() + lost_after_s  # it answered: counts from now
      except server_lib.ReplayServerUnreachableError as e:
        # A short call that timed out is asked again (one long call would have waited on
        # for a server not up yet); a connection that broke is the caller's lost server.
        timed_out = isinstance(e.__cause__, reverb.errors.DeadlineExceededError)
        stopped = stop_event is not None and stop_event.is_set()
        now = time.monotonic()
        if not stopped and (stop_event is None or not timed_out or now >= deadline or
                            (lost_at is not None and now >= lost_at)):
          raise
        info = None  # stopped (raises below), or asked again
      if info is not None and info[self._table].current_size > 0:
        break
      if time.monotonic() >= deadline or (stop_event is not None and stop_event.is_set()):
        raise VariablesNotPushedError(
            f'No variables in table {self._table!r} at {self._address} after '
            f'{timeout_s:.0f} s: is the learner (train program) running and pushing?')
      if stop_event is not None:
        stop_event.wait(delay)
      else:
        time.sleep(delay)
      delay = min(1.0, delay * 2)
    # Sampling waits forever for an item (and for a server): bounded, because the
    # server may have died or restarted with an empty table since the check above.
    read_timeout_s = min(_READ_TIMEOUT_S, max(1.0, deadline - time.monotonic()))
    sample = errors.call_with_timeout(
        lambda: next(self._client.sample(self._table, num_samples=1,
                                         emit_timesteps=False,
                                         unpack_as_table_signature=True)),
        read_timeout_s,
        f'the Reverb server at {self._address!r} (reading variables from table '
        f'{self._table!r})')
    return tf.nest.pack_sequence_as(self._variables,
                                    [np.asarray(x) for x in tf.nest.flatten(sample.data)])

  def update(self, timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
             stop_event: Optional[threading.Event] = None,
             lost_after_s: Optional[float] = None) -> None:
    """Assigns the newest pushed values to this side's variables (see `pull`)."""
    values = self.pull(timeout_s, stop_event, lost_after_s)
    tf.nest.map_structure(lambda v, x: v.assign(x), self._variables, values)

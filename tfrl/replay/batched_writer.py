"""`BatchedWriter`: what every batched Reverb writer shares (see `writers`).

Grouping envs into items, opening the Reverb writer with a bounded wait, creating items
in every table, the in-flight throttle (which a stop event interrupts), flush, abandon
and close. The item formats themselves (n-step transitions, sequences) live in
`tfrl.replay.writers`.

Rows travel as flat lists of arrays, in the order `tf.nest.flatten` gives the item
signature's leaves: Reverb flattens whatever it is given on every `append` and
`create_item`, and flattening, mapping and re-packing nested Trajectories in Python
cost more than the rest of a write (~0.2 ms of ~0.37 ms per 64-env step). The columns
are the same either way, and so are the items the table stores and samples.
"""
import abc
import threading
from typing import Any, Callable, List, Optional, Sequence, Union

from absl import logging
import numpy as np
import reverb
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import time_step as ts

from tfrl.replay import errors

DEFAULT_FLUSH_TIMEOUT_MS = 600_000
DEFAULT_MAX_IN_FLIGHT_ITEMS = 32
DEFAULT_CONNECT_TIMEOUT_S = 20.0
_THROTTLE_SLICE_MS = 10_000
# With a stop_event, waits are cut into slices this short so a stop is seen promptly.
_STOPPABLE_THROTTLE_SLICE_MS = 1_000
_THROTTLE_LOG_INTERVAL_MS = 10_000


class BatchedWriter(abc.ABC):
  """Shared plumbing: grouping envs into items, the Reverb writer, priorities."""

  def __init__(self,
               client: reverb.Client,
               table_names: Union[str, Sequence[str]],
               num_keep_alive_refs: int,
               envs_per_item: Optional[int] = None,
               priority: Union[float, Callable[[], float]] = 1.0,
               flush_timeout_ms: int = DEFAULT_FLUSH_TIMEOUT_MS,
               max_in_flight_items: int = DEFAULT_MAX_IN_FLIGHT_ITEMS,
               connect_timeout_s: Optional[float] = DEFAULT_CONNECT_TIMEOUT_S,
               stop_event: Optional[threading.Event] = None):
    """Args:
      client: a `reverb.Client` (e.g. `ReplayServer.client`).
      table_names: one table name, or several that each get every item (e.g. CLEAR's
        queue and replay tables); the data is stored once.
      num_keep_alive_refs: how many past steps items may reference.
      envs_per_item: G, how many envs share an item; None means all of them. Must
        divide the number of envs.
      priority: the priority of new items (prioritized tables update it later), or a
        function called for each item that returns it (e.g. the largest priority
        seen so far, or a random key for reservoir sampling).
      flush_timeout_ms: how long `flush` (and a write held back by the table's rate
        limiter) waits for the server before raising.
      max_in_flight_items: items that may be sent but not yet confirmed; past that a
        write waits, so a rate-limited table slows the actor down instead of letting
        unconfirmed items pile up in memory.
      connect_timeout_s: how long opening the Reverb writer (on the first write, and
        after `abandon`) may wait for the server; None waits forever, as Reverb does.
      stop_event: when set while a write waits for the server to accept items (a
        rate-limited table, a full queue), the write raises `WriterStoppedError`
        within about a second, so a collector can shut down; then call `abandon()`
        or `close(timeout_ms=...)` with a short timeout.
    """
    self._client = client
    self._tables = [table_names] if isinstance(table_names, str) else list(table_names)
    if not self._tables:
      raise ValueError('A writer needs at least one table name.')
    self._num_keep_alive_refs = num_keep_alive_refs
    self._envs_per_item = envs_per_item
    self._priority = priority if callable(priority) else (lambda: float(priority))
    self._flush_timeout_ms = flush_timeout_ms
    self._max_in_flight_items = max_in_flight_items
    self._connect_timeout_s = connect_timeout_s
    self._stop_event = stop_event
    self._writer = None
    self._num_envs = None
    self._items_created = 0
    self._leaves_per_group = None
    self._history = None  # the Reverb writer's, cached until the next append

  @property
  def table_names(self) -> Sequence[str]:
    return tuple(self._tables)

  @property
  def items_created(self) -> int:
    """Items created so far (each goes to every table); after `flush`, all inserted."""
    return self._items_created

  def _groups(self, num_envs: int) -> int:
    if self._num_envs is None:
      g = self._envs_per_item or num_envs
      if num_envs % g:
        raise ValueError(f'envs_per_item={g} must divide the number of envs ({num_envs}).')
      self._num_envs, self._envs_per_item = num_envs, g
    elif num_envs != self._num_envs:
      raise ValueError(f'This writer was fed {self._num_envs} envs and now {num_envs}.')
    return num_envs // self._envs_per_item

  def _split(self, flat_row: List[np.ndarray], num_groups: int) -> List[List[np.ndarray]]:
    """[N, ...] leaves -> num_groups flat rows of [G, ...] leaves."""
    if num_groups == 1:
      return [flat_row]
    split = [np.reshape(x, (num_groups, -1) + x.shape[1:]) for x in flat_row]
    return [[x[g] for x in split] for g in range(num_groups)]

  def _open_writer(self) -> reverb.TrajectoryWriter:
    """Opens the Reverb writer, which Reverb would wait for a server forever to do.

    Raises:
      ReplayServerUnreachableError: no server answered within `connect_timeout_s`.
    """
    address = getattr(self._client, 'server_address', None) or '(unknown address)'
    return errors.call_with_timeout(
        lambda: self._client.trajectory_writer(
            num_keep_alive_refs=self._num_keep_alive_refs),
        self._connect_timeout_s,
        f'the Reverb server at {address!r} (opening a writer for tables {self._tables})',
        discard=lambda late_writer: late_writer.close())

  def _append(self, groups: List[List[np.ndarray]]) -> None:
    """Appends one step: each group's flat row, the groups one after the other."""
    if self._writer is None:
      self._writer = self._open_writer()
    self._leaves_per_group = len(groups[0])
    self._writer.append([leaf for group in groups for leaf in group])
    self._history = None

  def _create_items(self, group_index: int,
                    slicers: Union[Callable, Sequence[Callable]]) -> None:
    """Creates one item (in every table) from group `group_index`'s columns.

    Args:
      group_index: the env group.
      slicers: column -> what the item references of it (e.g. its last L steps); one
        for every column, or one per leaf of the group's flat row (e.g. only the first
        step of an unroll's policy state).
    """
    if self._history is None:  # Reverb rebuilds it on every access
      self._history = self._writer.history
    start = group_index * self._leaves_per_group
    columns = self._history[start:start + self._leaves_per_group]
    if callable(slicers):
      item = [slicers(column) for column in columns]
    else:
      item = [slicer(column) for slicer, column in zip(slicers, columns)]
    priority = float(self._priority())
    for table in self._tables:
      self._writer.create_item(table, priority, item)
    self._items_created += 1

  def _throttle(self, max_unconfirmed: Optional[int] = None) -> None:
    """Waits while more than `max_unconfirmed` (default `max_in_flight_items`) items
    are unconfirmed.

    Raises:
      reverb.errors.DeadlineExceededError: still waiting after `flush_timeout_ms`.
      WriterStoppedError: the `stop_event` was set while waiting.
    """
    if max_unconfirmed is None:
      max_unconfirmed = self._max_in_flight_items
    slice_ms = (_THROTTLE_SLICE_MS if self._stop_event is None
                else _STOPPABLE_THROTTLE_SLICE_MS)
    waited_ms = 0
    next_log_ms = _THROTTLE_LOG_INTERVAL_MS
    while True:
      wait_ms = max(1, min(slice_ms, self._flush_timeout_ms - waited_ms))
      try:
        self._writer.flush(block_until_num_items=max_unconfirmed, timeout_ms=wait_ms)
        return
      except reverb.errors.DeadlineExceededError:
        waited_ms += wait_ms
        if self._stop_event is not None and self._stop_event.is_set():
          raise errors.WriterStoppedError(
              f'Stopped after waiting {waited_ms / 1000:.0f} s for {self._tables} to '
              'accept items.') from None
        if waited_ms >= self._flush_timeout_ms:
          raise reverb.errors.DeadlineExceededError(
              f'Items for {self._tables} were not accepted within '
              f'{waited_ms / 1000:.0f} s: the server is gone, or its rate limiter is '
              'holding inserts because the learner stopped sampling.') from None
        if waited_ms >= next_log_ms:
          next_log_ms += _THROTTLE_LOG_INTERVAL_MS
          logging.info('Writer waiting %.0f s so far for %s to accept items (rate '
                       'limiter or server).', waited_ms / 1000, self._tables)

  @abc.abstractmethod
  def write(self, time_step: ts.TimeStep, policy_step: policy_step_lib.PolicyStep,
            next_time_step: ts.TimeStep, policy_version: int = 0,
            policy_state: Any = ()) -> None:
    """Takes one batched step: arrays with leading dimension N (the number of envs).

    Args:
      time_step: the step the policy acted on.
      policy_step: the policy's output (action, state, info) on `time_step`.
      next_time_step: what the environment returned.
      policy_version: the train step of the policy that acted.
      policy_state: the state the policy acted from (a recurrent policy's; () for
        none). Writers whose items start a learner's unroll store it.
    """

  def reset(self) -> None:
    """Drops partial state (call after the environment is reset by hand)."""

  def flush(self, timeout_ms: Optional[int] = None) -> None:
    """Blocks until every created item has reached the server.

    Args:
      timeout_ms: how long to wait; None means `flush_timeout_ms`.

    Raises:
      reverb.errors.DeadlineExceededError: the server did not take them in time.
    """
    if self._writer is not None:
      self._writer.flush(
          timeout_ms=self._flush_timeout_ms if timeout_ms is None else timeout_ms)

  def send_all(self) -> None:
    """Blocks until every created item has reached the server, as `flush`, but gives
    up when the `stop_event` is set. Reverb sends an item once its chunks are
    complete, which may take later appends: a writer that pauses between items calls
    this first.

    Raises:
      reverb.errors.DeadlineExceededError: not all taken within `flush_timeout_ms`.
      WriterStoppedError: the `stop_event` was set while waiting.
    """
    if self._writer is not None:
      self._throttle(max_unconfirmed=0)

  def abandon(self) -> None:
    """Drops the Reverb writer and partial state without flushing (the server is gone).

    The next `write` opens a new Reverb writer on the same client, which reconnects
    once the server is back. Items not yet sent are lost.
    """
    if self._writer is not None:
      try:
        self._writer.close()
      except Exception:  # pylint: disable=broad-except
        pass  # Closing a writer whose stream already failed may raise; nothing to save.
      self._writer = None
      self._history = None
    self.reset()

  def close(self, timeout_ms: Optional[int] = None) -> None:
    """Flushes and releases the Reverb writer.

    Args:
      timeout_ms: how long the flush may wait; None means `flush_timeout_ms`. A
        collector shutting down (or whose server is gone) passes a short one.

    Raises:
      reverb.errors.DeadlineExceededError: the flush timed out; the Reverb writer is
        released all the same (items not yet accepted are lost).
    """
    if self._writer is not None:
      try:
        self.flush(timeout_ms)
      finally:
        self._writer.close()
        self._writer = None
        self._history = None

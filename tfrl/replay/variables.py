"""`VariableContainer`: policy variables from the learner to actors through Reverb."""
import threading
import time
from typing import Any, Dict, Optional

import numpy as np
import reverb
import tensorflow as tf

from tfrl.replay import server as server_lib
from tfrl.replay import tables

DEFAULT_PULL_TIMEOUT_S = 60.0


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

  def push(self) -> None:
    """Inserts the current values, replacing what the table held."""
    values = tf.nest.map_structure(lambda v: v.numpy(), self._variables)
    with self._client.trajectory_writer(num_keep_alive_refs=1) as writer:
      writer.append(values)
      writer.create_item(self._table, 1.0,
                         tf.nest.map_structure(lambda c: c[-1], writer.history))

  def pull(self, timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
           stop_event: Optional[threading.Event] = None) -> Any:
    """Returns the newest pushed values as numpy arrays (same structure as variables).

    Args:
      timeout_s: how long to wait for a first push.
      stop_event: when set while waiting, gives up at once (raises).

    Raises:
      VariablesNotPushedError: the table stayed empty for `timeout_s` (or the wait was
        stopped).
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
      info = server_lib.wait_for_server(self._address, max(1.0, deadline - time.monotonic()))
      if info[self._table].current_size > 0:
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
    sample = next(self._client.sample(self._table, num_samples=1, emit_timesteps=False,
                                      unpack_as_table_signature=True))
    return tf.nest.pack_sequence_as(self._variables,
                                    [np.asarray(x) for x in tf.nest.flatten(sample.data)])

  def update(self, timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
             stop_event: Optional[threading.Event] = None) -> None:
    """Assigns the newest pushed values to this side's variables (see `pull`)."""
    values = self.pull(timeout_s, stop_event)
    tf.nest.map_structure(lambda v, x: v.assign(x), self._variables, values)

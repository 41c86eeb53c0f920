"""`ReplayServer`: an embedded Reverb server (the default) or a connection to one."""
import os
from typing import Any, Dict, Optional, Sequence

from absl import logging
import portpicker
import reverb

DEFAULT_CONNECT_TIMEOUT_S = 20.0


class ReplayServerUnreachableError(ConnectionError):
  """Raised when no Reverb server answers at an address within the timeout."""


def wait_for_server(address: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
                   ) -> Dict[str, Any]:
  """Waits for the Reverb server at `address` to answer and returns its tables' info.

  Args:
    address: 'host:port'.
    timeout_s: how long to wait.

  Returns:
    Table name -> TableInfo (signature, size, ...).

  Raises:
    ReplayServerUnreachableError: nobody answered within `timeout_s`.
  """
  client = reverb.Client(address)
  try:
    return client.server_info(timeout=max(1, int(round(timeout_s))))
  except (reverb.errors.DeadlineExceededError, ConnectionError) as e:
    raise ReplayServerUnreachableError(
        f'No Reverb server answered at {address!r} within {timeout_s:.0f} s. Check that '
        'the reverb_server program is running, the host and port, and the firewall.'
    ) from e


class ReplayServer:
  """Owns an in-process Reverb server, or points at a remote one.

  Use `ReplayServer(tables)` to start an embedded server (what one-process training
  does) and `ReplayServer.connect(address)` to use a server another program runs.
  Either way, `address` and `client` are what writers, datasets and variable
  containers take.
  """

  def __init__(self,
               tables: Sequence[reverb.Table],
               port: Optional[int] = None,
               checkpoint_dir: Optional[str] = None):
    """Starts an embedded server.

    Args:
      tables: the tables to serve.
      port: port to listen on; a free one is picked when None.
      checkpoint_dir: where Reverb checkpoints go; when it already holds one, the
        tables start from the latest checkpoint's contents.

    Note: Reverb 0.14 listens on all network interfaces without authentication; this is
      logged at start. Run servers on a private network only.
    """
    self._port = int(port) if port else portpicker.pick_unused_port()
    checkpointer = None
    if checkpoint_dir:
      os.makedirs(checkpoint_dir, exist_ok=True)
      checkpointer = reverb.checkpointers.DefaultCheckpointer(path=checkpoint_dir)
    self._server = reverb.Server(tables=list(tables), port=self._port,
                                 checkpointer=checkpointer)
    self._address = f'localhost:{self._port}'
    self._client = reverb.Client(self._address)
    logging.warning(
        'Reverb server listening on port %d on ALL network interfaces, with no '
        'authentication: anyone who can reach this port can read and write its tables. '
        'Keep it on a private network.', self._port)

  @classmethod
  def connect(cls, address: str,
              timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> 'ReplayServer':
    """Returns a handle on the running server at `address`, once it answers.

    Raises:
      ReplayServerUnreachableError: nobody answered within `timeout_s`.
    """
    wait_for_server(address, timeout_s)
    handle = cls.__new__(cls)
    handle._server = None
    handle._port = int(address.rsplit(':', 1)[1])
    handle._address = address
    handle._client = reverb.Client(address)
    return handle

  @property
  def address(self) -> str:
    return self._address

  @property
  def port(self) -> int:
    return self._port

  @property
  def client(self) -> reverb.Client:
    return self._client

  @property
  def is_embedded(self) -> bool:
    return self._server is not None

  def table_info(self, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
                ) -> Dict[str, Any]:
    """Table name -> TableInfo (size, signature, rate limiter state)."""
    return wait_for_server(self._address, timeout_s)

  def checkpoint(self) -> str:
    """Writes a Reverb checkpoint (needs `checkpoint_dir`) and returns its path."""
    return self._client.checkpoint()

  def stop(self) -> None:
    """Stops an embedded server; does nothing for a connected one."""
    if self._server is not None:
      self._server.stop()
      self._server = None

  def wait(self) -> None:
    """Blocks while an embedded server serves (what the reverb_server program does)."""
    if self._server is not None:
      self._server.wait()

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.stop()


def inserted_items(address: str, table_name: str,
                   timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> int:
  """How many items the table has taken in since the server (re)started."""
  info = wait_for_server(address, timeout_s)[table_name]
  return int(info.rate_limiter_info.insert_stats.completed)

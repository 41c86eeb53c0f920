"""`ReplayServer`: an embedded Reverb server (the default) or a connection to one."""
import os
from typing import Any, Dict, List, Optional, Sequence

from absl import logging
import reverb
from reverb.cc.checkpointing import checkpoint_pb2
import tensorflow as tf
from tensorflow.python.saved_model import nested_structure_coder  # pylint: disable=g-direct-tensorflow-import
import tree

# Re-exported: callers catch `server.ReplayServerUnreachableError`.
from tfrl import logs
from tfrl.replay import errors
from tfrl.replay import fallback
from tfrl.replay import network
from tfrl.replay.errors import CheckpointMismatchError
from tfrl.replay.errors import ReplayServerUnreachableError  # pylint: disable=unused-import

DEFAULT_CONNECT_TIMEOUT_S = 20.0
# What Reverb's TFRecordCheckpointer writes last into a checkpoint directory: only
# directories holding it are complete, and only those are loaded.
_CHECKPOINT_DONE_FILE = 'DONE'
_CHECKPOINT_TABLES_FILE = 'tables.tfrecord'


def wait_for_server(address: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                    client: Optional[reverb.Client] = None) -> Dict[str, Any]:
  """Waits for the Reverb server at `address` to answer and returns its tables' info.

  Args:
    address: 'host:port'.
    timeout_s: how long to wait.
    client: a client of `address` to ask with (a poller reuses its own; default: a new
      one, which opens a new gRPC channel).

  Returns:
    Table name -> TableInfo (signature, size, ...).

  Raises:
    ReplayServerUnreachableError: nobody answered within `timeout_s`, or the
      connection was lost during the call (`errors.is_server_lost`).
  """
  client = client or reverb.Client(address)
  try:
    return client.server_info(timeout=max(1, int(round(timeout_s))))
  except Exception as e:  # pylint: disable=broad-except
    # A server that dies mid-call resets the connection (a RuntimeError): lost as well.
    if not errors.is_server_lost(e):
      raise
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
               checkpoint_dir: Optional[str] = None,
               warn_exposed: bool = True):
    """Starts an embedded server.

    Args:
      tables: the tables to serve.
      port: port to listen on; a free one is picked when None.
      checkpoint_dir: where Reverb checkpoints go; when it already holds one, the
        tables start from the latest checkpoint's contents.
      warn_exposed: print Reverb's exposure (below) on stderr, once per process
        (`network.warn_exposed`); False only logs it (a launcher warns for its job).

    Raises:
      PortInUseError: `port` is already taken (checked before starting: gRPC could
        otherwise share it through SO_REUSEPORT).
      CheckpointMismatchError: `checkpoint_dir` holds a checkpoint whose tables differ
        from `tables` (see `check_checkpoint`).

    Note: Reverb 0.14 listens on all network interfaces without authentication (see
      `tfrl.replay.network`). Run servers on a private network only.
    """
    if port:
      network.check_port_free(int(port))
    self._checkpoint_dir = checkpoint_dir
    tables = list(tables)

    def start():
      checkpointer = None
      if checkpoint_dir:
        check_checkpoint(checkpoint_dir, tables)
        checkpointer = reverb.checkpointers.DefaultCheckpointer(path=checkpoint_dir)
      with logs.native_stderr_filtered():  # Reverb's own INFO lines on starting
        return reverb.Server(tables=tables, port=self._port, checkpointer=checkpointer)

    # Held from the pick to the listen: see `network.reserved_port`.
    with network.reserved_port(int(port or 0)) as self._port:
      if checkpoint_dir:
        os.makedirs(checkpoint_dir, exist_ok=True)
        self._server = fallback.start_with_fallback(start, checkpoint_dir,
                                                    latest_checkpoint)
      else:
        self._server = start()
    self._address = f'127.0.0.1:{self._port}'
    self._client = reverb.Client(self._address)
    if warn_exposed:
      network.warn_exposed(self._port)
    else:
      logging.info('%s', network.exposure_warning(self._port))

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
    handle._checkpoint_dir = None
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

  def table_info(self, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
                ) -> Dict[str, Any]:
    """Table name -> TableInfo (size, signature, rate limiter state)."""
    return wait_for_server(self._address, timeout_s)

  def checkpoint(self) -> str:
    """Writes a Reverb checkpoint (needs `checkpoint_dir`) and returns its path; an
    embedded server keeps the one before beside it (see `fallback.keep_previous`)."""
    if self._checkpoint_dir:
      fallback.keep_previous(self._checkpoint_dir, latest_checkpoint)
    return self._client.checkpoint()

  def stop(self) -> None:
    """Stops an embedded server; does nothing for a connected one."""
    if self._server is not None:
      with logs.native_stderr_filtered():  # Reverb's INFO line on stopping
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


def latest_checkpoint(checkpoint_dir: str) -> Optional[str]:
  """The checkpoint Reverb would load from `checkpoint_dir`, or None.

  Reverb's checkpointer writes each checkpoint into a `<dir>/<timestamp>` directory
  and a DONE file last; on start it loads the greatest name that holds a DONE file.

  Args:
    checkpoint_dir: the `checkpoint_dir` given to `ReplayServer`.

  Returns:
    The path of the newest complete checkpoint, None when there is none.
  """
  if not tf.io.gfile.isdir(checkpoint_dir):
    return None
  names = sorted((name.rstrip('/') for name in tf.io.gfile.listdir(checkpoint_dir)),
                 reverse=True)
  for name in names:
    path = os.path.join(checkpoint_dir, name)
    if tf.io.gfile.exists(os.path.join(path, _CHECKPOINT_DONE_FILE)):
      return path
  return None


def check_checkpoint(checkpoint_dir: str, tables: Sequence[reverb.Table]) -> None:
  """Raises unless the checkpoint a server would load holds exactly `tables`' settings.

  Reverb 0.14 restores a checkpoint's tables with the settings they were saved with
  and ignores the configured ones (a changed capacity, sampler, rate limiter or
  signature silently does nothing), and fails on a checkpointed table that is not
  configured; this check turns both into one clear error before the server starts.

  Args:
    checkpoint_dir: the `checkpoint_dir` given to `ReplayServer`.
    tables: the configured tables.

  Raises:
    CheckpointMismatchError: tables were added or removed, or a table's max_size,
      max_times_sampled, sampler, remover, rate limiter or signature changed; the
      message names the checkpoint and every difference.
  """
  path = latest_checkpoint(checkpoint_dir)
  if path is None:
    return
  checkpointed = _read_checkpoint_tables(path)
  problems = []
  configured_names = set()
  for table in tables:
    configured_names.add(table.name)
    if table.name not in checkpointed:
      problems.append(f'table {table.name!r} is configured but not in the checkpoint')
      continue
    problems.extend(f'table {table.name!r}: {difference}'
                    for difference in _table_differences(checkpointed[table.name], table))
  problems.extend(f'table {name!r} is in the checkpoint but not configured'
                  for name in sorted(checkpointed) if name not in configured_names)
  if problems:
    raise CheckpointMismatchError(
        f'Reverb checkpoint {path} holds tables that differ from this configuration: '
        f'{"; ".join(problems)}. Start with an empty checkpoint directory (or move it '
        'away) to use the new settings.')


def _read_checkpoint_tables(path: str
                           ) -> Dict[str, checkpoint_pb2.PriorityTableCheckpoint]:
  """Table name -> its saved settings, from a checkpoint's `tables.tfrecord`."""
  records = tf.data.TFRecordDataset(os.path.join(path, _CHECKPOINT_TABLES_FILE),
                                    compression_type='ZLIB')
  tables = {}
  for record in records.as_numpy_iterator():
    table = checkpoint_pb2.PriorityTableCheckpoint.FromString(record)
    tables[table.table_name] = table
  return tables


def _table_differences(saved: checkpoint_pb2.PriorityTableCheckpoint,
                       table: reverb.Table) -> List[str]:
  """What differs between a checkpointed table and a configured one, in words."""
  info = table.info
  differences = []

  def compare(what, in_checkpoint, configured, describe=str):
    if in_checkpoint != configured:
      differences.append(f'{what} {describe(in_checkpoint)} in the checkpoint, '
                         f'{describe(configured)} configured')

  compare('max_size', saved.max_size, info.max_size)
  compare('max_times_sampled', saved.max_times_sampled, info.max_times_sampled)
  compare('sampler', saved.sampler, info.sampler_options, _describe_selector)
  compare('remover', saved.remover, info.remover_options, _describe_selector)
  for field in ('samples_per_insert', 'min_diff', 'max_diff', 'min_size_to_sample'):
    compare(f'rate limiter {field}', getattr(saved.rate_limiter, field),
            getattr(info.rate_limiter_info, field), _describe_number)
  saved_signature = (nested_structure_coder.decode_proto(saved.signature)
                     if saved.HasField('signature') else None)
  differences.extend(signature_differences(saved_signature, info.signature))
  return differences


def _describe_selector(options: Any) -> str:
  """'uniform', 'prioritized (priority_exponent 0.6)', 'fifo', 'min-heap', ..."""
  kind = options.WhichOneof('distribution')
  if kind == 'prioritized':
    return f'prioritized (priority_exponent {options.prioritized.priority_exponent:g})'
  if kind == 'heap':
    return 'min-heap' if options.heap.min_heap else 'max-heap'
  return kind or 'unset'


def _describe_number(x: float) -> str:
  # Reverb stores "no bound" as +-DBL_MAX; print that as a word, not 1.79769e+308.
  if abs(x) >= 1e300:
    return 'unbounded' if x > 0 else '-unbounded'
  return f'{x:g}'


def signature_differences(saved: Any, configured: Any) -> List[str]:
  """Structure, shape and dtype differences between two table signatures (decoded
  nests of TensorSpecs, or None), in words: 'signature <path> <dtype[shape]> in the
  checkpoint, <dtype[shape]> configured', and paths on one side only."""
  if saved is None and configured is None:
    return []
  if saved is None or configured is None:
    return ['no signature in the checkpoint, one configured' if saved is None else
            'a signature in the checkpoint, none configured']

  def by_path(signature):
    return {'/'.join(str(p) for p in path) or '(root)': spec
            for path, spec in tree.flatten_with_path(signature)}

  def shape_of(spec):
    return None if spec.shape.rank is None else spec.shape.as_list()

  def describe(spec):
    shape = shape_of(spec)
    return f'{spec.dtype.name}{"[unknown rank]" if shape is None else shape}'

  saved_specs, configured_specs = by_path(saved), by_path(configured)
  differences = []
  differences.extend(f'signature {path} is in the checkpoint but not configured'
                     for path in saved_specs if path not in configured_specs)
  differences.extend(f'signature {path} is configured but not in the checkpoint'
                     for path in configured_specs if path not in saved_specs)
  for path, spec in saved_specs.items():
    other = configured_specs.get(path)
    if other is not None and (spec.dtype != other.dtype or
                              shape_of(spec) != shape_of(other)):
      differences.append(f'signature {path} {describe(spec)} in the checkpoint, '
                         f'{describe(other)} configured')
  return differences

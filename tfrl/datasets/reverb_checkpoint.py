"""A finished job's Reverb checkpoint as a dataset (ALF's `offline_buffer_dir`).

A tfrl job's replay lives in Reverb, and its server checkpoints it (`learners/
reverb_server.py`, into root_dir/reverb). Those items are already the rows an agent of
the same layout trains on (n-step folding, boundary rows, frame dtypes), so a dataset
taken from a checkpoint skips the RLDS path (`feeder`) and enters replay as Reverb
restores any checkpoint.

Reverb restores a table with the settings it was saved with, rate limiter state
included: the finished job's replay table would come back with its samples-per-insert
limiter spent (no sample allowed) and, after prioritized replay, its old priorities.
`write_first_checkpoint` therefore writes a new checkpoint: the job's own tables with
their configured settings, the source table's items in the job's table for datasets
(the replay table offline, 'dataset' for hybrid jobs), every other table empty. The
chunks file, which holds the data, is linked (copied across file systems), not
rewritten.
"""
import dataclasses
import os
import shutil
from typing import Dict, Iterator, Optional, Sequence

import reverb
from reverb.cc import schema_pb2
from reverb.cc.checkpointing import checkpoint_pb2
import tensorflow as tf
from tensorflow.python.saved_model import nested_structure_coder  # pylint: disable=g-direct-tensorflow-import

from tfrl.datasets import dataset_table
from tfrl.datasets import rlds
from tfrl.replay import server as server_lib

_DONE, _TABLES, _ITEMS, _CHUNKS = 'DONE', 'tables.tfrecord', 'items.tfrecord', 'chunks.tfrecord'
_JOB_REVERB_DIR = 'reverb'  # where a tfrl job's server checkpoints (learners/reverb_server.py)
# Reverb loads the greatest name holding a DONE file, and names its own checkpoints by
# time ('2026-11-26T13:48:28.27+00:00'): this name sorts before every one of them, so
# the first checkpoint the server writes itself is the one a restart loads.
FIRST_CHECKPOINT_NAME = '0000-dataset'


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
  """A Reverb checkpoint found and counted for a layout (`plan`).

  Attributes:
    directory: the dataset directory as named.
    checkpoint: the checkpoint read (the newest complete one there).
    source_table: the checkpoint's table that holds the experience.
    items: its items: the dataset table's minimum size to sample.
    rows: the rows they hold (boundary rows included).
  """
  directory: str
  checkpoint: str
  source_table: str
  items: int
  rows: int


def find_checkpoint(directory: str) -> Optional[str]:
  """The Reverb checkpoint `directory` names, or None if it names none.

  Args:
    directory: a checkpoint (it holds Reverb's DONE file), a checkpoint directory (the
      newest complete checkpoint in it), or a tfrl job's root (its server's).
  """
  if tf.io.gfile.exists(os.path.join(directory, _DONE)) and tf.io.gfile.exists(
      os.path.join(directory, _TABLES)):
    return directory
  for candidate in (directory, os.path.join(directory, _JOB_REVERB_DIR)):
    found = server_lib.latest_checkpoint(candidate)
    if found is not None and tf.io.gfile.exists(os.path.join(found, _TABLES)):
      return found
  return None


def _records(path: str) -> Iterator[bytes]:
  """A checkpoint file's records (Reverb writes ZLIB; older versions wrote none)."""
  try:
    yield from tf.data.TFRecordDataset(path, compression_type='ZLIB').as_numpy_iterator()
  except tf.errors.DataLossError:
    yield from tf.data.TFRecordDataset(path).as_numpy_iterator()


def _saved_tables(checkpoint: str) -> Dict[str, checkpoint_pb2.PriorityTableCheckpoint]:
  tables = {}
  for record in _records(os.path.join(checkpoint, _TABLES)):
    table = checkpoint_pb2.PriorityTableCheckpoint.FromString(record)
    tables[table.table_name] = table
  return tables


def _items_of(checkpoint: str, table: str) -> Iterator[schema_pb2.PrioritizedItem]:
  for record in _records(os.path.join(checkpoint, _ITEMS)):
    item = schema_pb2.PrioritizedItem.FromString(record)
    if item.table == table:
      yield item


def plan(directory: str, layout) -> CheckpointPlan:
  """Finds and counts the checkpoint's experience for `layout`'s table for datasets.

  Args:
    directory: see `find_checkpoint`.
    layout: the job's `TransitionReplay` layout; the checkpoint's experience table
      (`layout.experience_table`) is the dataset.

  Returns:
    The plan.

  Raises:
    rlds.DatasetError: no Reverb checkpoint there, no experience table in it, or more
      rows than the table holds.
  """
  checkpoint = find_checkpoint(directory)
  if checkpoint is None:
    raise rlds.DatasetError(f'No Reverb checkpoint at {directory}.')
  source = layout.experience_table
  saved = _saved_tables(checkpoint)
  if source not in saved:
    raise rlds.DatasetError(
        f'The Reverb checkpoint {checkpoint} holds no {source!r} table (it holds '
        f'{sorted(saved)}): a dataset comes from a job of the same layout.')
  items = sum(1 for _ in _items_of(checkpoint, source))
  rows = items * layout.rows_per_item
  dataset_table.check_fits(f'The Reverb checkpoint {checkpoint} holds {rows} rows', rows, layout)
  return CheckpointPlan(directory, checkpoint, source, items, rows)


def check_items(checkpoint_plan: CheckpointPlan, table: reverb.Table) -> None:
  """Raises rlds.DatasetSpecError, naming both, unless the checkpoint's items have
  the shape of `table`'s (the same env, n_step, steps_per_item and num_envs)."""
  saved = _saved_tables(checkpoint_plan.checkpoint)[checkpoint_plan.source_table]
  saved_signature = (nested_structure_coder.decode_proto(saved.signature)
                     if saved.HasField('signature') else None)
  differences = server_lib.signature_differences(saved_signature, table.info.signature)
  if differences:
    raise rlds.DatasetSpecError(
        f'The Reverb checkpoint {checkpoint_plan.checkpoint} holds items unlike this '
        f'job\'s (another env, n_step, steps_per_item or num_envs): '
        f'{"; ".join(differences)}.')


def _table_checkpoint(table: reverb.Table, items: int) -> checkpoint_pb2.PriorityTableCheckpoint:
  """`table`'s configured settings as a checkpointed table holding `items` items."""
  info = table.info
  limiter = info.rate_limiter_info
  return checkpoint_pb2.PriorityTableCheckpoint(
      table_name=table.name, max_size=info.max_size,
      max_times_sampled=info.max_times_sampled,
      rate_limiter=checkpoint_pb2.RateLimiterCheckpoint(
          samples_per_insert=limiter.samples_per_insert, min_diff=limiter.min_diff,
          max_diff=limiter.max_diff, min_size_to_sample=limiter.min_size_to_sample,
          insert_count=items),
      sampler=info.sampler_options, remover=info.remover_options,
      signature=(nested_structure_coder.encode_structure(info.signature)
                 if info.signature is not None else None))


def _link_or_copy(source: str, destination: str) -> None:
  try:
    os.link(source, destination)
  except OSError:  # another file system, or links not allowed
    shutil.copyfile(source, destination)


def write_first_checkpoint(checkpoint_plan: CheckpointPlan, tables: Sequence[reverb.Table],
                           checkpoint_dir: str, dataset_table: str) -> str:
  """Writes a checkpoint a server with `tables` starts from, the dataset's items in
  `dataset_table` and every other table empty.

  Args:
    checkpoint_plan: from `plan`.
    tables: every table the server will serve, as configured.
    checkpoint_dir: the server's `checkpoint_dir` (it must hold no checkpoint).
    dataset_table: where the items go.

  Returns:
    The checkpoint written.

  Raises:
    rlds.DatasetSpecError: see `check_items`.
  """
  check_items(checkpoint_plan, next(t for t in tables if t.name == dataset_table))
  path = os.path.join(checkpoint_dir, FIRST_CHECKPOINT_NAME)
  tf.io.gfile.makedirs(path)
  options = tf.io.TFRecordOptions(compression_type='ZLIB')
  with tf.io.TFRecordWriter(os.path.join(path, _TABLES), options) as writer:
    for table in tables:
      items = checkpoint_plan.items if table.name == dataset_table else 0
      writer.write(_table_checkpoint(table, items).SerializeToString())
  with tf.io.TFRecordWriter(os.path.join(path, _ITEMS), options) as writer:
    for item in _items_of(checkpoint_plan.checkpoint, checkpoint_plan.source_table):
      item.table, item.times_sampled = dataset_table, 0
      writer.write(item.SerializeToString())
  _link_or_copy(os.path.join(checkpoint_plan.checkpoint, _CHUNKS),
                os.path.join(path, _CHUNKS))
  with tf.io.gfile.GFile(os.path.join(path, _DONE), 'w') as f:
    f.write('')  # last: a checkpoint without it is incomplete and never loaded
  return path


def seed_checkpoint_dir(checkpoint_plan: CheckpointPlan, tables: Sequence[reverb.Table],
                        checkpoint_dir: str, dataset_table: str) -> bool:
  """Makes the dataset the first checkpoint of a server's `checkpoint_dir`
  (`write_first_checkpoint`) unless it holds one already (a restarted job's server
  restores its own, dataset included).

  Returns:
    Whether it wrote one.

  Raises:
    rlds.DatasetSpecError: see `check_items`.
  """
  if server_lib.latest_checkpoint(checkpoint_dir) is not None:
    return False
  write_first_checkpoint(checkpoint_plan, tables, checkpoint_dir, dataset_table)
  return True


def loaded_message(checkpoint_plan: CheckpointPlan, layout, seconds: float) -> str:
  """The progress line of a checkpoint's items restored as a dataset."""
  how = dataset_table.how_it_trains(layout)
  return (f'Restored {checkpoint_plan.items} items ({checkpoint_plan.rows} rows) of '
          f'{checkpoint_plan.source_table!r} from the Reverb checkpoint '
          f'{checkpoint_plan.checkpoint} in {seconds:.1f} s; {how}.')

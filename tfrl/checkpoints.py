"""A trainer's checkpoints, and restoring the newest readable one, state file or not.

`tf.train.CheckpointManager` trusts the `checkpoint` state file: without it a job
restarts from step 0 beside its own checkpoints, and a newest checkpoint that fails to
read stops every resume with a traceback naming no file. `restore_newest` instead scans
the `ckpt-N.index` files, tries them newest first, moves an unreadable one aside (into
`unreadable/`, so the manager never lists or overwrites evidence) saying which and why,
and rewrites the state file to list the readable ones. Paths go through `tf.io.gfile`,
so a root_dir on gs:// (or any TensorFlow filesystem) resumes as a local one does.
"""
import os
import re
from typing import Any, Callable, Dict, List, Optional

from absl import logging
import tensorflow as tf

from tfrl import files
# checkpoint_prefixes is this module's API too (tfrl.checkpoint_files holds it).
from tfrl.checkpoint_files import checkpoint_prefixes  # pylint: disable=unused-import
from tfrl import logs
from tfrl import run_dir

UNREADABLE_DIR = 'unreadable'
_TEMP = re.compile(r'^ckpt-\d+_temp')


class NoReadableCheckpoint(run_dir.RootDirNotResumable):
  """Checkpoints exist but none could be read (the message names each and why)."""




def remove_stale_temporaries(directory: str) -> List[str]:
  """Deletes `ckpt-N_temp*` left by a checkpoint write that failed or was killed.

  Call it when no other process writes to `directory` (the root_dir's lock is held).

  Returns:
    The paths removed.
  """
  if not tf.io.gfile.isdir(directory):
    return []
  removed = [os.path.join(directory, n.rstrip('/'))
             for n in tf.io.gfile.listdir(directory) if _TEMP.match(n)]
  for path in removed:
    files.remove_tree(path)
    logging.info('Removed %s, left by a failed checkpoint write.', path)
  return removed


def _move_aside(prefix: str) -> str:
  directory, base = os.path.split(prefix)
  target = os.path.join(directory, UNREADABLE_DIR)
  tf.io.gfile.makedirs(target)
  for name in tf.io.gfile.listdir(directory):
    if name.startswith(base + '.'):
      tf.io.gfile.rename(os.path.join(directory, name), os.path.join(target, name),
                         overwrite=True)
  return os.path.join(target, base)


def _reason(error: BaseException) -> str:
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text[:300]}'


def restore_newest(directory: str, restore_fn: Callable[[str], None]) -> Optional[str]:
  """Restores the newest readable checkpoint in `directory` with `restore_fn(prefix)`.

  Unreadable ones are moved to `directory/unreadable/` and named in a warning; the
  `checkpoint` state file is rewritten to list the readable ones (newest last), so a
  `CheckpointManager` made afterwards keeps and prunes them as its own.

  Args:
    directory: the checkpoint directory.
    restore_fn: restores one prefix, raising on a checkpoint it cannot read.

  Returns:
    The restored prefix, or None where the directory holds no checkpoint.

  Raises:
    NoReadableCheckpoint: there were checkpoints and none could be read.
  """
  remove_stale_temporaries(directory)
  prefixes = checkpoint_prefixes(directory)
  failures = []
  for prefix in prefixes:
    try:
      restore_fn(prefix)
    except (tf.errors.OpError, ValueError, AssertionError, IndexError, OSError) as e:
      moved = _move_aside(prefix)
      failures.append(f'{prefix} ({_reason(e)}; moved to {moved})')
      continue
    if failures:
      logs.progress('Restored %s because %s could not be read.', prefix,
                    ', '.join(failures))
    readable = [p for p in prefixes if tf.io.gfile.exists(p + '.index')]
    tf.compat.v1.train.update_checkpoint_state(
        directory, prefix, all_model_checkpoint_paths=list(reversed(readable)))
    return prefix
  if failures:
    raise NoReadableCheckpoint(
        f'no checkpoint in {directory} could be read: {", ".join(failures)}; restore '
        'one, or start from scratch with --overwrite.')
  return None


class TrainCheckpoint:
  """A trainer's checkpoints in one directory: the agent (with its optimizer state) and
  the train step, which every checkpoint restored must hold, and extras (e.g. a
  program's env-step counter), restored by name where present; the newest
  `max_to_keep` are kept.
  """

  def __init__(self, directory: str, agent: tf.Module, train_step: tf.Variable,
               extras: Optional[Dict[str, Any]] = None, max_to_keep: int = 3):
    """Args:
      directory: where the `ckpt-N` files go.
      agent: the agent (any trackable).
      train_step: the train step variable; checkpoints are numbered by it.
      extras: more trackables by name; one a checkpoint lacks keeps its value.
      max_to_keep: older checkpoints are deleted.
    """
    self.directory = directory
    self._agent, self._train_step, self._extras = agent, train_step, extras or {}
    self._max_to_keep = max_to_keep
    self._manager = None

  def _restore(self, prefix: str) -> None:
    # The agent and step must all be in it; extras may not be (a checkpoint written
    # before the program had them): those keep their initial values.
    tf.train.Checkpoint(agent=self._agent, train_step=self._train_step).restore(
        prefix).assert_existing_objects_matched()
    if self._extras:
      tf.train.Checkpoint(**self._extras).restore(prefix).expect_partial()

  def _checkpoint_manager(self) -> tf.train.CheckpointManager:
    # Made after `restore_newest` rewrote the state file, so it keeps and prunes the
    # readable checkpoints as its own.
    if self._manager is None:
      checkpoint = tf.train.Checkpoint(agent=self._agent, train_step=self._train_step,
                                       **self._extras)
      self._manager = tf.train.CheckpointManager(checkpoint, self.directory,
                                                 max_to_keep=self._max_to_keep)
    return self._manager

  def restore_newest(self) -> Optional[str]:
    """Restores the newest readable checkpoint (`restore_newest` above).

    Returns:
      Its prefix, or None where the directory holds none.

    Raises:
      NoReadableCheckpoint: there were checkpoints and none could be read.
    """
    latest = restore_newest(self.directory, self._restore)
    self._checkpoint_manager()
    return latest

  def save(self) -> str:
    """Writes a checkpoint numbered by the train step now; returns its prefix.

    Raises:
      Whatever the write raised (a full disk, an interrupt), after removing the
      `ckpt-N_temp` it left.
    """
    number = int(self._train_step.numpy())
    if not files.is_local(self.directory):
      # A checkpoint of this number written again (the final save at an interval's
      # step): TensorFlow's ram:// filesystem appends to a file opened for writing
      # rather than replacing it, which corrupts the index; delete the old files first.
      prefix = os.path.join(self.directory, f'ckpt-{number}')
      for path in tf.io.gfile.glob(prefix + '.*'):
        tf.io.gfile.remove(path)
    try:
      return self._checkpoint_manager().save(checkpoint_number=number)
    except BaseException:
      remove_stale_temporaries(self.directory)
      raise

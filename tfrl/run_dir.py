"""One job per root_dir: an exclusive lock and the run's identity.

`RootDirLock` takes an exclusive `fcntl.flock` on `root_dir/job.lock` for the life of a
job and writes the holder (host, PID, start time, command) into it, so a second job on
the same root_dir fails at once with one line naming the holder. The kernel drops a
flock when its process dies (kill -9 included), so a lock file left by a dead job is
stale: it is reported as such and taken over.

`run_id` reads (or, on a job's first start, creates) `root_dir/run.json`, a random id
that checkpoints' and exports' lineage is checked against: a resumed job reuses it.

A root_dir on another TensorFlow filesystem (gs://...) has no flock: its lock is not
taken (a warning says so), and everything else here goes through `tf.io.gfile`.
"""
import datetime
import fcntl
import json
import os
import socket
import sys
import uuid
from typing import Dict, Optional

from absl import logging
import tensorflow as tf

from tfrl import checkpoint_files
from tfrl import files
from tfrl import root_dir_layout

LOCK_FILE = 'job.lock'
RUN_FILE = 'run.json'


class RootDirBusy(RuntimeError):
  """Another live job holds the root_dir's lock (the message names it)."""


def _describe(holder: Dict[str, str]) -> str:
  return (f"host {holder.get('host', '?')}, PID {holder.get('pid', '?')}, since "
          f"{holder.get('since', '?')}")


def _read_json(path: str) -> Optional[dict]:
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


class RootDirLock:
  """An exclusive lock on a root_dir, held until `release` (or the process's death)."""

  def __init__(self, root_dir: str):
    """Takes the lock; does not wait for it.

    Args:
      root_dir: the job's directory (created if missing).

    Raises:
      RootDirBusy: another live process holds it.
    """
    self.path = os.path.join(root_dir, LOCK_FILE)
    self._fd = None
    if not files.is_local(root_dir):
      logging.warning('root_dir %s is not on the local disk: it has no job lock, so a '
                      'second job on it is not detected (run one job per root_dir).',
                      root_dir)
      return
    os.makedirs(root_dir, exist_ok=True)
    # O_CREAT without O_TRUNC: the holder's record stays readable until we own the lock.
    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _read_json(self.path) or {}
      os.close(self._fd)
      self._fd = None
      raise RootDirBusy(f'root_dir {os.path.dirname(self.path)} is in use by another job '
                        f'({_describe(holder)}); stop it or use another --root_dir.'
                        ) from None
    previous = _read_json(self.path)
    if previous:
      # We got the lock, so its last holder is gone without releasing it (killed).
      logging.warning('Taking over the stale lock %s of a job that is no longer running '
                      '(%s).', self.path, _describe(previous))
    self.holder = {
        'host': socket.gethostname(), 'pid': str(os.getpid()),
        'since': datetime.datetime.now(datetime.timezone.utc).strftime(
            '%Y-%m-%d %H:%M:%S UTC'),
        'command': ' '.join(sys.argv),
    }
    os.ftruncate(self._fd, 0)
    os.pwrite(self._fd, json.dumps(self.holder).encode(), 0)
    os.fsync(self._fd)

  def release(self) -> None:
    """Empties the record and drops the lock (idempotent)."""
    if self._fd is None:
      return
    # An empty file means "released in order", so the next job does not call it stale.
    os.ftruncate(self._fd, 0)
    fcntl.flock(self._fd, fcntl.LOCK_UN)
    os.close(self._fd)
    self._fd = None

  def __enter__(self) -> 'RootDirLock':
    return self

  def __exit__(self, *unused_exc) -> None:
    self.release()


def run_id(root_dir: str) -> str:
  """The root_dir's run id: read from `root_dir/run.json`, or created there now.

  Args:
    root_dir: the job's directory (its lock should be held, so two jobs never race).

  Returns:
    A 32-character hex id.
  """
  path = os.path.join(root_dir, RUN_FILE)
  record = files.read_json(path)  # root_dir may be on any TensorFlow filesystem
  if record and isinstance(record.get('run_id'), str):
    return record['run_id']
  new_id = uuid.uuid4().hex
  tf.io.gfile.makedirs(root_dir)
  files.write_json(path, {'run_id': new_id, 'created': datetime.datetime.now(
      datetime.timezone.utc).isoformat()})
  return new_id


def new_run_id(root_dir: str) -> str:
  """Replaces the root_dir's run id with a fresh one (a from-scratch `--overwrite`).

  Returns:
    The new id.
  """
  files.remove_tree(os.path.join(root_dir, RUN_FILE))
  return run_id(root_dir)


class RootDirNotResumable(RuntimeError):
  """A job would start from scratch over another run's exports (message says how)."""


# What a program reports as bad input (one 'error:' line, exit status 2).
START_ERRORS = (RootDirBusy, RootDirNotResumable)


def claim(root_dir: str, overwrite: bool = False) -> RootDirLock:
  """Takes the root_dir for one job: its lock, a lineage check, its run id.

  A root_dir with exports but no checkpoint to resume from belongs to another run: a job
  starting from scratch there would replace trained policies with untrained ones.

  Args:
    root_dir: the job's directory.
    overwrite: start from scratch: delete the checkpoints and exports (and start a
      new run id) instead of resuming or refusing.

  Returns:
    The held lock (release it, or use it as a context manager).

  Raises:
    RootDirBusy: another live job holds the lock.
    RootDirNotResumable: exports but no checkpoint, and not `overwrite`.
  """
  lock = RootDirLock(root_dir)
  try:
    checkpoint_dir = os.path.join(root_dir, root_dir_layout.TRAIN_DIR,
                                  root_dir_layout.CHECKPOINT_DIR)
    policy_dir = os.path.join(root_dir, root_dir_layout.POLICY_DIR)
    has_checkpoints = bool(checkpoint_files.checkpoint_prefixes(checkpoint_dir))
    has_exports = tf.io.gfile.isdir(os.path.join(policy_dir, root_dir_layout.GREEDY_POLICY))
    if overwrite and (has_checkpoints or has_exports):
      for path in (checkpoint_dir, policy_dir):
        files.remove_tree(path)
      logging.warning('--overwrite: deleted the checkpoints and exports in %s.', root_dir)
      new_run_id(root_dir)
    elif has_exports and not has_checkpoints:
      raise RootDirNotResumable(
          f'root_dir {root_dir} holds exports in {policy_dir} but no checkpoint to resume '
          'from; pass --overwrite to replace them, or use a new --root_dir.')
    run_id(root_dir)
  except BaseException:
    lock.release()
    raise
  return lock

"""A Reverb server's last two checkpoints, and falling back past an unreadable one.

Reverb 0.14's checkpointer keeps only its newest checkpoint (it deletes the older ones
after each write), so a corrupt one stopped the server until the user deleted
root_dir/reverb. Before each write `keep_previous` hard-links the current checkpoint
into `<checkpoint_dir>_previous/` (no copy of the data; Reverb's delete then only drops
its own links). `start_with_fallback` starts the server and, when the newest checkpoint
fails to load, moves it to `<checkpoint_dir>_unreadable/`, puts the previous one in its
place, says so, and starts again.
"""
import os
import shutil
from typing import Callable, Optional, TypeVar

from absl import logging
import tensorflow as tf

PREVIOUS_SUFFIX = '_previous'
UNREADABLE_SUFFIX = '_unreadable'
T = TypeVar('T')
LatestFn = Callable[[str], Optional[str]]


def _link_tree(source: str, target: str) -> None:
  """Hard-links the files of `source` into a new directory `target` (copies where the
  filesystem cannot link)."""
  shutil.copytree(source, target, copy_function=_link_or_copy)


def _link_or_copy(source: str, target: str) -> None:
  try:
    os.link(source, target)
  except OSError:
    shutil.copy2(source, target)


def keep_previous(checkpoint_dir: str, latest: LatestFn) -> Optional[str]:
  """Keeps the current newest checkpoint beside `checkpoint_dir` before a new write.

  Args:
    checkpoint_dir: the server's checkpoint directory.
    latest: returns the newest complete checkpoint of a directory (or None).

  Returns:
    The kept copy's path, or None when there was no checkpoint yet.
  """
  current = latest(checkpoint_dir)
  if current is None:
    return None
  previous_dir = checkpoint_dir.rstrip('/') + PREVIOUS_SUFFIX
  kept = os.path.join(previous_dir, os.path.basename(current))
  if os.path.isdir(kept):
    return kept
  # Built under a temporary name, then swapped in: a kill mid-link never leaves a
  # half-kept checkpoint as the only previous one.
  tmp = previous_dir + '.tmp'
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  _link_tree(current, os.path.join(tmp, os.path.basename(current)))
  shutil.rmtree(previous_dir, ignore_errors=True)
  os.rename(tmp, previous_dir)
  return kept


def start_with_fallback(start: Callable[[], T], checkpoint_dir: str,
                        latest: LatestFn) -> T:
  """Runs `start()`; if the newest checkpoint cannot be loaded, falls back once.

  Args:
    start: starts the server from `checkpoint_dir` (raising on a checkpoint it cannot
      read).
    checkpoint_dir: the server's checkpoint directory.
    latest: returns the newest complete checkpoint of a directory (or None).

  Returns:
    What `start` returned.

  Raises:
    Whatever `start` raises when there is no checkpoint to blame, or on the retry.
  """
  try:
    return start()
  except (RuntimeError, OSError, tf.errors.OpError) as e:  # Reverb's and TF's reads
    bad = latest(checkpoint_dir)
    # gRPC's failure to bind a port is a RuntimeError too: not the checkpoint's fault.
    if bad is None or 'BuildAndStart' in str(e):
      raise
    reason = ' '.join(str(e).split())[:300]
  unreadable_dir = checkpoint_dir.rstrip('/') + UNREADABLE_SUFFIX
  os.makedirs(unreadable_dir, exist_ok=True)
  moved = os.path.join(unreadable_dir, os.path.basename(bad))
  shutil.rmtree(moved, ignore_errors=True)
  os.rename(bad, moved)
  previous = latest(checkpoint_dir.rstrip('/') + PREVIOUS_SUFFIX)
  if previous is not None and latest(checkpoint_dir) is None:
    _link_tree(previous, os.path.join(checkpoint_dir, os.path.basename(previous)))
  instead = latest(checkpoint_dir) or 'empty tables'
  logging.warning('Reverb checkpoint %s could not be read (%s); moved it to %s and '
                  'starting from %s.', bad, reason, moved, instead)
  return start()


def discard(checkpoint_dir: str) -> None:
  """Deletes a server's checkpoints, the kept previous one and any set aside: what a
  job started over with `--overwrite` must not replay from the run it replaces.

  Args:
    checkpoint_dir: the server's checkpoint directory.
  """
  for suffix in ('', PREVIOUS_SUFFIX, UNREADABLE_SUFFIX, PREVIOUS_SUFFIX + '.tmp'):
    shutil.rmtree(checkpoint_dir.rstrip('/') + suffix, ignore_errors=True)

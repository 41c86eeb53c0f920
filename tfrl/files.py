"""Paths on the local disk or a TensorFlow filesystem (gs://, s3://, ...).

Exports, their versions for TF Serving and a run's id go through here, on the local
disk and, tested through TF's ram:// filesystem (the stand-in for gs:// here), on
other TensorFlow filesystems. Remote paths are joined and compared by name only:
`os.path.normpath` would turn 'gs://bucket/x' into the local relative path
'gs:/bucket/x'. What differs on an object store is atomicity: locally a directory takes
its place in one rename (an export's swap in one `renameat2(RENAME_EXCHANGE)`), while
an object store renames object by object, so there a directory is copied into place
file by file, `saved_model.pb` last (a loader that finds it finds the rest).
"""
import json
import os
import tempfile
import uuid
from typing import Any, List, Optional

import tensorflow as tf

SAVED_MODEL_PB = 'saved_model.pb'


def is_local(path: str) -> bool:
  """Whether `path` is on the local disk (no 'scheme://', or 'file://')."""
  return '://' not in path or path.startswith('file://')


def _read_umask() -> int:
  umask = os.umask(0)
  os.umask(umask)
  return umask


# Read once, at import: setting the umask to read it would, for that moment, give files
# other threads create (a background checkpoint write) the wrong mode.
_UMASK = _read_umask()


def readable_by_all(path: str) -> None:
  """Gives a local directory the mode a new one gets under the umask (mkdtemp's is 0700,
  which keeps a server running as another user out)."""
  if is_local(path):
    os.chmod(path, 0o777 & ~_UMASK)


def make_temporary_dir(parent: str, prefix: str) -> str:
  """A new, empty directory in `parent` whose name starts with `prefix`."""
  tf.io.gfile.makedirs(parent)
  if is_local(parent):
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    readable_by_all(path)
    return path
  path = os.path.join(parent, prefix + uuid.uuid4().hex[:12])
  tf.io.gfile.makedirs(path)
  return path


def remove_tree(path: str) -> None:
  """Deletes a file or directory tree if it exists."""
  if not tf.io.gfile.exists(path):
    return
  if not tf.io.gfile.isdir(path):
    tf.io.gfile.remove(path)
    return
  try:
    tf.io.gfile.rmtree(path)
  except tf.errors.NotFoundError:
    # A filesystem whose directories are only name prefixes (ram://) has no recursive
    # delete: its files go one by one, and the directory with them.
    for directory, _, names in tf.io.gfile.walk(path):
      for name in names:
        tf.io.gfile.remove(os.path.join(directory, name))


def _below(path: str, root: str) -> str:
  """`path` relative to `root` ('' for root itself), by its name alone: os.path.relpath
  and normpath would fold 'gs://bucket' into the local path 'gs:/bucket'."""
  path, root = path.rstrip('/'), root.rstrip('/')
  if path != root and not path.startswith(root + '/'):
    raise ValueError(f'{path!r} is not below {root!r}.')
  return path[len(root):].lstrip('/')


def join(directory: str, relative: str) -> str:
  """`directory`/`relative`, unnormalized ('' -> `directory`): fine on any filesystem."""
  return os.path.join(directory, relative) if relative else directory


def copy_tree(source: str, target: str) -> None:
  """Copies the directory `source` into `target` (made if missing), file by file,
  `saved_model.pb` files last."""
  files: List[str] = []
  for directory, _, names in tf.io.gfile.walk(source):
    relative = _below(directory, source)
    tf.io.gfile.makedirs(join(target, relative))
    files += [join(relative, name) for name in names]
  for name in sorted(files, key=lambda n: os.path.basename(n) == SAVED_MODEL_PB):
    tf.io.gfile.copy(join(source, name), join(target, name), overwrite=True)


def move_into_place(source: str, target: str) -> None:
  """Puts the directory `source` at `target` (absent): one rename locally, a copy
  (`saved_model.pb` last) then a delete elsewhere."""
  if is_local(source):
    os.rename(source, target)
    return
  copy_tree(source, target)
  remove_tree(source)


def read_json(path: str) -> Optional[Any]:
  """The JSON at `path`, or None where it is missing or unreadable."""
  try:
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  except (tf.errors.OpError, OSError, ValueError):
    return None


def write_text(path: str, text: str) -> None:
  """Writes `text` to `path` through a temporary file and a rename: a reader finds the
  old file or the new one."""
  tmp = f'{path}.tmp-{uuid.uuid4().hex[:8]}'
  with tf.io.gfile.GFile(tmp, 'w') as f:
    f.write(text)
  tf.io.gfile.rename(tmp, path, overwrite=True)


def write_json(path: str, value: Any) -> None:
  """Writes `value` to `path` as JSON, as `write_text` writes."""
  write_text(path, json.dumps(value))

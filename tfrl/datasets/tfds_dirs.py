"""Which RLDS version directory a `dataset_dir` names, in TFDS's own layouts.

TFDS keeps a dataset as `<data_dir>/<name>/<version>/` (with a config,
`<data_dir>/<name>/<config>/<version>/`), each version directory holding
dataset_info.json. A `dataset_dir` may name a version directory itself, a dataset-name
(or config) directory, whose newest version is read, or a data_dir holding one dataset;
`<directory>:<version>` (as in `tfds.load('name:1.0.0')`) reads that version.

Nothing here imports TFDS; a directory that names no version raises LookupError, which
`rlds` reports as its DatasetError.
"""
import os
import re
from typing import List, Optional, Tuple

import tensorflow as tf

INFO_FILE = 'dataset_info.json'
_VERSION = re.compile(r'^(\d+)\.(\d+)\.(\d+)$')
# data_dir -> name -> config: the deepest a version directory sits below a dataset_dir.
_MAX_DEPTH = 3


def split_version(dataset_dir: str) -> Tuple[str, Optional[str]]:
  """('<directory>', '<version>') of '<directory>:<version>'; (dataset_dir, None) else.

  Only a suffix shaped like a version counts, so 'gs://bucket/data' stays whole.
  """
  head, sep, tail = dataset_dir.rpartition(':')
  if sep and _VERSION.match(tail):
    return head, tail
  return dataset_dir, None


def _version_key(version: str) -> Tuple[int, ...]:
  return tuple(int(part) for part in _VERSION.match(version).groups())


def _subdirectories(directory: str) -> List[str]:
  return sorted(name.rstrip('/') for name in tf.io.gfile.listdir(directory)
                if tf.io.gfile.isdir(os.path.join(directory, name)))


def _versions(directory: str) -> List[str]:
  """The version subdirectories of `directory` that hold a dataset, oldest first."""
  found = [name for name in _subdirectories(directory) if _VERSION.match(name) and
           tf.io.gfile.exists(os.path.join(directory, name, INFO_FILE))]
  return sorted(found, key=_version_key)


def version_directory(dataset_dir: str) -> str:
  """The version directory (the one with dataset_info.json) `dataset_dir` names.

  Args:
    dataset_dir: a version directory; a dataset-name, config or data_dir directory
      (the newest version below it, going down through directories that hold a single
      subdirectory); or either with ':<version>' appended.

  Returns:
    The version directory's path.

  Raises:
    LookupError: nothing there, no version directory below it, several datasets
      below it, or not the version asked for (the versions found are named).
  """
  directory, wanted = split_version(dataset_dir)
  if wanted is None and tf.io.gfile.exists(os.path.join(directory, INFO_FILE)):
    return directory
  if not tf.io.gfile.isdir(directory):
    raise LookupError(f'No RLDS dataset at {dataset_dir} (no {INFO_FILE}).')
  current = directory
  for _ in range(_MAX_DEPTH):
    versions = _versions(current)
    if versions:
      return _pick(current, versions, wanted, dataset_dir)
    children = _subdirectories(current)
    if len(children) != 1:
      several = f': it holds {", ".join(children)}; name one' if children else ''
      raise LookupError(f'No RLDS dataset at {dataset_dir} (no {INFO_FILE}, nor a TFDS '
                        f'version directory below it{several}).')
    current = os.path.join(current, children[0])
  raise LookupError(f'No RLDS dataset at {dataset_dir} (no {INFO_FILE}).')


def _pick(directory: str, versions: List[str], wanted: Optional[str], asked: str) -> str:
  if wanted is None:
    return os.path.join(directory, versions[-1])
  if wanted not in versions:
    raise LookupError(f'The TFDS dataset at {asked} has no version {wanted} (it has '
                      f'{", ".join(versions)}).')
  return os.path.join(directory, wanted)

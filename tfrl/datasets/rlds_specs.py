"""What an RLDS dataset of tfrl's holds, as TensorFlow specs: the TFDS features a job's
specs are written as, a spec nest described on one line, and the check that refuses a
dataset whose observations or actions are not a job's (`tfrl.datasets.rlds` writes and
reads the datasets; it offers these names too)."""
from typing import Any, Dict

import numpy as np
import tensorflow as tf

EXTRA = 'offline'
# uint8 arrays of at least this many elements (frames) are zlib-compressed on disk.
_COMPRESS_MIN_SIZE = 1024


class DatasetError(ValueError):
  """A dataset a job cannot train from (the message names the dataset and why)."""


class DatasetSpecError(DatasetError):
  """A dataset whose observations or actions differ from what the job expects."""


def import_tfds():
  """tensorflow_datasets, or an ImportError naming the extra that installs it."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f"RLDS datasets need tfrl's {EXTRA!r} extra: pip install "
                      f"'tfrl[{EXTRA}]' (in a clone: .venv/bin/pip install -e "
                      f'".[{EXTRA}]"); {e}') from e
  return tfds


def feature(spec: tf.TensorSpec):
  """The TFDS tensor feature an array of `spec` is written as (large uint8 arrays, i.e.
  frames, zlib-compressed)."""
  tfds = import_tfds()
  dtype = spec.dtype.as_numpy_dtype
  compress = (spec.dtype == tf.uint8 and
              int(np.prod(spec.shape.as_list())) >= _COMPRESS_MIN_SIZE)
  return tfds.features.Tensor(
      shape=tuple(spec.shape.as_list()), dtype=dtype,
      encoding=tfds.features.Encoding.ZLIB if compress else tfds.features.Encoding.NONE)


def features(spec_nest: Any):
  """A TFDS feature (or a dict of them, for a Dict observation) for a spec nest."""
  if isinstance(spec_nest, dict):
    return {key: features(value) for key, value in spec_nest.items()}
  if isinstance(spec_nest, (list, tuple)):
    raise DatasetSpecError(f'RLDS datasets hold arrays or dicts of arrays, not '
                           f'{type(spec_nest).__name__} observations or actions.')
  return feature(spec_nest)


def plain(spec_nest: Any) -> Any:
  """`spec_nest` as plain TensorSpecs (bounds dropped): what a dataset can record."""
  return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape, s.dtype), spec_nest)


def describe(spec_nest: Any) -> str:
  """A spec nest as one readable line: `{'image': uint8[84, 84, 4], ...}` or `float32[4]`."""
  if isinstance(spec_nest, dict):
    return '{' + ', '.join(f'{k!r}: {describe(v)}' for k, v in sorted(spec_nest.items())) + '}'
  return f'{spec_nest.dtype.name}{spec_nest.shape.as_list()}'


def check_specs(dataset_specs: Dict[str, Any], observation_spec: Any, action_spec: Any,
                where: str, expected_from: str = "the job's env") -> None:
  """Refuses a dataset whose observation or action specs differ from the job's.

  Args:
    dataset_specs: the dataset's {'observation', 'action'} specs (`EpisodeArrays.specs`).
    observation_spec, action_spec: what it must hold.
    where: the dataset, for the message.
    expected_from: whose specs the expected ones are, for the message.

  Raises:
    DatasetSpecError: naming both specs.
  """
  for name, expected in (('observation', observation_spec), ('action', action_spec)):
    got, want = dataset_specs[name], plain(expected)
    same = same_structure(got, want) and all(
        a.shape == b.shape and a.dtype == b.dtype
        for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(want)))
    if not same:
      raise DatasetSpecError(
          f'The dataset at {where} has {name}s {describe(got)}, but {expected_from} has '
          f'{describe(want)}: record the dataset with this env (or these env options).')


def same_structure(a: Any, b: Any) -> bool:
  """Whether two nests have one structure (`tf.nest.assert_same_structure` passes)."""
  try:
    tf.nest.assert_same_structure(a, b)
  except (ValueError, TypeError):
    return False
  return True

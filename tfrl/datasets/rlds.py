"""Episodes as RLDS datasets (TFDS files): recorded from any actor, read back as arrays.

RLDS (the format envlogger writes and tf-agents / Acme read) stores an episode as a
list of steps. Step i holds the observation o_i, the action a_i taken there, the reward
and discount that followed it, and `is_first` / `is_last` / `is_terminal`. The last step
(`is_last`) holds the final observation with a zero action, reward and discount;
`is_terminal` tells an episode that terminated (no bootstrap) from one that was cut
short (truncated: it bootstraps). Observations keep their dtype (uint8 frames stay
uint8, zlib-compressed on disk).

A tf-agents `TimeStep` is the same stream one field over: time step i carries the reward
and discount that *arrived* with o_i. `EpisodeArrays.time_steps` does that conversion;
`RldsRecorder` the reverse, as a writer an `Actor` or `Evaluator` hands its batched
steps to.

TFDS comes with tfrl's 'offline' extra (`pip install 'tfrl[offline]'`), imported here
only when a dataset is written or read.
"""
import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from tfrl.datasets import rlds_specs
from tfrl.datasets import tfds_dirs
# The errors, the extra and the spec check, where users of this module find them.
from tfrl.datasets.rlds_specs import (  # pylint: disable=unused-import
    EXTRA, DatasetError, DatasetSpecError, check_specs, describe, import_tfds)

# The dataset name inside a directory (TFDS names its files after it).
DATASET_NAME = 'tfrl_episodes'
_FIRST, _MID, _LAST = (int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST))


def _row(nest: Any, env: int) -> Any:
  return tf.nest.map_structure(lambda x: np.asarray(x)[env], nest)


def _rlds_step(observation: Any, env: int, action: Any, reward, discount, is_first: bool
               ) -> dict:
  """One RLDS step: env `env`'s observation, the action taken there and what followed."""
  return {'observation': _row(observation, env), 'action': action,
          'reward': np.float32(reward), 'discount': np.float32(discount),
          'is_first': bool(is_first), 'is_last': False, 'is_terminal': False}


class RldsRecorder:
  """Writes whole episodes of a batched actor to an RLDS dataset directory.

  A writer as `tfrl.actors.Actor` takes them (`write(time_step, policy_step,
  next_time_step, policy_version, policy_state)`): per env, steps are gathered from an
  episode's FIRST time step and the episode is written when it ends, so an episode
  already under way when recording starts, or cut off by `reset`/`close`, is dropped.
  """

  def __init__(self, directory: str, time_step_spec: ts.TimeStep, action_spec: Any,
               metadata: Optional[Dict[str, Any]] = None, max_episodes: Optional[int] = None,
               episodes_per_file: int = 1000):
    """Args:
      directory: where the dataset goes; it must not hold files yet.
      time_step_spec, action_spec: the env's (observation, reward and action dtypes).
      metadata: JSON-serializable facts kept beside the data (`read_metadata`): the
        env, the policy, its train step.
      max_episodes: stop writing after this many episodes (None: every one).
      episodes_per_file: episodes per TFRecord shard.

    Raises:
      FileExistsError: `directory` already holds files.
      ImportError: the 'offline' extra is not installed.
    """
    tfds = import_tfds()
    if tf.io.gfile.exists(directory) and tf.io.gfile.listdir(directory):
      raise FileExistsError(f'{directory} already holds files: record each dataset into '
                            'a new directory.')
    tf.io.gfile.makedirs(directory)
    self.directory = directory
    self.max_episodes = max_episodes
    self.episodes = 0
    self.steps = 0
    config = tfds.rlds.rlds_base.DatasetConfig(
        name=DATASET_NAME,
        observation_info=rlds_specs.features(rlds_specs.plain(time_step_spec.observation)),
        action_info=rlds_specs.features(rlds_specs.plain(action_spec)),
        reward_info=rlds_specs.feature(rlds_specs.plain(time_step_spec.reward)),
        discount_info=rlds_specs.feature(rlds_specs.plain(time_step_spec.discount)))
    identity = tfds.core.DatasetIdentity(name=DATASET_NAME,
                                         version=tfds.core.Version('1.0.0'),
                                         data_dir=directory, module_name='')
    info = tfds.rlds.rlds_base.build_info(config, identity,
                                          ds_metadata={'tfrl': dict(metadata or {})})
    info.set_file_format('tfrecord')
    self._writer = tfds.core.SequentialWriter(info, episodes_per_file, overwrite=False)
    self._writer.initialize_splits(['train'], fail_if_exists=True)
    self._observation_spec = rlds_specs.plain(time_step_spec.observation)
    self._action_spec = rlds_specs.plain(action_spec)
    self._zero_action = tf.nest.map_structure(
        lambda s: np.zeros(s.shape, s.dtype.as_numpy_dtype), action_spec)
    self._open: Dict[int, List[dict]] = {}
    self._quota: Optional[np.ndarray] = None  # per env, episodes still to keep
    self.returns: List[float] = []  # each written episode's return, in order

  def set_quota(self, episodes_per_env: Sequence[int]) -> None:
    """From now on keeps only each env's next `episodes_per_env[i]` episodes (what an
    `Evaluator` counts); the rest are dropped."""
    self._quota = np.array(episodes_per_env, dtype=np.int64)

  @property
  def full(self) -> bool:
    return self.max_episodes is not None and self.episodes >= self.max_episodes

  def write(self, time_step, policy_step, next_time_step, policy_version: int = 0,
            policy_state: Any = ()) -> None:
    """Adds one batched step; writes the episodes it ends."""
    del policy_version, policy_state
    step_types = np.asarray(time_step.step_type)
    next_types = np.asarray(next_time_step.step_type)
    for env in range(step_types.shape[0]):
      if step_types[env] == _FIRST:
        self._open[env] = []
      steps = self._open.get(env)
      if steps is None or step_types[env] == _LAST:  # joined mid-episode, or a boundary
        continue
      steps.append(_rlds_step(time_step.observation, env, _row(policy_step.action, env),
                              next_time_step.reward[env], next_time_step.discount[env],
                              is_first=step_types[env] == _FIRST))
      if next_types[env] == _LAST:
        final = _rlds_step(next_time_step.observation, env, self._zero_action, 0.0, 0.0,
                           is_first=False)
        final.update(is_last=True, is_terminal=bool(next_time_step.discount[env] == 0))
        steps.append(final)
        del self._open[env]
        if self._quota is None or self._quota[env] > 0:
          self._add_episode(steps)
          if self._quota is not None:
            self._quota[env] -= 1

  def _add_episode(self, steps: List[dict]) -> None:
    if self.full:
      return
    self._writer.add_examples({'train': [{'steps': steps}]})
    self.episodes += 1
    self.steps += len(steps) - 1
    self.returns.append(float(sum(step['reward'] for step in steps)))

  def add_episodes(self, arrays: 'EpisodeArrays') -> None:
    """Writes every episode of `arrays` (another dataset's, as `read` returns them).

    Raises:
      DatasetSpecError: their observations or actions differ from this recorder's.
    """
    check_specs(arrays.specs, self._observation_spec, self._action_spec,
                where='the episodes to add', expected_from=f'the dataset at {self.directory}')
    starts = arrays.episode_starts()
    ends = np.append(starts[1:], arrays.num_steps)
    for start, end in zip(starts, ends):
      self._add_episode([{
          'observation': _row(arrays.observation, i), 'action': _row(arrays.action, i),
          'reward': np.float32(arrays.reward[i]), 'discount': np.float32(arrays.discount[i]),
          'is_first': bool(arrays.is_first[i]), 'is_last': bool(arrays.is_last[i]),
          'is_terminal': bool(arrays.is_terminal[i])} for i in range(start, end)])

  def reset(self) -> None:
    """Drops the episodes under way (the actor reset its envs)."""
    self._open = {}

  def flush(self) -> None:
    """Episodes are written as they end; nothing is held back."""

  def close(self) -> None:
    """Drops the episodes under way and closes the files (again: nothing to do)."""
    self._open = {}
    if self._writer is not None:
      self._writer.close_all()
      self._writer = None


def read_metadata(directory: str) -> Dict[str, Any]:
  """The `metadata` a dataset was recorded with ({} for a dataset tfrl did not write)."""
  path = os.path.join(directory, 'metadata.json')
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path) as f:
    return json.load(f).get('tfrl', {})


@dataclasses.dataclass
class EpisodeArrays:
  """A dataset's steps as arrays (every episode, in order), with its specs.

  Attributes:
    observation, action: nests of [S, ...] arrays over all S steps.
    reward, discount: [S] (what followed each step's action).
    is_first, is_last, is_terminal: [S] bools.
    specs: {'observation': spec nest, 'action': spec nest}.
  """
  observation: Any
  action: Any
  reward: np.ndarray
  discount: np.ndarray
  is_first: np.ndarray
  is_last: np.ndarray
  is_terminal: np.ndarray
  specs: Dict[str, Any]

  @property
  def num_steps(self) -> int:
    return int(self.is_first.shape[0])

  @property
  def num_episodes(self) -> int:
    return int(np.sum(self.is_first))

  @property
  def num_transitions(self) -> int:
    """Steps with an action that counts: all but each episode's final observation."""
    return self.num_steps - int(np.sum(self.is_last))

  def episode_starts(self) -> np.ndarray:
    return np.flatnonzero(self.is_first)

  def episode_returns(self) -> np.ndarray:
    """Each episode's undiscounted return."""
    episode = np.cumsum(self.is_first) - 1
    return np.bincount(episode, weights=np.where(self.is_last, 0.0, self.reward),
                       minlength=self.num_episodes)

  def time_steps(self, indices: np.ndarray) -> ts.TimeStep:
    """The tf-agents time steps at step `indices` (any shape): the reward and discount
    that arrived with each observation (a terminal final step's discount is 0)."""
    previous = np.maximum(indices - 1, 0)
    first, last = self.is_first[indices], self.is_last[indices]
    step_type = np.where(first, _FIRST, np.where(last, _LAST, _MID)).astype(np.int32)
    reward = np.where(first, 0.0, self.reward[previous]).astype(np.float32)
    discount = np.where(first, 1.0, np.where(last & self.is_terminal[indices], 0.0,
                                             self.discount[previous])).astype(np.float32)
    observation = tf.nest.map_structure(lambda x: x[indices], self.observation)
    return ts.TimeStep(step_type, reward, discount, observation)

  def actions(self, indices: np.ndarray) -> Any:
    return tf.nest.map_structure(lambda x: x[indices], self.action)

  def checksum(self) -> str:
    """The content checksum of these episodes (`checksum`, without reading files)."""
    digest = hashlib.sha256(b'tfrl-rlds-checksum-1')
    fields = [('observation', self.observation), ('action', self.action),
              *((name, getattr(self, name)) for name in _STEP_FIELDS)]
    for name, nest in fields:
      # Paths name each array of a Dict observation (its keys sorted), so the same arrays
      # under other keys hash differently.
      for key, array in _flatten_with_paths(nest, name):
        array = np.ascontiguousarray(array)
        digest.update(f'{key}|{array.dtype.str}|{array.shape}|'.encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:CHECKSUM_HEX_DIGITS]


# EpisodeArrays' per-step fields other than observation and action, in hashing order.
_STEP_FIELDS = ('reward', 'discount', 'is_first', 'is_last', 'is_terminal')
CHECKSUM_HEX_DIGITS = 16


def _flatten_with_paths(nest: Any, prefix: str) -> List[Any]:
  if isinstance(nest, dict) or hasattr(nest, 'items'):
    return [pair for key in sorted(nest) for pair in _flatten_with_paths(
        nest[key], f'{prefix}/{key}')]
  return [(prefix, np.asarray(nest))]


def checksum(directory: str) -> str:
  """A checksum of a dataset's content: equal for equal episodes, whatever the files.

  It hashes (SHA-256) every step's observation, action, reward, discount and
  `is_first` / `is_last` / `is_terminal`, in episode order, each array with its dtype
  and shape (a Dict observation's arrays by key), as `read` returns them. TFDS's
  metadata (dataset_info.json, `read_metadata`'s facts, shard names and file bytes) is
  not hashed: two writes of the same episodes have the same checksum, and one changed
  reward, action or episode boundary changes it.

  Args:
    directory: the dataset, as `read` takes it (any RLDS directory).

  Returns:
    The first 16 hex digits of the SHA-256 (`EpisodeArrays.checksum`).

  Raises:
    DatasetError: as `read` (no dataset there, no episodes in it, steps outside
      episodes).
    ImportError: the 'offline' extra is not installed.
  """
  return read(directory).checksum()


def _specs_of(features) -> Dict[str, Any]:
  steps = features['steps'].feature
  def spec(feature):
    if isinstance(feature, dict) or hasattr(feature, 'items'):
      return {key: spec(value) for key, value in feature.items()}
    return tf.TensorSpec(feature.shape, tf.as_dtype(feature.np_dtype))
  return {'observation': spec(steps['observation']), 'action': spec(steps['action'])}


def dataset_specs(directory: str) -> Dict[str, Any]:
  """A dataset's {'observation', 'action'} specs, from its metadata alone.

  Raises:
    DatasetError: no dataset there.
  """
  return _specs_of(_builder(directory).info.features)


def _builder(directory: str):
  """The TFDS builder of the dataset `directory` names (`tfds_dirs.version_directory`:
  a version directory, a TFDS data_dir or dataset-name directory, optionally with
  ':<version>'); DatasetError where there is none."""
  tfds = import_tfds()
  try:
    version_dir = tfds_dirs.version_directory(directory)
  except LookupError as e:
    raise DatasetError(str(e)) from None
  return tfds.builder_from_directory(version_dir)


def read(directory: str, max_steps: Optional[int] = None) -> EpisodeArrays:
  """Reads an RLDS dataset (tfrl's or any TFDS RLDS directory) into arrays.

  Args:
    directory: the dataset's directory (the one with dataset_info.json), or a TFDS
      data_dir or dataset-name directory (its newest version), optionally with
      ':<version>' appended (that version).
    max_steps: stop after the episode that reaches this many steps (None: all).

  Raises:
    DatasetError: no dataset there, no episodes in it, or steps outside episodes.
  """
  builder = _builder(directory)
  split = builder.info.splits['train'] if 'train' in builder.info.splits else None
  if split is None or not split.num_examples:  # TFDS's own error names no directory
    raise DatasetError(f'The RLDS dataset at {directory} holds no episodes (its recording '
                       'ended before any episode did).')
  specs = _specs_of(builder.info.features)
  steps = builder.as_dataset(split='train').flat_map(lambda episode: episode['steps'])
  chunks: List[Dict[str, Any]] = []
  total = 0
  for chunk in steps.batch(4096).as_numpy_iterator():
    chunks.append(chunk)
    total += chunk['is_first'].shape[0]
    if max_steps is not None and total >= max_steps:
      break
  if not chunks:
    raise DatasetError(f'The RLDS dataset at {directory} holds no episodes.')
  joined = tf.nest.map_structure(lambda *xs: np.concatenate(xs), *chunks)
  arrays = EpisodeArrays(
      observation=joined['observation'], action=joined['action'],
      reward=joined['reward'].astype(np.float32),
      discount=joined['discount'].astype(np.float32), is_first=joined['is_first'],
      is_last=joined['is_last'], is_terminal=joined['is_terminal'], specs=specs)
  return _whole_episodes(arrays, directory)


def _whole_episodes(arrays: EpisodeArrays, directory: str) -> EpisodeArrays:
  """Cuts a partial last episode off (a `max_steps` read) and checks the episodes'
  shape: each starts with is_first and ends with is_last."""
  ends = np.flatnonzero(arrays.is_last)
  if not ends.size:
    raise DatasetError(f'The RLDS dataset at {directory} has no step with is_last: tfrl '
                     'reads episodes whose last step holds the final observation.')
  keep = ends[-1] + 1
  cut = lambda x: x[:keep]
  arrays = EpisodeArrays(
      tf.nest.map_structure(cut, arrays.observation), tf.nest.map_structure(
          cut, arrays.action), *(cut(getattr(arrays, f)) for f in (
              'reward', 'discount', 'is_first', 'is_last', 'is_terminal')), arrays.specs)
  starts = arrays.episode_starts()
  if starts.size != ends.size or starts[0] != 0 or np.any(starts[1:] != ends[:-1] + 1):
    raise DatasetError(f'The RLDS dataset at {directory} has steps outside episodes '
                     '(each episode must run from an is_first step to an is_last one).')
  return arrays


def merge(directories: Sequence[str], directory: str, metadata: Optional[Dict[str, Any]]
          = None) -> RldsRecorder:
  """Writes the episodes of several datasets, in the order given, into one new dataset
  (a mixed dataset: several policies' episodes of the same env).

  Args:
    directories: the datasets to read (`read`); all with the same specs.
    directory: the new dataset's directory (it must not hold files yet).
    metadata: facts kept beside the data; each source's metadata is added under
      'merged_from'.

  Returns:
    The closed recorder: its `episodes`, `steps` and `returns` say what was written.

  Raises:
    DatasetSpecError: a dataset's observations or actions differ from the first one's
      (both named).
    DatasetError, FileExistsError: as `read` and `RldsRecorder`.
  """
  if not directories:
    raise DatasetError('rlds.merge needs at least one dataset to read.')
  first = dataset_specs(directories[0])
  for source in directories[1:]:  # all checked before anything is written
    check_specs(dataset_specs(source), first['observation'], first['action'], where=source,
                expected_from=f'the first dataset ({directories[0]})')
  reward = tf.TensorSpec((), tf.float32)
  time_step_spec = ts.TimeStep(tf.TensorSpec((), tf.int32), reward, reward,
                               first['observation'])
  sources = [{'directory': d, 'metadata': read_metadata(d)} for d in directories]
  recorder = RldsRecorder(directory, time_step_spec, first['action'],
                          metadata={**(metadata or {}), 'merged_from': sources})
  try:
    for source in directories:
      recorder.add_episodes(read(source))
  finally:
    recorder.close()
  return recorder

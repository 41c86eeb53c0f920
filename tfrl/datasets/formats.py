"""Offline datasets in other formats, read as tfrl's episodes (`rlds.EpisodeArrays`).

`read(dataset_dir)` takes what `Experiment.dataset_dir` may name:

- an RLDS dataset: a TFDS version directory, or a TFDS data_dir or dataset-name
  directory, optionally with ':<version>' (`tfds_dirs`);
- a D4RL HDF5 file: flat arrays `observations`, `actions`, `rewards`, `terminals`,
  `timeouts` and optionally `next_observations`, an episode ending where `terminals`
  or `timeouts` is true;
- a Minari dataset directory: `data/main_data.hdf5` with one group `episode_<i>` per
  episode (`observations`, one row more than its `actions`, `rewards`, `terminations`,
  `truncations`) beside `data/metadata.json`.

`fit` then checks (or casts) them against the job's specs and `convert` writes any of
them as tfrl's own RLDS. HDF5 is read with h5py, which TensorFlow itself installs.
"""
import json
import os
import re
from typing import Any, Dict, List, Optional

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from tfrl.datasets import rlds
from tfrl.datasets import rlds_specs

MINARI_DATA = os.path.join('data', 'main_data.hdf5')
MINARI_METADATA = os.path.join('data', 'metadata.json')
_HDF5_SUFFIXES = ('.hdf5', '.h5')
_EPISODE = re.compile(r'^episode_(\d+)$')
# How a job asks for dtypes to be cast (`fit`'s message names it).
CAST_SETTING = 'TransitionReplay.cast_dataset_dtypes = True'


def _h5py():
  import h5py  # pylint: disable=g-import-not-at-top (only for HDF5 datasets)
  return h5py


def kind(dataset_dir: str) -> str:
  """'d4rl', 'minari' or 'rlds': the format `read` takes `dataset_dir` to be in."""
  if dataset_dir.endswith(_HDF5_SUFFIXES):
    return 'd4rl'
  if tf.io.gfile.exists(os.path.join(dataset_dir, MINARI_DATA)):
    return 'minari'
  return 'rlds'


def read(dataset_dir: str) -> rlds.EpisodeArrays:
  """Reads a dataset in any format `kind` tells apart into arrays.

  Args:
    dataset_dir: an RLDS directory (see `rlds.read`), a D4RL .hdf5 file or a Minari
      dataset directory.

  Returns:
    Its episodes, their observations and actions in the dtypes stored.

  Raises:
    DatasetError: no dataset there, a field missing, or no whole episode.
  """
  which = kind(dataset_dir)
  if which == 'rlds':
    return rlds.read(dataset_dir)
  if not tf.io.gfile.exists(dataset_dir):
    raise rlds.DatasetError(f'No dataset at {dataset_dir} (no such file).')
  with _h5py().File(dataset_dir if which == 'd4rl' else
                    os.path.join(dataset_dir, MINARI_DATA), 'r') as f:
    episodes = _d4rl_episodes(f, dataset_dir) if which == 'd4rl' else _minari_episodes(
        f, dataset_dir)
  if not episodes:
    raise rlds.DatasetError(f'The dataset at {dataset_dir} holds no episodes.')
  return _join(episodes)


def minari_metadata(dataset_dir: str) -> Dict[str, Any]:
  """A Minari dataset's data/metadata.json ({} where there is none)."""
  path = os.path.join(dataset_dir, MINARI_METADATA)
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def _field(group, name: str, where: str) -> Any:
  """A dataset (or, for Dict observations, a group: a dict of arrays) of `group`."""
  if name not in group:
    raise rlds.DatasetError(f'The dataset at {where} has no {name!r} field (it has '
                            f'{", ".join(sorted(group.keys()))}).')
  item = group[name]
  if hasattr(item, 'keys'):
    return {key: _field(item, key, where) for key in item.keys()}
  return np.asarray(item[()])


def _episode(observations: Any, final_observation: Any, actions: Any, rewards, terminal:
             bool) -> Dict[str, Any]:
  """One episode in RLDS's layout: a step per action, then the final observation with a
  zero action (`rlds` module docstring)."""
  n = len(rewards)
  final = tf.nest.map_structure(lambda x: np.asarray(x)[None], final_observation)
  zero = tf.nest.map_structure(lambda a: np.zeros_like(a[:1]), actions)
  is_last = np.zeros(n + 1, bool)
  is_last[-1] = True
  discount = np.ones(n + 1, np.float32)
  discount[-1] = 0.0
  if terminal and n:
    discount[n - 1] = 0.0
  return dict(
      observation=tf.nest.map_structure(lambda o, f: np.concatenate([o, f]),
                                        observations, final),
      action=tf.nest.map_structure(lambda a, z: np.concatenate([a, z]), actions, zero),
      reward=np.append(np.asarray(rewards, np.float32), np.float32(0)),
      discount=discount, is_first=np.arange(n + 1) == 0, is_last=is_last,
      is_terminal=is_last & bool(terminal))


def _d4rl_episodes(f, where: str) -> List[Dict[str, Any]]:
  """D4RL's flat arrays cut into episodes where `terminals` or `timeouts` is true (a
  last run of rows with neither is an episode cut short).

  Without `next_observations` an episode's final observation is not stored: a
  terminated episode's final step then repeats its last observation (its discount is
  0, so nothing is learnt from it), and a timed-out one ends at its last stored
  observation, its last action dropped, since bootstrapping needs the real one.
  """
  obs = _field(f, 'observations', where)
  actions, rewards = _field(f, 'actions', where), _field(f, 'rewards', where)
  terminals = _field(f, 'terminals', where).astype(bool)
  timeouts = (_field(f, 'timeouts', where).astype(bool) if 'timeouts' in f
              else np.zeros_like(terminals))
  next_obs = _field(f, 'next_observations', where) if 'next_observations' in f else None
  size = len(rewards)
  ends = np.flatnonzero(terminals | timeouts)
  if not ends.size or ends[-1] != size - 1:
    ends = np.append(ends, size - 1)
  episodes, start = [], 0
  for end in ends:
    rows = slice(start, end + 1)
    terminal = bool(terminals[end])
    if next_obs is not None or terminal:
      final = (next_obs if next_obs is not None else obs)[end]
      episodes.append(_episode(obs[rows], final, actions[rows], rewards[rows], terminal))
    elif end > start:
      kept = slice(start, end)
      episodes.append(_episode(obs[kept], obs[end], actions[kept], rewards[kept], False))
    start = end + 1
  return episodes


def _minari_episodes(f, where: str) -> List[Dict[str, Any]]:
  """A Minari file's episodes, in the order of their ids."""
  names = sorted((name for name in f.keys() if _EPISODE.match(name)),
                 key=lambda name: int(_EPISODE.match(name).group(1)))
  episodes = []
  for name in names:
    group, at = f[name], f'{where} ({name})'
    obs, actions = _field(group, 'observations', at), _field(group, 'actions', at)
    rewards = _field(group, 'rewards', at)
    terminations = _field(group, 'terminations', at).astype(bool)
    steps = len(rewards)
    if len(tf.nest.flatten(obs)[0]) != steps + 1:
      raise rlds.DatasetError(f'The dataset at {at} has {len(tf.nest.flatten(obs)[0])} '
                              f'observations for {steps} steps (Minari stores one more).')
    if not steps:
      continue
    head = tf.nest.map_structure(lambda o: o[:-1], obs)
    episodes.append(_episode(head, tf.nest.map_structure(lambda o: o[-1], obs), actions,
                             rewards, bool(terminations[-1])))
  return episodes


def _join(episodes: List[Dict[str, Any]]) -> rlds.EpisodeArrays:
  joined = tf.nest.map_structure(lambda *xs: np.concatenate(xs), *episodes)
  spec = lambda x: tf.TensorSpec(x.shape[1:], tf.as_dtype(x.dtype))
  specs = {'observation': tf.nest.map_structure(spec, joined['observation']),
           'action': tf.nest.map_structure(spec, joined['action'])}
  return rlds.EpisodeArrays(specs=specs, **joined)


def fit(arrays: rlds.EpisodeArrays, observation_spec: Any, action_spec: Any, where: str,
        cast: bool = False) -> rlds.EpisodeArrays:
  """The dataset with the job's observation and action dtypes, checked against its specs.

  Args:
    arrays: the dataset (`read`).
    observation_spec, action_spec: the job's env's.
    where: the dataset, for messages.
    cast: cast observations and actions whose dtype differs (float64 to float32, say);
      False: refuse them.

  Returns:
    `arrays`, cast where asked.

  Raises:
    DatasetSpecError: a field of another dtype (naming the field and both dtypes)
      without `cast`, or of another structure or shape (`rlds.check_specs`).
  """
  fields = {}
  for name, expected in (('observation', observation_spec), ('action', action_spec)):
    got = arrays.specs[name]
    if not rlds_specs.same_structure(got, expected):
      break
    for path, have, want in zip(_paths(got, name), tf.nest.flatten(got),
                                tf.nest.flatten(expected)):
      if have.shape == want.shape and have.dtype != want.dtype and not cast:
        raise rlds.DatasetSpecError(
            f'The dataset at {where} has {path} of dtype {have.dtype.name}, but the '
            f"job's env has {want.dtype.name}: cast it with {CAST_SETTING}.")
    fields[name] = tf.nest.map_structure(
        lambda x, s: x if x.dtype == s.dtype.as_numpy_dtype else x.astype(
            s.dtype.as_numpy_dtype), getattr(arrays, name), expected)
  if len(fields) == 2:
    # Shapes stay the dataset's, so check_specs still refuses one that differs.
    retyped = lambda have, want: tf.TensorSpec(have.shape, want.dtype)
    specs = {'observation': tf.nest.map_structure(retyped, arrays.specs['observation'],
                                                  observation_spec),
             'action': tf.nest.map_structure(retyped, arrays.specs['action'], action_spec)}
    arrays = rlds.EpisodeArrays(
        fields['observation'], fields['action'], arrays.reward, arrays.discount,
        arrays.is_first, arrays.is_last, arrays.is_terminal, specs)
  rlds.check_specs(arrays.specs, observation_spec, action_spec, where)
  return arrays


def _paths(spec_nest: Any, name: str) -> List[str]:
  """Each leaf's name for messages: 'observations', or "observations['image']"."""
  if isinstance(spec_nest, dict):
    return [f'{name}s[{key!r}]' for key in sorted(spec_nest)]
  return [f'{name}s']


def convert(source: str, directory: str, metadata: Optional[Dict[str, Any]] = None
            ) -> rlds.RldsRecorder:
  """Writes a dataset of any format `read` takes as tfrl's own RLDS dataset, which
  `rlds.read` and `tfds.builder_from_directory` read back.

  Args:
    source: the dataset (`read`).
    directory: the new dataset's directory (it must not hold files yet).
    metadata: facts kept beside the data; the source and its format are added.

  Returns:
    The closed recorder: its `episodes`, `steps` and `returns` say what was written.

  Raises:
    DatasetError, FileExistsError: as `read` and `rlds.RldsRecorder`.
  """
  arrays = read(source)
  scalar = tf.TensorSpec((), tf.float32)
  time_step_spec = ts.TimeStep(tf.TensorSpec((), tf.int32), scalar, scalar,
                               arrays.specs['observation'])
  recorder = rlds.RldsRecorder(
      directory, time_step_spec, arrays.specs['action'],
      metadata={**(metadata or {}), 'converted_from': source, 'format': kind(source)})
  try:
    recorder.add_episodes(arrays)
  finally:
    recorder.close()
  return recorder

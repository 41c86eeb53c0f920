"""Datasets in other formats: TFDS data_dirs, D4RL HDF5 files and Minari directories
read as the episodes written, checked or cast against the job's specs, converted to
tfrl's RLDS, and trained from; and D4RL's normalized score."""
import json
import os

import gymnasium
import h5py
import numpy as np
import pytest

import python_runs  # tests/python_runs.py

from tfrl import envs
from tfrl.datasets import d4rl_scores
from tfrl.datasets import feeder
from tfrl.datasets import formats
from tfrl.datasets import rlds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Short enough that random CartPole play both terminates and is truncated.
MAX_STEPS = 12


def random_episodes(num_episodes, seed=0):
  """Random CartPole episodes as Minari holds them: observations one row longer."""
  env = gymnasium.make('CartPole-v1', max_episode_steps=MAX_STEPS)
  env.action_space.seed(seed)
  episodes = []
  for i in range(num_episodes):
    obs, _ = env.reset(seed=seed + i)
    rows = dict(observations=[obs], actions=[], rewards=[], terminations=[],
                truncations=[])
    done = False
    while not done:
      action = env.action_space.sample()
      obs, reward, terminated, truncated, _ = env.step(action)
      for key, value in zip(('observations', 'actions', 'rewards', 'terminations',
                             'truncations'), (obs, action, reward, terminated, truncated)):
        rows[key].append(value)
      done = terminated or truncated
    episodes.append({key: np.array(value) for key, value in rows.items()})
  env.close()
  kinds = {bool(e['terminations'][-1]) for e in episodes}
  assert kinds == {True, False}, 'the episodes should both terminate and truncate'
  return episodes


def write_d4rl(path, episodes, next_observations=True, obs_dtype=np.float32):
  with h5py.File(path, 'w') as f:
    f['observations'] = np.concatenate([e['observations'][:-1] for e in episodes]
                                       ).astype(obs_dtype)
    if next_observations:
      f['next_observations'] = np.concatenate([e['observations'][1:] for e in episodes]
                                              ).astype(obs_dtype)
    f['actions'] = np.concatenate([e['actions'] for e in episodes])
    f['rewards'] = np.concatenate([e['rewards'] for e in episodes]).astype(np.float32)
    f['terminals'] = np.concatenate([e['terminations'] for e in episodes])
    f['timeouts'] = np.concatenate([e['truncations'] for e in episodes])
  return str(path)


def write_minari(directory, episodes, obs_dtype=np.float64):
  """Minari's layout: data/main_data.hdf5 of episode_<i> groups, data/metadata.json
  (Minari keeps float64 observations where the space says so; float64 here)."""
  os.makedirs(os.path.join(directory, 'data'))
  with h5py.File(os.path.join(directory, formats.MINARI_DATA), 'w') as f:
    for i, episode in enumerate(episodes):
      group = f.create_group(f'episode_{i}')
      group.attrs['id'] = i
      group.attrs['total_steps'] = len(episode['rewards'])
      for key, value in episode.items():
        group[key] = value.astype(obs_dtype) if key == 'observations' else value
  with open(os.path.join(directory, formats.MINARI_METADATA), 'w') as f:
    json.dump({'dataset_id': 'cartpole/random-v0', 'env_spec': 'CartPole-v1',
               'total_episodes': len(episodes)}, f)
  return str(directory)


def assert_episodes_equal(arrays, episodes):
  """Each episode read is the one written: its steps, then the final observation."""
  assert arrays.num_episodes == len(episodes)
  starts = arrays.episode_starts()
  for start, episode in zip(starts, episodes):
    n = len(episode['rewards'])
    steps = slice(start, start + n + 1)
    np.testing.assert_allclose(arrays.observation[steps], episode['observations'],
                               rtol=1e-6)
    np.testing.assert_array_equal(arrays.action[start:start + n], episode['actions'])
    np.testing.assert_allclose(arrays.reward[start:start + n], episode['rewards'])
    assert arrays.is_last[start + n] and not arrays.is_last[start:start + n].any()
    assert arrays.is_terminal[start + n] == episode['terminations'][-1]
    assert arrays.discount[start + n - 1] == (0.0 if episode['terminations'][-1] else 1.0)
  assert arrays.num_steps == sum(len(e['rewards']) + 1 for e in episodes)


@pytest.fixture(scope='module')
def episodes():
  return random_episodes(20)


def test_a_d4rl_file_reads_back_its_episodes_terminal_or_timed_out(episodes, tmp_path):
  arrays = formats.read(write_d4rl(tmp_path / 'cartpole.hdf5', episodes))
  assert_episodes_equal(arrays, episodes)
  assert arrays.specs['observation'].dtype.name == 'float32'


def test_a_d4rl_file_without_next_observations_keeps_what_it_can(episodes, tmp_path):
  """A terminated episode keeps every step; a timed-out one ends at its last stored
  observation (its last action, whose outcome is not stored, dropped)."""
  arrays = formats.read(write_d4rl(tmp_path / 'c.hdf5', episodes, next_observations=False))
  assert arrays.num_episodes == len(episodes)
  lengths = np.diff(np.append(arrays.episode_starts(), arrays.num_steps))
  for length, episode in zip(lengths, episodes):
    n = len(episode['rewards'])
    assert length == (n + 1 if episode['terminations'][-1] else n)
  terminal_returns = [e['rewards'].sum() if e['terminations'][-1] else e['rewards'][:-1].sum()
                      for e in episodes]
  np.testing.assert_allclose(arrays.episode_returns(), terminal_returns)


def test_a_minari_directory_reads_back_its_episodes(episodes, tmp_path):
  directory = write_minari(tmp_path / 'cartpole-random-v0', episodes)
  assert formats.kind(directory) == 'minari'
  assert_episodes_equal(formats.read(directory), episodes)
  assert formats.minari_metadata(directory)['env_spec'] == 'CartPole-v1'


def test_other_dtypes_are_refused_naming_the_field_unless_cast(episodes, tmp_path):
  directory = write_minari(tmp_path / 'm', episodes)
  env = envs.make('CartPole-v1', num_envs=1)
  observation_spec, action_spec = env.time_step_spec().observation, env.action_spec()
  env.close()
  arrays = formats.read(directory)
  with pytest.raises(rlds.DatasetSpecError) as refused:
    formats.fit(arrays, observation_spec, action_spec, directory)
  assert str(refused.value) == (
      f"The dataset at {directory} has observations of dtype float64, but the job's env "
      f'has float32: cast it with {formats.CAST_SETTING}.')
  cast = formats.fit(arrays, observation_spec, action_spec, directory, cast=True)
  assert cast.observation.dtype == np.float32
  assert cast.specs['observation'].dtype.name == 'float32'
  np.testing.assert_allclose(cast.observation, arrays.observation, rtol=1e-6)


def test_a_dataset_of_another_shape_is_refused_even_when_cast(episodes, tmp_path):
  path = write_d4rl(tmp_path / 'c.hdf5', episodes)
  env = envs.make('Pendulum-v1', num_envs=1)
  with pytest.raises(rlds.DatasetSpecError, match='record the dataset with this env'):
    formats.fit(formats.read(path), env.time_step_spec().observation, env.action_spec(),
                path, cast=True)
  env.close()


def test_a_missing_field_is_named(tmp_path):
  path = str(tmp_path / 'bad.hdf5')
  with h5py.File(path, 'w') as f:
    f['observations'] = np.zeros((3, 4), np.float32)
  with pytest.raises(rlds.DatasetError, match="has no 'actions' field"):
    formats.read(path)


def test_converted_datasets_read_back_as_rlds(episodes, tmp_path):
  tfds = rlds.import_tfds()
  minari_dir = write_minari(tmp_path / 'm', episodes, obs_dtype=np.float32)
  out = str(tmp_path / 'rlds')
  recorder = formats.convert(minari_dir, out)
  assert recorder.episodes == len(episodes)
  assert_episodes_equal(rlds.read(out), episodes)
  assert rlds.read_metadata(out)['format'] == 'minari'
  builder = tfds.builder_from_directory(out)
  assert builder.info.splits['train'].num_examples == len(episodes)


def test_a_tfds_data_dir_reads_the_newest_version_or_the_one_named(episodes, tmp_path):
  name_dir = tmp_path / 'data_dir' / 'cartpole_random'
  source = write_d4rl(tmp_path / 'c.hdf5', episodes)
  formats.convert(source, str(name_dir / '1.0.0'))
  few = write_d4rl(tmp_path / 'few.hdf5', episodes[:3])
  formats.convert(few, str(name_dir / '1.2.0'))
  os.makedirs(name_dir / '1.10.0.incomplete')  # TFDS's leftovers are not versions
  assert rlds.read(str(name_dir)).num_episodes == 3  # 1.2.0, the newest
  assert rlds.read(str(tmp_path / 'data_dir')).num_episodes == 3  # one dataset in it
  assert rlds.read(f'{name_dir}:1.0.0').num_episodes == len(episodes)
  with pytest.raises(rlds.DatasetError, match=r'has no version 2\.0\.0 \(it has 1\.0\.0, '
                     r'1\.2\.0\)'):
    rlds.read(f'{name_dir}:2.0.0')
  with pytest.raises(rlds.DatasetError, match='no dataset_info.json'):
    rlds.read(str(tmp_path / 'nothing'))


def _brief_behaviour_cloning(dataset_dir):
  """Bindings of a brief bc_cartpole.gin run from `dataset_dir`."""
  return [f"Experiment.dataset_dir = '{dataset_dir}'", 'Experiment.num_train_steps = 50',
          'Experiment.train_steps_per_iteration = 50', 'Experiment.eval_interval = 50',
          'Experiment.num_eval_episodes = 1', 'Experiment.batch_size = 32']


@pytest.mark.integration
def test_behaviour_cloning_trains_from_a_minari_dataset_with_cast(episodes, tmp_path):
  """bc_cartpole.gin on a float64 Minari dataset: refused, then trained with the cast
  setting, loading every transition and collecting nothing."""
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  brief = _brief_behaviour_cloning(write_minari(tmp_path / 'm', episodes))
  with pytest.raises(rlds.DatasetSpecError, match='observations of dtype float64'):
    train_eval.run(str(tmp_path / 'refused'), ['bc_cartpole.gin'], brief)
  result = train_eval.run(str(tmp_path / 'bc'), ['bc_cartpole.gin'],
                          brief + ['TransitionReplay.cast_dataset_dtypes = True'])
  assert result['env_steps'] == 0, result['history']


@pytest.mark.integration
@pytest.mark.parametrize('source', ['d4rl file', 'tfds data_dir'])
def test_behaviour_cloning_trains_from_a_d4rl_file_and_a_tfds_data_dir(episodes, tmp_path,
                                                                       source):
  """The same brief run with `Experiment.dataset_dir` naming a D4RL HDF5 file, or a TFDS
  data_dir whose newest version it picks: it trains its 50 steps on the data alone."""
  from learners import train_eval  # pylint: disable=g-import-not-at-top (defines flags)
  dataset = write_d4rl(tmp_path / 'c.hdf5', episodes)
  if source == 'tfds data_dir':
    formats.convert(dataset, str(tmp_path / 'data_dir' / 'cartpole_random' / '1.0.0'))
    dataset = str(tmp_path / 'data_dir')
  result = train_eval.run(str(tmp_path / 'bc'), ['bc_cartpole.gin'],
                          _brief_behaviour_cloning(dataset))
  assert result['env_steps'] == 0, result['history']
  assert result['train_step'] == 50, result


def test_d4rl_normalized_score_uses_its_reference_returns():
  assert d4rl_scores.normalized_score('HalfCheetah-v5', -280.178953) == 0.0
  assert d4rl_scores.normalized_score('halfcheetah-medium-v2', 12135.0) == 100.0
  assert d4rl_scores.normalized_score('HalfCheetah-v5', 5927.4) == pytest.approx(50.0,
                                                                                 abs=0.01)
  assert not d4rl_scores.has_reference('LunarLander-v3')
  with pytest.raises(KeyError, match='LunarLander'):
    d4rl_scores.normalized_score('LunarLander-v3', 200.0)


@pytest.mark.integration
def test_the_converter_program_writes_rlds_and_refuses_in_one_line(episodes, tmp_path):
  source = write_d4rl(tmp_path / 'c.hdf5', episodes)
  out = str(tmp_path / 'rlds')
  command = ['-m', 'learners.convert_dataset', f'--source={source}', f'--out={out}']
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = python_runs.run(command, timeout=300, env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  assert_episodes_equal(rlds.read(out), episodes)
  again = python_runs.run(command, timeout=300, env=env)
  assert again.returncode == 2 and 'error: --out: ' in again.stderr, again.stderr[-2000:]


def test_a_d4rl_files_unfinished_last_rows_are_an_episode_cut_short(episodes, tmp_path):
  """Rows after the last terminal or timeout (a recording stopped mid-episode) make one
  more episode, truncated: it bootstraps from its stored next observation."""
  path = write_d4rl(tmp_path / 'c.hdf5', episodes)
  with h5py.File(path, 'a') as f:
    last = len(episodes[-1]['rewards'])
    for key in ('terminals', 'timeouts'):
      flags = f[key][()]
      flags[-last:] = False
      f[key][...] = flags
  arrays = formats.read(path)
  assert arrays.num_episodes == len(episodes)
  assert not arrays.is_terminal[-1] and arrays.discount[-2] == 1.0
  np.testing.assert_allclose(arrays.observation[-1], episodes[-1]['observations'][-1])

"""benchmarks/d3rlpy_data.py: an RLDS dataset as d3rlpy's step arrays, checked against
a model of how d3rlpy cuts them into episodes and transitions (its EpisodeGenerator and
BasicTransitionPicker, d3rlpy 2.8)."""
import numpy as np
import pytest

import d3rlpy_data  # benchmarks/d3rlpy_data.py (tests/benchmarks/conftest.py)
from tfrl.datasets import rlds


def episodes(lengths_and_ends, action_dims=2, seed=0):
  """EpisodeArrays of episodes with `length` actions each, ending 'terminal' or
  'truncated', as rlds.read returns them (a final-observation step closes each)."""
  rng = np.random.default_rng(seed)
  steps = sum(length + 1 for length, _ in lengths_and_ends)
  is_first, is_last, is_terminal = (np.zeros(steps, bool) for _ in range(3))
  action = rng.normal(size=(steps, action_dims)).astype(np.float32)
  reward = rng.normal(size=steps).astype(np.float32)
  start = 0
  for length, end in lengths_and_ends:
    is_first[start] = True
    last = start + length
    is_last[last], is_terminal[last] = True, end == 'terminal'
    action[last], reward[last] = 0.0, 0.0
    start = last + 1
  discount = np.where(is_last, 0.0, 1.0).astype(np.float32)
  return rlds.EpisodeArrays(rng.normal(size=(steps, 3)).astype(np.float32), action, reward,
                            discount, is_first, is_last, is_terminal, specs={})


def rlds_transitions(arrays):
  """(s, a, r, s', terminal) of every step with an action, as tfrl's replay makes them."""
  out = []
  for i in np.flatnonzero(~arrays.is_last):
    terminal = bool(arrays.is_last[i + 1] and arrays.is_terminal[i + 1])
    out.append((arrays.observation[i], arrays.action[i], arrays.reward[i],
                None if terminal else arrays.observation[i + 1], terminal))
  return out


def d3rlpy_transitions(data):
  """What d3rlpy makes of the arrays: episodes end at a terminal or timeout step; a
  terminated episode has a transition from every step (the last to no observation), a
  timed-out one from every step but its last."""
  out, start = [], 0
  for end in np.flatnonzero(np.logical_or(data['terminals'], data['timeouts'])):
    terminated = bool(data['terminals'][end])
    for i in range(start, end + 1 if terminated else end):
      terminal = terminated and i == end
      out.append((data['observations'][i], data['actions'][i], data['rewards'][i],
                  None if terminal else data['observations'][i + 1], terminal))
    start = end + 1
  return out


def assert_same_transitions(got, want):
  assert len(got) == len(want)
  for g, w in zip(got, want):
    for a, b in zip(g, w):
      if a is None or b is None:
        assert a is None and b is None
      else:
        np.testing.assert_array_equal(a, b)


def test_hand_made_episodes_convert_as_written_out():
  arrays = episodes([(2, 'terminal'), (2, 'truncated')])
  data = d3rlpy_data.d3rlpy_arrays(arrays)
  np.testing.assert_array_equal(data['observations'], arrays.observation[[0, 1, 3, 4, 5]])
  np.testing.assert_array_equal(data['actions'], arrays.action[[0, 1, 3, 4, 5]])
  np.testing.assert_array_equal(data['rewards'], arrays.reward[[0, 1, 3, 4, 5]])
  np.testing.assert_array_equal(data['terminals'], [0, 1, 0, 0, 0])
  np.testing.assert_array_equal(data['timeouts'], [0, 0, 0, 0, 1])


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_d3rlpy_makes_exactly_the_datasets_transitions(seed):
  rng = np.random.default_rng(seed)
  ends = [(int(rng.integers(1, 6)), rng.choice(['terminal', 'truncated']))
          for _ in range(12)]
  arrays = episodes(ends, seed=seed)
  data = d3rlpy_data.d3rlpy_arrays(arrays)
  assert len(d3rlpy_transitions(data)) == arrays.num_transitions
  assert_same_transitions(d3rlpy_transitions(data), rlds_transitions(arrays))


def test_discrete_actions_stay_integers():
  arrays = episodes([(3, 'terminal')])
  arrays.action = np.array([2, 0, 1, 0], np.int64)
  assert d3rlpy_data.d3rlpy_arrays(arrays)['actions'].dtype == np.int64


def test_dict_observations_are_refused_by_name():
  arrays = episodes([(1, 'truncated')])
  arrays.observation = {'image': arrays.observation}
  with pytest.raises(ValueError, match='not dicts'):
    d3rlpy_data.d3rlpy_arrays(arrays)

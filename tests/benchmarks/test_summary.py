"""benchmarks/summary.py: solve_time's per-task table of central values with intervals,
on hand-made runs."""
import json
import math
import re
import types

import pytest

import stats  # benchmarks/stats.py (tests/benchmarks/conftest.py)
import summary  # benchmarks/summary.py
import tasks  # benchmarks/tasks.py

SETTINGS = summary.Settings(statistic='median', resamples=2000)


PROTOCOL = tasks.Protocol(eval_every_env_steps=2_000, eval_episodes=10,
                          confirm_episodes=100).as_dict()


def _run(seed, solved=True, env_steps=None, seconds=None, eval_return=None, curve=(),
         side='tfrl', protocol=PROTOCOL):
  extra = {'curve': [list(p) for p in curve]}
  if protocol is not None:
    extra['protocol'] = dict(protocol)
  return types.SimpleNamespace(seed=seed, solved=solved, env_steps=env_steps,
                               seconds=seconds, eval_return=eval_return, side=side,
                               extra=extra)


def _task(threshold=None, env_step_budgets=(), frames_per_step=1):
  return types.SimpleNamespace(env='Env-v0', config='cfg', threshold=threshold,
                               env_step_budgets=env_step_budgets,
                               frames_per_step=frames_per_step)


CURVE = [(0, 1.0, -5.0), (10_000, 2.0, 1.0), (20_000, 3.0, 7.0)]


@pytest.mark.parametrize('env_steps, expected', [
    (0, -5.0),         # an evaluation at the budget
    (5_000, -2.0),     # between two: interpolated
    (10_000, 1.0),
    (19_999, 6.9994),
    (20_000, 7.0),
    (20_001, None),    # the run never got that far
    (-1, None),        # nothing evaluated before it
])
def test_return_at(env_steps, expected):
  assert summary.return_at(CURVE, env_steps) == (
      None if expected is None else pytest.approx(expected))
  assert summary.return_at([], env_steps) is None


def test_env_steps_to_a_return_interpolate_the_first_crossing():
  curve = [(5_000, 10.0, 1_000.0), (10_000, 20.0, 3_000.0), (15_000, 30.0, 2_000.0),
           (20_000, 40.0, 5_000.0)]
  assert summary.steps_to(curve, 2_000.0) == 7_500.0  # halfway from 1,000 to 3,000
  assert summary.steps_to(curve, 3_000.0) == 10_000.0
  assert summary.steps_to(curve, 2_500.0) == 8_750.0  # the first crossing, not the later
  assert summary.steps_to(curve, 4_000.0) == 15_000.0 + 5_000.0 * 2 / 3
  assert summary.steps_to(curve, 500.0) == 5_000.0  # the first evaluation is above it
  assert summary.steps_to(curve, 6_000.0) == math.inf
  assert summary.steps_to([], 0.0) == math.inf


def test_threshold_task_unsolved_seeds_count_as_never():
  tfrl = [_run(s, env_steps=n, seconds=n / 100) for s, n in enumerate((100, 200, 300))]
  peer = [_run(0, env_steps=1000, seconds=20.0), _run(1, env_steps=2000, seconds=30.0),
          _run(2, solved=False, env_steps=9000, seconds=90.0)]
  result = summary.summarize('dqn', _task(threshold=475.0), 'SB3 DQN', tfrl, peer,
                             600.0, SETTINGS)
  steps, seconds = result['measures']
  assert steps['measure'] == 'env steps to target'
  assert steps['tfrl']['values'] == [100, 200, 300]
  assert steps['peer']['values'] == [1000, 2000, math.inf]
  assert (steps['peer']['reached'], steps['peer']['of']) == (2, 3)
  assert (steps['tfrl']['point'], steps['peer']['point']) == (200.0, 2000.0)
  expected = stats.compare([100, 200, 300], [1000, 2000, math.inf], 'ratio', 'median',
                           resamples=2000)
  assert steps['comparison'] == {'how': 'ratio', **expected.as_dict()}
  assert steps['comparison']['point'] == pytest.approx(0.1)
  assert steps['verdict'] == 'PASS, interval clear of parity'
  assert seconds['peer']['values'] == [20.0, 30.0, math.inf]
  table = summary.markdown([result], SETTINGS)
  assert table[0].startswith('| task | measure | seeds reached (tfrl; peer) | '
                             'tfrl median [95% CI] |')
  assert table[2].startswith('| dqn: Env-v0 >= 475 vs SB3 DQN | env steps to target | '
                             '3/3; 2/3 | 200 [100, 300] | 2,000 [1,000, never] | 0.10x [')
  assert table[3].startswith('|  | seconds to target | 3/3; 2/3 | 2.0 [1.0, 3.0] | '
                             '30.0 [20.0, never] |')


@pytest.mark.parametrize('peer_protocol, reason', [
    (None, r'not compared: no evaluation protocol recorded \(SB3 runs'),
    (dict(PROTOCOL, eval_every_env_steps=5_000),
     r'not compared: the evaluation protocols differ: .*"eval_every_env_steps": 2000.* vs '
     r'.*"eval_every_env_steps": 5000'),
    (dict(PROTOCOL, confirm_episodes=None), 'not compared: the evaluation protocols differ'),
])
def test_runs_of_another_protocol_are_not_compared(peer_protocol, reason):
  tfrl = [_run(s, env_steps=100 * (s + 1)) for s in range(3)]
  peer = [_run(s, env_steps=1000, side='SB3', protocol=peer_protocol) for s in range(3)]
  result = summary.summarize('dqn', _task(threshold=475.0), 'SB3 DQN', tfrl, peer, 600.0,
                             SETTINGS)
  assert re.match(reason, result['not_compared'])
  for row in result['measures']:
    assert 'comparison' not in row and row['verdict'] == result['not_compared']
  assert result['measures'][0]['peer']['values'] == [1000] * 3  # each side still shown
  assert '| - | not compared:' in summary.markdown([result], SETTINGS)[2]


def test_a_tfrl_seed_short_of_the_target_misses():
  tfrl = [_run(0, env_steps=100), _run(1, env_steps=100),
          _run(2, solved=False, env_steps=5000)]
  peer = [_run(s, env_steps=1000) for s in range(3)]
  steps = summary.summarize('dqn', _task(threshold=1.0), 'peer', tfrl, peer, 600.0,
                            SETTINGS)['measures'][0]
  assert steps['tfrl']['point'] == 100.0
  assert steps['verdict'].startswith('MISS')


def test_budget_task_returns_and_rates():
  def curve(at_50k, end):
    return [(0, 0.0, 0.0), (50_000, 100.0, at_50k), (60_000, 120.0, end)]
  tfrl = [_run(s, env_steps=60_000, seconds=120.0, eval_return=e, curve=curve(r, e))
          for s, (r, e) in enumerate(((10.0, 20.0), (12.0, 22.0), (14.0, 24.0)))]
  # The peer's seed 2 never reached 50k env steps: left out of that measure.
  peer = [_run(s, env_steps=60_000, seconds=600.0, eval_return=e, curve=curve(r, e))
          for s, (r, e) in enumerate(((11.0, 5.0), (13.0, 6.0)))] + [
          _run(2, env_steps=40_000, seconds=400.0, eval_return=7.0,
               curve=[(0, 0.0, 0.0), (40_000, 400.0, 7.0)])]
  result = summary.summarize('sac_x', _task(env_step_budgets=(50_000,)), 'SB3 SAC',
                             tfrl, peer, 600.0, SETTINGS)
  at_50k, at_end, rate = result['measures']
  assert at_50k['measure'] == 'return at 50,000 env steps'
  assert at_50k['peer']['values'] == [11.0, 13.0, None]
  assert (at_50k['peer']['reached'], at_50k['peer']['of']) == (2, 3)
  assert at_50k['tfrl']['point'] == 12.0 and at_50k['peer']['point'] == 12.0  # 11, 13
  assert at_50k['comparison']['how'] == 'difference'
  assert at_50k['comparison']['point'] == 0.0
  assert at_50k['verdict'] == 'PASS, parity inside interval'
  assert at_end['measure'] == 'return after 600 s'
  assert at_end['comparison']['point'] == 22.0 - 6.0
  assert rate['tfrl']['values'] == [500.0] * 3 and rate['peer']['values'] == [100.0] * 3
  assert rate['comparison'] == {'how': 'ratio', 'point': 5.0, 'low': 5.0, 'high': 5.0}
  table = summary.markdown([result], SETTINGS)
  assert '| 12.0 [10.0, 14.0] | 12.0 [11.0, 13.0] | +0.00 [' in table[2]
  assert table[4] == ('|  | env steps/s | 3/3; 3/3 | 500 [500, 500] | 100 [100, 100] | '
                      '5.00x [5.00x, 5.00x] | PASS, interval clear of parity |')


def test_atari_budgets_are_given_in_frames_and_no_peer_is_said():
  task = _task(env_step_budgets=(500_000,), frames_per_step=4)
  tfrl = [_run(0, env_steps=600_000, seconds=600.0, eval_return=11.0,
               curve=[(0, 0.0, 1.0), (500_000, 500.0, 9.0), (600_000, 600.0, 11.0)])]
  result = summary.summarize('ppo_breakout', task, None, tfrl, [], 600.0, SETTINGS)
  names = [row['measure'] for row in result['measures']]
  assert names == ['return at 2,000,000 frames', 'return after 600 s', 'frames/s']
  assert result['measures'][2]['tfrl']['values'] == [4000.0]
  table = summary.markdown([result], SETTINGS)
  assert table[2] == ('| ppo_breakout: Env-v0 vs no peer | return at 2,000,000 frames | '
                      '1/1 | 9.00 [9.00, 9.00] | no peer | - | - |')


def test_iqm_settings_name_the_statistic_and_json_is_strict(tmp_path):
  settings = summary.Settings(statistic='iqm', resamples=500)
  tfrl = [_run(s, env_steps=n) for s, n in enumerate((100, 200, 300, 400, 10_000))]
  peer = [_run(s, solved=False, env_steps=9) for s in range(3)]
  result = summary.summarize('ppo', _task(threshold=1.0), 'peer', tfrl, peer, 60.0,
                             settings)
  steps = result['measures'][0]
  assert steps['tfrl']['point'] == 300.0  # the mean of 200, 300, 400
  assert steps['peer']['point'] == math.inf
  assert 'tfrl IQM [95% CI]' in summary.markdown([result], settings)[0]
  path = tmp_path / 'summary.json'
  summary.write_json(str(path), [result], settings, {'argv': ['x']})
  # Strict JSON: infinities as strings, not the non-standard Infinity.
  loaded = json.loads(path.read_text(), parse_constant=pytest.fail)
  assert loaded['settings'] == {'statistic': 'iqm', 'confidence': 0.95,
                                'resamples': 500, 'seed': 0}
  peer_side = loaded['tasks'][0]['measures'][0]['peer']
  assert peer_side['values'] == ['inf'] * 3 and peer_side['point'] == 'inf'
  assert loaded['header'] == {'argv': ['x']}

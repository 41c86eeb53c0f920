"""benchmarks/ablation.py: arms parsed from flags, a series that resumes where it
stopped, and its tables on hand-made runs (values from benchmarks/stats.py)."""
import json

import pytest
from absl import app
from absl import flags

import ablation  # benchmarks/ablation.py (tests/benchmarks/conftest.py)
import stats

ALGO = 'ppo_halfcheetah'


@pytest.fixture
def flag_values(tmp_path):
  if not flags.FLAGS.is_parsed():
    flags.FLAGS(['ablation'])
  saved = {name: getattr(flags.FLAGS, name) for name in
           ('out_dir', 'env_step_budgets', 'peer_runs', 'peer_algo', 'peer_side', 'jobs',
            'algo', 'to_target')}
  flags.FLAGS.out_dir = str(tmp_path)
  flags.FLAGS.env_step_budgets = ['200000']
  flags.FLAGS.peer_runs = None
  flags.FLAGS.peer_algo = None
  flags.FLAGS.peer_side = 'SB3'
  flags.FLAGS.jobs = 1
  flags.FLAGS.algo = ALGO
  flags.FLAGS.to_target = False
  yield tmp_path
  for name, value in saved.items():
    setattr(flags.FLAGS, name, value)


def _write(path, side, returns_at_200k, algo=ALGO):
  with open(path, 'a') as f:
    for seed, value in enumerate(returns_at_200k):
      curve = [[0, 1.0, 0.0], [100_000, 60.0, value / 2], [300_000, 180.0, value * 1.5]]
      f.write(json.dumps({'side': side, 'algo': algo, 'seed': seed,
                          'extra': {'curve': curve}}) + '\n')


def test_arms_parse_with_their_bindings_and_bad_names_are_refused():
  arm = ablation.parse_arm('normalized: Experiment.normalize_reward = True; '
                           'PpoAgent.reward_scale = 1.0')
  assert arm == ablation.Arm('normalized', ('Experiment.normalize_reward = True',
                                            'PpoAgent.reward_scale = 1.0'))
  assert ablation.parse_arm('config:') == ablation.Arm('config', ())
  for text in ('no colon', ': x = 1', 'a/b: x = 1'):
    with pytest.raises(app.UsageError, match="expected 'name: binding"):
      ablation.parse_arm(text)


def test_the_table_gives_each_arms_iqm_and_differences_with_intervals(flag_values):
  base, other, peer = [1000, 1100, 1200, 1300, 5000], [2000, 2100, 2200, 2300, 2400], [1500, 1600, 1700]
  _write(flag_values / 'config.jsonl', 'tfrl', base)
  _write(flag_values / 'other.jsonl', 'tfrl', other)
  _write(flag_values / 'peer.jsonl', 'SB3', peer)
  flags.FLAGS.peer_runs = str(flag_values / 'peer.jsonl')
  arms = [ablation.Arm('config', ()), ablation.Arm('other', ('x = 1',)),
          ablation.Arm('missing', ())]
  table = '\n'.join(ablation.report(arms, arms[0]))
  # Interpolated at 200k: the mean of the curve's 100k and 300k points, the value itself.
  iqm = stats.interval(base)
  assert iqm.point == pytest.approx(1200.0)  # 1000 and 5000 cut
  assert f'| config | 5 | 1,200 [{iqm.low:,.0f}, {iqm.high:,.0f}] | - |' in table
  d = stats.compare(other, base, 'difference')
  assert f'| other | 5 | 2,200 ' in table and f'{d.point:+,.0f} [{d.low:+,.0f}, {d.high:+,.0f}]' in table
  assert 'vs SB3 ppo_halfcheetah (3 seeds: 1,600' in table
  assert '| missing | 0 | - | - | - |' in table
  assert 'other = x = 1' in table and 'config = the config as it is' in table


def test_arms_are_held_against_another_configs_tfrl_runs_with_small_scores(flag_values):
  """APPO's arms against PPO's tfrl runs, Atari scores shown to one decimal."""
  _write(flag_values / 'batch8.jsonl', 'tfrl', [8.0, 12.5, 11.0])
  _write(flag_values / 'ppo.jsonl', 'tfrl', [12.1, 13.9, 12.6], algo='ppo_breakout')
  _write(flag_values / 'ppo.jsonl', 'SB3', [100.0, 100.0, 100.0], algo='ppo_breakout')
  flags.FLAGS.peer_runs = str(flag_values / 'ppo.jsonl')
  flags.FLAGS.peer_algo, flags.FLAGS.peer_side = 'ppo_breakout', 'tfrl'
  table = '\n'.join(ablation.report([ablation.Arm('batch8', ())], ablation.Arm('batch8', ())))
  assert 'vs tfrl ppo_breakout (3 seeds: 12.9 [' in table
  d = stats.compare([8.0, 12.5, 11.0], [12.1, 13.9, 12.6], 'difference')
  assert f'| batch8 | 3 | 10.5 [' in table and f'{d.point:+,.1f} [{d.low:+,.1f}, {d.high:+,.1f}]' in table


def test_a_target_task_compares_env_steps_to_the_target_with_never_for_misses(flag_values):
  """--to_target: each run's env steps if it solved, infinite if not (solve_time's
  measure), IQMs with intervals and ratios to the baseline and the peer."""
  def write(path, side, steps):
    with open(path, 'a') as f:
      for seed, n in enumerate(steps):
        f.write(json.dumps({'side': side, 'algo': 'dqn_lunarlander', 'seed': seed,
                            'solved': n is not None, 'env_steps': n or 300_000,
                            'extra': {'curve': []}}) + '\n')

  flags.FLAGS.algo, flags.FLAGS.to_target = 'dqn_lunarlander', True
  base, other, peer = [40_000, 60_000, 70_000, 80_000, 100_000], [20_000, 30_000, 30_000,
                                                                  40_000, None], [65_000] * 3
  write(flag_values / 'config.jsonl', 'tfrl', base)
  write(flag_values / 'other.jsonl', 'tfrl', other)
  write(flag_values / 'peer.jsonl', 'SB3', peer)
  flags.FLAGS.peer_runs = str(flag_values / 'peer.jsonl')
  table = '\n'.join(ablation.report([ablation.Arm('config', ()), ablation.Arm('other', ())],
                                    ablation.Arm('config', ())))
  assert 'Env steps to the target (dqn_lunarlander' in table
  assert '| arm | seeds | env steps | vs config | vs SB3 dqn_lunarlander (3 seeds: 65,000' in table
  iqm = stats.interval(base)
  assert iqm.point == pytest.approx(70_000)
  ratio = stats.compare(base, peer, 'ratio')
  assert (f'| config | 5 | 70,000 [{iqm.low:,.0f}, {iqm.high:,.0f}] | - | '
          f'{ratio.point:.2f}x [{ratio.low:.2f}x, {ratio.high:.2f}x] |') in table
  # The seed that never solved counts as infinite: IQM of 20k, 30k, 30k, 40k, inf.
  other_iqm = stats.interval([20_000, 30_000, 30_000, 40_000, float('inf')])
  assert other_iqm.high == float('inf')
  assert f'| other | 5 | {other_iqm.point:,.0f} [{other_iqm.low:,.0f}, never] |' in table


def test_a_series_runs_only_what_its_files_lack(flag_values, monkeypatch):
  _write(flag_values / 'config.jsonl', 'tfrl', [1000, 1100])  # seeds 0 and 1 done
  ran = []
  monkeypatch.setattr(ablation, 'run_one', lambda arm, seed, cpu: ran.append((arm.name, seed)) or 'ok')
  arms = [ablation.Arm('config', ()), ablation.Arm('other', ('x = 1',))]
  ablation.run_arms(arms, [0, 1, 2])
  assert ran == [('other', 0), ('other', 1), ('config', 2), ('other', 2)]

"""Population-based training's decisions (exploit, explore) and its lineage file."""

import numpy as np
import pytest

from learners.population import population

BOUNDS = {'learning_rate': population.Bound(1e-5, 1e-2),
          'entropy_cost': population.Bound(0.0, 0.05, log=False),
          'target_update_period': population.Bound(10, 1000, integer=True)}
START = {'learning_rate': 1e-3, 'entropy_cost': 0.01, 'target_update_period': 100,
         'clip_ratio': 0.2}  # clip_ratio has no bound: it is never changed


def test_perturbation_stays_in_bounds_and_keeps_integers():
  rng = np.random.default_rng(0)
  values = dict(START)
  for _ in range(2000):  # a long walk: it reaches the bounds and must stay inside
    values = population.perturb(values, BOUNDS, rng)
    for name, bound in BOUNDS.items():
      assert bound.low <= values[name] <= bound.high, (name, values[name])
    assert isinstance(values['target_update_period'], int)
    assert values['clip_ratio'] == 0.2
  hits = population.perturb({'learning_rate': 1e-2, 'entropy_cost': 0.05,
                             'target_update_period': 1000}, BOUNDS, rng,
                            factors=(1.2,), resample_probability=0.0)
  assert hits == {'learning_rate': 1e-2, 'entropy_cost': 0.05, 'target_update_period': 1000}


def test_without_resampling_each_value_moves_by_one_of_the_factors():
  rng = np.random.default_rng(1)
  seen = set()
  for _ in range(50):
    new = population.perturb(START, BOUNDS, rng, resample_probability=0.0)
    ratio = new['learning_rate'] / START['learning_rate']
    assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.2)
    seen.add(round(ratio, 3))
    assert new['target_update_period'] in (80, 120)
  assert seen == {0.8, 1.2}


def test_resampling_draws_log_uniformly_within_the_bound():
  rng = np.random.default_rng(2)
  draws = np.array([population.Bound(1e-5, 1e-2).sample(rng) for _ in range(4000)])
  assert draws.min() >= 1e-5 and draws.max() <= 1e-2
  # Log-uniform: each of the three decades holds about a third.
  decades = np.histogram(np.log10(draws), bins=[-5, -4, -3, -2])[0] / len(draws)
  np.testing.assert_allclose(decades, [1 / 3] * 3, atol=0.04)


def test_the_bottom_quantile_copies_a_top_member_with_its_settings_perturbed():
  rng = np.random.default_rng(3)
  scores = {0: 10.0, 1: 250.0, 2: -40.0, 3: 120.0, 4: float('nan'), 5: 200.0,
            6: 90.0, 7: 30.0}
  settings = {m: dict(START, learning_rate=1e-4 * (m + 1)) for m in scores}
  decisions = population.exploit_and_explore(scores, settings, BOUNDS, rng, quantile=0.25,
                                             resample_probability=0.0)
  # Eight members, a quarter at each end: 4 (no evaluation yet) and 2 copy 5 or 1.
  assert [d.member for d in decisions] == [4, 2]
  for decision in decisions:
    assert decision.source in (1, 5)
    ratio = (decision.hyperparameters['learning_rate'] /
             settings[decision.source]['learning_rate'])
    assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.2)
  assert population.exploit_and_explore({0: 1.0}, {0: START}, BOUNDS, rng) == []
  two = population.exploit_and_explore({0: 1.0, 1: 2.0}, {0: START, 1: START}, BOUNDS,
                                       rng)
  assert [(d.member, d.source) for d in two] == [(0, 1)]
  assert population.best_member(scores) == 1
  assert population.best_member({0: float('nan')}) is None


def test_bad_bounds_and_quantiles_are_refused():
  with pytest.raises(ValueError, match='low <= high'):
    population.Bound(1.0, 0.1)
  with pytest.raises(ValueError, match='log-scale bound needs low > 0'):
    population.Bound(0.0, 0.05)
  with pytest.raises(ValueError, match=r'quantile must be in \(0, 0.5\]'):
    population.exploit_and_explore({0: 1.0, 1: 2.0}, {0: START, 1: START}, BOUNDS,
                                   np.random.default_rng(0), quantile=0.75)


def test_the_lineage_replays_each_members_history(tmp_path):
  path = str(tmp_path / 'pbt' / 'lineage.jsonl')
  lineage = population.Lineage(path)
  lineage.record('start', 0, hyperparameters={'learning_rate': 1e-3})
  lineage.record('start', 1, hyperparameters={'learning_rate': 1e-4})
  lineage.record('ready', 0, env_steps=5000, score=100.0)
  lineage.record('ready', 1, env_steps=5000, score=-20.0)
  lineage.record('exploit', 1, source=0, env_steps=5000, source_train_step=40,
                 hyperparameters={'learning_rate': 1.2e-3})
  with open(path, 'a') as f:  # a runner killed mid-write leaves a torn last line
    f.write('{"event": "rea')
  history = population.replay(path)
  assert history == {
      0: [{'env_steps': 0, 'source': None, 'hyperparameters': {'learning_rate': 1e-3}}],
      1: [{'env_steps': 0, 'source': None, 'hyperparameters': {'learning_rate': 1e-4}},
          {'env_steps': 5000, 'source': 0, 'hyperparameters': {'learning_rate': 1.2e-3}}]}
  assert [e['event'] for e in population.read(path)] == ['start', 'start', 'ready',
                                                         'ready', 'exploit']
  lines = open(path).read().split('\n')
  lines[2] = 'not json'
  with open(path, 'w') as f:
    f.write('\n'.join(lines))
  with pytest.raises(ValueError, match=r'lineage.jsonl:3 is not a lineage event'):
    population.read(path)


def test_the_default_truncation_is_the_papers_twenty_percent():
  """Jaderberg et al. (2017): the bottom 20% copy from the top 20%; at least one member
  at each end."""
  rng = np.random.default_rng(0)
  eight = {m: float(m) for m in range(8)}  # 20%: one member each end (a quarter: two)
  decisions = population.exploit_and_explore(eight, {m: dict(START) for m in eight},
                                             BOUNDS, rng)
  assert [(d.member, d.source) for d in decisions] == [(0, 7)]
  ten = {m: float(m) for m in range(10)}
  decisions = population.exploit_and_explore(ten, {m: dict(START) for m in ten}, BOUNDS,
                                             rng)
  assert sorted(d.member for d in decisions) == [0, 1]
  assert {d.source for d in decisions} <= {8, 9}
  four = {m: float(m) for m in range(4)}
  assert [d.member for d in population.exploit_and_explore(
      four, {m: dict(START) for m in four}, BOUNDS, rng)] == [0]

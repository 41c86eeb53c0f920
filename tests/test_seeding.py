"""Env seeds: no two experiment seeds share one, and each stream stands apart."""
import numpy as np
import pytest
from tf_agents.policies import random_tf_policy

import tfrl.envs
from learners.configuration.experiment import Experiment
from tfrl import actors
from tfrl import seeding

NUM_ENVS = 16
EXPERIMENT_SEEDS = range(10)


def _experiment_env_seeds(seed: int):
  """Every env seed a job of experiment seed `seed` resets with: 4 collectors' 16 envs,
  30 evaluations' and 5 confirmations' 10 envs."""
  experiment = Experiment(seed=seed)
  streams = [experiment.collect_seed(task_id) for task_id in range(4)]
  for first in (experiment.eval_seed, experiment.confirm_seed):
    streams += [first] + [seeding.derive(first, k) for k in range(1, 30)]
  return {first + i for first in streams for i in range(NUM_ENVS)}, len(streams)


def test_two_experiment_seeds_share_no_env_seed():
  seen = {}
  for seed in EXPERIMENT_SEEDS:
    env_seeds, streams = _experiment_env_seeds(seed)
    assert len(env_seeds) == streams * NUM_ENVS  # nor do its own streams overlap
    for other, other_seeds in seen.items():
      assert not env_seeds & other_seeds, (seed, other, sorted(env_seeds & other_seeds))
    seen[seed] = env_seeds


def test_derived_seeds_are_fixed_valid_int32_and_refuse_negatives():
  assert seeding.derive(0, seeding.EVALUATE) == seeding.derive(0, seeding.EVALUATE)
  assert seeding.derive(0, seeding.EVALUATE) != seeding.derive(1, seeding.EVALUATE)
  assert seeding.derive(0, seeding.COLLECT, 1) != seeding.derive(0, seeding.COLLECT, 2)
  for seed in EXPERIMENT_SEEDS:
    first = seeding.derive(seed, seeding.CONFIRM)
    assert 0 <= first and first + 2**16 <= 2**31
  with pytest.raises(ValueError, match='non-negative'):
    seeding.derive(-1, seeding.COLLECT)


def test_each_evaluation_plays_fresh_episodes_and_its_seed_replays_them():
  env = tfrl.envs.make('CartPole-v1', num_envs=2)
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  resets = []
  reset = env.reset
  env.reset = lambda seed=None: resets.append(seed) or reset(seed=seed)
  try:
    evaluator = actors.Evaluator(env, policy, num_episodes=2, seed=123)
    evaluator.run()
    evaluator.run()
    assert resets == [123, seeding.derive(123, 1)] == [123, evaluator.last_seed]
    # Evaluator(seed=last_seed)'s first evaluation resets as the second one did.
    actors.Evaluator(env, policy, num_episodes=2, seed=evaluator.last_seed).run()
    assert resets[-1] == resets[1]
  finally:
    env.close()


@pytest.mark.parametrize('max_eval_envs', [10, 64])
def test_a_confirmation_plays_its_own_stream_of_num_confirm_episodes(max_eval_envs):
  experiment = Experiment(env_name='CartPole-v1', num_confirm_episodes=30,
                          max_eval_envs=max_eval_envs)
  env = tfrl.envs.make('CartPole-v1', num_envs=1)
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  env.close()
  confirmer = experiment.make_evaluator(policy, confirm=True)
  try:
    result = confirmer.run()
    assert result['NumberOfEpisodes'] == 30
    assert confirmer.last_seed == experiment.confirm_seed != experiment.eval_seed
    assert np.isfinite(result['AverageReturn'])
  finally:
    confirmer.close()


@pytest.mark.parametrize('max_eval_envs,episodes,at_once', [(10, 100, 10), (100, 100, 100),
                                                           (100, 10, 10)])
def test_an_evaluation_plays_at_most_max_eval_envs_episodes_at_once(max_eval_envs, episodes,
                                                                    at_once):
  env = Experiment(max_eval_envs=max_eval_envs).make_eval_env(num_episodes=episodes)
  try:
    assert env.num_envs == at_once
  finally:
    env.close()

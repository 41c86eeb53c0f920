"""`tfrl.envs.make(normalize_reward=gamma)`: rewards divided by the running standard
deviation of the discounted return and clipped, as SB3's VecNormalize (norm_reward), per
sub-env, in this process and in env workers; the episodes' returns reported stay raw."""
import numpy as np
import pytest
from tf_agents.policies import fixed_policy

from tfrl import actors
from tfrl import envs
from tfrl.envs import reward_normalization

GAMMA = 0.9
STEPS = 450  # Pendulum: episodes of 200 steps, so 2 whole ones per sub-env


def _run(num_workers=0, normalize_reward=None, seed=0):
  """Rewards of each step [STEPS, 2] and the Actor's episode metrics, under a fixed
  torque."""
  rewards = []

  class Recorder:
    def write(self, time_step, policy_step, next_time_step, *args, **kwargs):
      del time_step, policy_step, args, kwargs
      rewards.append(next_time_step.reward.copy())

    def reset(self):
      pass

  with envs.make('Pendulum-v1', num_envs=2, seed=seed, num_workers=num_workers,
                 normalize_reward=normalize_reward) as env:
    policy = fixed_policy.FixedPolicy(np.array([0.5], np.float32), env.time_step_spec(),
                                      env.action_spec())
    metrics = actors.Actor(env, policy, [Recorder()]).run(STEPS)
  return np.array(rewards, np.float64), metrics


def _reference(raw, first, gamma):
  """SB3's VecNormalize reward scaling per sub-env (numpy): the running return reset
  after a termination (Pendulum has none; its time limits carry the return on),
  statistics from a count of 1e-4, each reward divided by the std including its own
  return, clipped."""
  out = np.zeros_like(raw)
  for env in range(raw.shape[1]):
    mean, var, count, ret = 0.0, 1.0, 1e-4, 0.0
    for t in range(raw.shape[0]):
      if first[t, env]:  # a reset step: no reward to scale
        out[t, env] = raw[t, env]
        continue
      ret = ret * gamma + raw[t, env]
      delta, total = ret - mean, count + 1
      mean += delta / total
      var = (var * count + delta ** 2 * count / total) / total
      count = total
      out[t, env] = np.clip(raw[t, env] / np.sqrt(var + reward_normalization.EPSILON),
                            -reward_normalization.REWARD_CLIP,
                            reward_normalization.REWARD_CLIP)
  return out


def test_rewards_are_scaled_by_the_running_return_std_and_returns_stay_raw():
  raw, raw_metrics = _run()
  scaled, metrics = _run(normalize_reward=GAMMA)
  # The autoreset steps (after each 200-step episode) carry reward 0 on both sides.
  first = raw == 0.0
  np.testing.assert_allclose(scaled, _reference(raw, first, GAMMA), rtol=1e-5, atol=1e-6)
  assert np.abs(scaled).max() <= reward_normalization.REWARD_CLIP
  # Pendulum's rewards are -16 to 0 and its returns spread over tens: the scale moves.
  assert np.abs(scaled[first == 0]).mean() < 0.5 * np.abs(raw[first == 0]).mean()
  assert metrics['NumberOfEpisodes'] == 4
  np.testing.assert_allclose(metrics['AverageReturn'], raw_metrics['AverageReturn'],
                             rtol=1e-6)


def test_env_workers_scale_rewards_as_this_process_does():
  here, _ = _run(normalize_reward=GAMMA)
  workers, _ = _run(num_workers=2, normalize_reward=GAMMA)
  np.testing.assert_allclose(workers, here, rtol=1e-6)


@pytest.mark.parametrize('gamma', [-0.1, 1.5])
def test_a_discount_outside_0_1_is_refused(gamma):
  with pytest.raises(ValueError, match="normalize_reward is the running return's discount"):
    envs.make('Pendulum-v1', normalize_reward=gamma)


def test_an_experiment_normalizes_with_its_own_gamma():
  from learners.configuration import experiment  # pylint: disable=g-import-not-at-top
  job = experiment.Experiment(env_name='Pendulum-v1', gamma=GAMMA, normalize_reward=True,
                              num_envs=2, seed=0, env_workers=0)
  assert job.env_options()['normalize_reward'] == GAMMA
  assert experiment.Experiment(env_name='Pendulum-v1').env_options()['normalize_reward'] is None
  with job.make_env() as env:
    env.reset()
    rewards = [env.step(np.full((2, 1), 0.5, np.float32)).reward for _ in range(50)]
  expected, _ = _run(normalize_reward=GAMMA, seed=job.collect_seed())  # the job's envs
  np.testing.assert_allclose(np.array(rewards), expected[:50], rtol=1e-5)

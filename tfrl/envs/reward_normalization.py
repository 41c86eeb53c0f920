"""Rewards scaled by a running standard deviation of the discounted return.

`tfrl.envs.make(normalize_reward=gamma)` divides each reward by the standard deviation
of a running discounted return (discount `gamma`) and clips the result to
[-REWARD_CLIP, REWARD_CLIP]: what SB3's `VecNormalize(norm_reward=True)` does, which
RL-Zoo's MuJoCo PPO settings use, and CleanRL's continuous PPO. The mean is not
subtracted (a shift would change which episodes are worth ending early). Scores stay
raw: the env reports whole episodes' unscaled returns (`atari_wrappers.GameScore`),
which tfrl's episode metrics and Evaluator count.

The statistics are gymnasium's `NormalizeReward`'s, with these differences from SB3's:

- one set per sub-env (SB3 pools a vector env's sub-envs), each from its share of the
  steps: the same scale once a few thousand steps are in;
- the running return is reset at terminations only (SB3 also resets it at time limits;
  with gamma 0.98 the carried part is gone within a few hundred steps);
- they live in the env, so a restarted job starts them afresh (SB3 leaves saving
  `VecNormalize` to its user): rewards are scaled from few samples for its first steps.
"""
import gymnasium as gym

# SB3's VecNormalize clip_reward.
REWARD_CLIP = 10.0
# SB3's VecNormalize epsilon (added to the variance).
EPSILON = 1e-8


def normalize_reward(env: gym.Env, gamma: float) -> gym.Env:
  """`env` with its rewards divided by the running return's standard deviation.

  Args:
    env: the env whose rewards to scale.
    gamma: the discount of the running return (the agent's discount, as SB3's and
      CleanRL's PPO set it).

  Returns:
    The wrapped env.
  """
  env = gym.wrappers.NormalizeReward(env, gamma=gamma, epsilon=EPSILON)
  return gym.wrappers.ClipReward(env, -REWARD_CLIP, REWARD_CLIP)

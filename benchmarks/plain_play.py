"""Plays an exported policy with TensorFlow and gymnasium only, as a serving client would.

    .venv/bin/python benchmarks/plain_play.py --policy_dir=runs/demo/policies/greedy_policy \
        --seed=123 --episodes=100

prints one line, `PLAYED {"returns": [...], "mean": ..., "tfrl_imported": false}`. The
episodes are played as `tfrl.actors.Evaluator` plays them: min(episodes, 10) envs,
sub-env i reset with seed + i and then playing its quota of episodes one after another
(`tfrl.quotas`; later resets unseeded, gymnasium's autoreset), so a job's
`confirmation_seed` replays its confirmation. For envs with Box observations and no
tfrl wrappers (CartPole, Pendulum, LunarLander). The process imports neither tfrl nor
tf-agents; the line says whether anything did.
"""
import argparse
import json
import sys
from typing import List

import gymnasium as gym
import numpy as np
import tensorflow as tf

import tfrl_leaves  # benchmarks/tfrl_leaves.py

MAX_ENVS = 10  # as Experiment.make_eval_env


def play(policy_dir: str, env_id: str, seed: int, episodes: int) -> List[float]:
  """Each episode's return, env by env (sub-env i's quota, then sub-env i + 1's).

  Args:
    policy_dir: an exported policy SavedModel (its 'action' signature).
    env_id: a registered gymnasium id.
    seed: sub-env i's first reset is seeded with seed + i.
    episodes: how many episodes in all.

  Returns:
    The returns, `episodes` of them.
  """
  action_fn = tf.saved_model.load(policy_dir).signatures['action']
  quotas = np.array(tfrl_leaves.load('quotas').episode_quotas(episodes, min(episodes,
                                                                            MAX_ENVS)))
  n = len(quotas)
  envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n)
  try:
    observation, _ = envs.reset(seed=[seed + i for i in range(n)])
    running, returns = np.zeros(n), [[] for _ in range(n)]
    first = np.ones(n, dtype=bool)  # the observation begins an episode
    resetting = np.zeros(n, dtype=bool)  # the last step ended one: this step only resets
    while any(len(r) < quota for r, quota in zip(returns, quotas)):
      outputs = action_fn(step_type=tf.constant(np.where(first, 0, 1), tf.int32),
                          reward=tf.zeros([n]), discount=tf.ones([n]),
                          observation=tf.constant(observation, tf.float32))
      observation, reward, terminated, truncated, _ = envs.step(outputs['action'].numpy())
      # Gymnasium's autoreset at the next step: the step after an episode's last one
      # ignores its action, pays nothing and returns the next episode's first observation.
      running += np.where(resetting, 0.0, reward)
      ended = ~resetting & (terminated | truncated)
      for i in np.flatnonzero(ended):
        if len(returns[i]) < quotas[i]:
          returns[i].append(float(running[i]))
        running[i] = 0.0
      first, resetting = resetting, ended
  finally:
    envs.close()
  return [value for env_returns in returns for value in env_returns]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--policy_dir', required=True)
  parser.add_argument('--env_id', default='CartPole-v1')
  parser.add_argument('--seed', type=int, required=True)
  parser.add_argument('--episodes', type=int, default=100)
  args = parser.parse_args(argv)
  returns = play(args.policy_dir, args.env_id, args.seed, args.episodes)
  imported = any(m.split('.')[0] in ('tfrl', 'tf_agents', 'tensorflow_probability')
                 for m in sys.modules)
  print('PLAYED ' + json.dumps({'returns': returns, 'mean': float(np.mean(returns)),
                                'tfrl_imported': imported}), flush=True)


if __name__ == '__main__':
  main()

"""Stable-Baselines3's time to solve, with RL-Zoo's tuned settings: the peer of solve_time.py.

Runs one SB3 algorithm on one seed until a deterministic evaluation of 10 episodes
reaches the threshold, then prints one JSON line:

    {"algo": "ppo", "seed": 0, "solved": true, "seconds": 6.1, "env_steps": 10000, ...}

How it counts, so that it matches tfrl's `train_eval` (see benchmarks/solve_time.py):
  seconds     wall clock from the start of `model.learn` (after the model and its envs
              are built) to the evaluation that reached the threshold, evaluation time
              INCLUDED (tfrl's `train_seconds` also runs from the first train step and
              includes its evaluations). `seconds_excluding_eval` and `eval_seconds` are
              given too. SB3's random warm-up (`learning_starts`) lies inside `learn`, so
              it is counted here; tfrl's random warm-up runs before its clock starts
              (1,000 env steps, a few ms batched), and both count those steps as env steps.
  env_steps   `model.num_timesteps` at the evaluation that reached the threshold.
  evaluation  every `--eval_freq` env steps (5,000; SAC 1,000), 10 episodes with
              `deterministic=True` on a separate eval env (`--eval_envs` copies, default
              1 as in RL-Zoo's EvalCallback; seeded with seed + 10000 as tfrl's evaluator
              is), through `stable_baselines3.common.evaluation.evaluate_policy`.
  stop        at the first evaluation with mean return >= threshold (475 CartPole-v1,
              -200 Pendulum-v1; one evaluation, no confirmation run), at RL-Zoo's
              `n_timesteps` budget, or at the time cap (`--max_seconds`, 8 minutes).

Run with the peer's own venv (benchmarks/solve_time.py creates it):

    benchmarks/peers/.venv/bin/python benchmarks/peers/sb3_solve.py --algo=ppo --seed=0
"""
import argparse
import json
import os
import platform
import sys
import time

import gymnasium
import numpy as np
import stable_baselines3
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
import torch


def linear(initial_value):
  """RL-Zoo's `lin_<x>` schedule: x * progress_remaining (1 at the start, 0 at the end)."""

  def schedule(progress_remaining):
    return progress_remaining * initial_value

  return schedule


# RL-Zoo's tuned hyperparameters, copied from DLR-RM/rl-baselines3-zoo
# hyperparams/dqn.yml (CartPole-v1, "Almost Tuned"), hyperparams/ppo.yml (CartPole-v1,
# "Tuned") and hyperparams/sac.yml (Pendulum-v1). `n_envs` and `n_timesteps` are the
# Zoo's run settings (n_envs defaults to 1 there); the rest are the algorithm's kwargs.
HYPERPARAMS = {
    'dqn': dict(
        env_id='CartPole-v1', threshold=475.0, eval_freq=5_000, cls=DQN,
        n_envs=1, n_timesteps=int(5e4),
        kwargs=dict(policy='MlpPolicy', learning_rate=2.3e-3, batch_size=64,
                    buffer_size=100_000, learning_starts=1000, gamma=0.99,
                    target_update_interval=10, train_freq=256, gradient_steps=128,
                    exploration_fraction=0.16, exploration_final_eps=0.04,
                    policy_kwargs=dict(net_arch=[256, 256]))),
    'ppo': dict(
        env_id='CartPole-v1', threshold=475.0, eval_freq=5_000, cls=PPO,
        n_envs=8, n_timesteps=int(1e5),
        kwargs=dict(policy='MlpPolicy', n_steps=32, batch_size=256, gae_lambda=0.8,
                    gamma=0.98, n_epochs=20, ent_coef=0.0,
                    learning_rate=linear(0.001), clip_range=linear(0.2))),
    'sac': dict(
        env_id='Pendulum-v1', threshold=-200.0, eval_freq=1_000, cls=SAC,
        n_envs=1, n_timesteps=20_000,
        kwargs=dict(policy='MlpPolicy', learning_rate=1e-3)),
}


class SolveCallback(BaseCallback):
  """EvalCallback-like: evaluates every `eval_freq` env steps, stops once solved.

  Keeps the training clock (started by `start_clock` right before `model.learn`) and
  the time spent inside evaluations, so that both can be reported.
  """

  def __init__(self, eval_env, eval_freq, n_eval_episodes, threshold, max_seconds):
    super().__init__()
    self.eval_env = eval_env
    self.eval_freq = eval_freq
    self.n_eval_episodes = n_eval_episodes
    self.threshold = threshold
    self.max_seconds = max_seconds
    self.start = None
    self.next_eval = eval_freq
    self.eval_seconds = 0.0
    self.history = []
    self.solved_at = None  # (seconds, env_steps, mean_return)
    self.stopped_by = 'budget'

  def start_clock(self):
    self.start = time.perf_counter()

  def _on_step(self) -> bool:
    if self.num_timesteps >= self.next_eval:
      # With n_envs > 1 one callback step adds n_envs env steps: evaluate once per
      # crossed multiple of eval_freq.
      while self.next_eval <= self.num_timesteps:
        self.next_eval += self.eval_freq
      eval_start = time.perf_counter()
      returns, _ = evaluate_policy(self.model, self.eval_env,
                                   n_eval_episodes=self.n_eval_episodes,
                                   deterministic=True, return_episode_rewards=True)
      now = time.perf_counter()
      self.eval_seconds += now - eval_start
      mean_return = float(np.mean(returns))
      elapsed = now - self.start
      self.history.append({'env_steps': int(self.num_timesteps),
                           'eval_return': round(mean_return, 1),
                           'seconds': round(elapsed, 2)})
      print(f'env steps {self.num_timesteps:7d} | eval return {mean_return:7.1f} | '
            f'{elapsed:6.1f} s', file=sys.stderr, flush=True)
      if mean_return >= self.threshold:
        self.solved_at = (elapsed, int(self.num_timesteps), mean_return)
        self.stopped_by = 'solved'
        return False
    if time.perf_counter() - self.start > self.max_seconds:
      self.stopped_by = 'time cap'
      return False
    return True


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--algo', choices=sorted(HYPERPARAMS), required=True)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--eval_freq', type=int, default=None,
                      help='env steps between evaluations (default: 5000; SAC 1000)')
  parser.add_argument('--n_eval_episodes', type=int, default=10)
  parser.add_argument('--eval_envs', type=int, default=1,
                      help='eval env copies (RL-Zoo default 1)')
  parser.add_argument('--max_seconds', type=float, default=480.0,
                      help='training time cap (s)')
  parser.add_argument('--torch_threads', type=int, default=0,
                      help="torch intra-op threads (0: torch's default, one per core)")
  args = parser.parse_args()
  if args.torch_threads:
    torch.set_num_threads(args.torch_threads)

  params = HYPERPARAMS[args.algo]
  eval_freq = args.eval_freq or params['eval_freq']
  load_start = os.getloadavg()
  env = make_vec_env(params['env_id'], n_envs=params['n_envs'], seed=args.seed)
  eval_env = make_vec_env(params['env_id'], n_envs=args.eval_envs, seed=args.seed + 10_000)
  model = params['cls'](env=env, seed=args.seed, verbose=0, device='cpu',
                        **params['kwargs'])
  callback = SolveCallback(eval_env, eval_freq, args.n_eval_episodes, params['threshold'],
                           args.max_seconds)
  callback.start_clock()
  model.learn(total_timesteps=params['n_timesteps'], callback=callback)
  total = time.perf_counter() - callback.start
  solved = callback.solved_at is not None
  seconds, env_steps, _ = callback.solved_at or (total, int(model.num_timesteps), None)
  last_return = callback.history[-1]['eval_return'] if callback.history else None
  print(json.dumps({
      'algo': args.algo,
      'env': params['env_id'],
      'seed': args.seed,
      'solved': solved,
      'seconds': round(seconds, 2),
      'env_steps': env_steps,
      'eval_return': last_return,
      'threshold': params['threshold'],
      'stopped_by': callback.stopped_by,
      'seconds_include_eval': True,
      'eval_seconds': round(callback.eval_seconds, 2),
      'seconds_excluding_eval': round(seconds - callback.eval_seconds, 2),
      'evals': len(callback.history),
      'eval_freq': eval_freq,
      'eval_envs': args.eval_envs,
      'n_timesteps_budget': params['n_timesteps'],
      'history': callback.history,
      'load_start': [round(x, 2) for x in load_start],
      'load_end': [round(x, 2) for x in os.getloadavg()],
      'versions': {'stable_baselines3': stable_baselines3.__version__,
                   'torch': torch.__version__, 'gymnasium': gymnasium.__version__,
                   'python': platform.python_version()},
      'torch_threads': torch.get_num_threads(),
  }), flush=True)


if __name__ == '__main__':
  main()

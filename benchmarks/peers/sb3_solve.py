"""Stable-Baselines3's time to solve, with RL-Zoo's tuned settings: the peer of solve_time.py.

Runs one SB3 (or sb3-contrib) algorithm on one seed until a deterministic evaluation of
10 episodes reaches the threshold (and a confirmation repeats it), then prints one JSON
line:

    {"algo": "ppo", "seed": 0, "solved": true, "seconds": 6.1, "env_steps": 10000, ...}

How it counts, so that it matches tfrl's `train_eval` (see benchmarks/solve_time.py):
  seconds     wall clock from the start of `model.learn` (after the model and its envs
              are built) to the end of the evaluation (and confirmation) that solved it,
              evaluation time INCLUDED (tfrl's `train_seconds` also runs from the first train step and
              includes its evaluations). `seconds_excluding_eval` and `eval_seconds` are
              given too. SB3's random warm-up (`learning_starts`) lies inside `learn`, so
              it is counted here; tfrl's random warm-up runs before its clock starts
              (1,000 env steps, a few ms batched), and both count those steps as env steps.
  env_steps   `model.num_timesteps` at the evaluation that reached the threshold.
  evaluation  every `--eval_freq` env steps (default 5,000; SAC 1,000; solve_time.py
              passes the task's grid), `--n_eval_episodes` (10) greedy episodes through
              `stable_baselines3.common.evaluation.evaluate_policy` (which also serves
              recurrent models, carrying RecurrentPPO's LSTM state and resetting it where
              an episode starts) on `--eval_envs` envs (default min(episodes, 10), as
              tfrl's evaluator; RL-Zoo's EvalCallback has 1), reset before each
              evaluation with tfrl's seed for it (`tfrl.seeding`: the evaluation stream,
              a new seed per evaluation; the collect envs draw from the collect stream),
              so both sides play the same start states. Returns are the raw env's
              (Monitor), also where the model trains on VecNormalize'd envs.
  stop        solved at an evaluation with mean return >= threshold (475 CartPole-v1,
              -200 Pendulum-v1) that, with `--confirm_episodes`, a confirmation on that
              many fresh episodes (the confirmation stream) repeats, timed to the end of
              the confirmation; else at RL-Zoo's `n_timesteps` budget, or at the time
              cap (`--max_seconds`, 8 minutes).
  budgets     tasks without a threshold (HalfCheetah, Atari) run to the time cap, which
              is then their wall-clock budget, and end with one more evaluation (as
              tfrl's train_eval does at its `max_train_seconds`). Atari tasks
              (`returns: 'train'`) are judged on the training episodes' returns, as
              Atari results usually are: every `--eval_freq` env steps the history
              records the mean raw score of the last 100 finished games (Monitor sits
              under AtariWrapper, so its life-loss ends and reward clipping do not touch
              it), and no evaluation runs.

Algorithms (`--algo`) and their RL-Zoo entries (ppo_pendulum and ppo_lstm_masked read at
DLR-RM/rl-baselines3-zoo 22e3ff2, 2026-04):
  dqn              DQN, CartPole-v1 (hyperparams/dqn.yml, "Almost Tuned").
  ppo              PPO, CartPole-v1 (hyperparams/ppo.yml, "Tuned").
  sac              SAC, Pendulum-v1 (hyperparams/sac.yml).
  ppo_pendulum     PPO, Pendulum-v1 (hyperparams/ppo.yml, "Tuned"): 4 envs x 1,024
                   steps, batch 64 (SB3's default), gamma 0.9, GAE lambda 0.95, 10 epochs,
                   lr 1e-3, clip 0.2, no entropy bonus, gSDE (use_sde, resampled every 4
                   steps), 1e5 steps. RL-Zoo has no `normalize` for this entry (its
                   PendulumNoVel-v1 LSTM entry has), so neither observations nor rewards
                   are normalized here.
  ppo_lstm_masked  sb3-contrib RecurrentPPO ('MlpLstmPolicy'), RL-Zoo's CartPoleNoVel-v1
                   (hyperparams/ppo_lstm.yml, "Tuned"): 8 envs x 32 steps, batch 256,
                   gamma 0.98, GAE lambda 0.8, 20 epochs, lr lin_1e-3, clip lin_0.2, no
                   entropy bonus, policy_kwargs ortho_init=False, ReLU, lstm_hidden_size
                   64, enable_critic_lstm=True (a second LSTM for the value),
                   net_arch pi=[64] vf=[64], normalize=True (VecNormalize of observations
                   and rewards, its gamma 0.98 as RL-Zoo sets it), 1e5 steps. The eval
                   env is a VecNormalize with the training env's statistics copied in
                   before each evaluation and frozen (training=False, raw rewards), as
                   RL-Zoo's EvalCallback does. The env is CartPole-v1 with its
                   observation cut to entries (0, 2), cart position and pole angle, as
                   tfrl's `Experiment.observation_indices = (0, 2)`; RL-Zoo's
                   CartPoleNoVel-v1 instead sets the velocities (1, 3) to 0 and keeps 4
                   entries: the same information.

  sac_halfcheetah  SAC, HalfCheetah-v5 (hyperparams/sac.yml's MuJoCo defaults: 10k random
                   steps, then SB3's defaults: lr 3e-4, batch 256, buffer 1e6, one
                   gradient step per env step, tau 0.005, automatic entropy, 256 x 256).
  ppo_halfcheetah  PPO, HalfCheetah-v5 (hyperparams/ppo.yml's tuned HalfCheetah-v3: 1 env
                   x 512 steps, batch 64, 20 epochs, gamma 0.98, GAE 0.92, lr 2.06e-5,
                   clip 0.1, entropy 4e-4, vf 0.58, max grad norm 0.8, log_std_init -2,
                   no orthogonal init, ReLU 256 x 256 for pi and vf, VecNormalize of
                   observations and rewards with the algorithm's gamma, as RL-Zoo sets it).
  ppo_atari        PPO, Atari (hyperparams/ppo.yml 'atari': AtariWrapper, 4 frames, 8 envs
                   x 128 steps, batch 256, 4 epochs, lr lin_2.5e-4, clip lin_0.1, vf 0.5,
                   entropy 0.01, 1e7 steps) on `--env_id` (ALE/Pong-v5 by default) made
                   with frameskip=1, since AtariWrapper skips 4 frames itself; the v5
                   ids keep ALE's sticky actions, as on tfrl's side.
  dqn_atari        DQN, Atari (hyperparams/dqn.yml 'atari' at 22e3ff2: buffer 100k, lr
                   1e-4, batch 32, 100k steps before learning, target every 1,000 steps,
                   one gradient step per 4 env steps, epsilon 1 -> 0.01 over 10% of 1e7
                   steps), the same envs, with tfrl's dqn_atari.gin's departures taken
                   alike: 8 envs, not 1 (train_freq 1 vector step of 8 env steps, 2
                   gradient steps: still one per 4 env steps); optimize_memory_usage
                   (the same transitions in half the memory).
  ppo_minigrid     PPO, MiniGrid-DoorKey-5x5-v0 (hyperparams/ppo.yml's MiniGrid defaults:
                   FlatObsWrapper, VecNormalize, 8 envs x 128 steps, batch 64, 10
                   epochs, gamma 0.99, GAE 0.95, lr 2.5e-4, clip 0.2, no entropy bonus);
                   RL-Zoo's budget is 1e5 steps, raised here to 1e6 so that the time cap,
                   not the budget, ends a run that has not reached 0.9.

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
from stable_baselines3.common.vec_env import sync_envs_normalization
from stable_baselines3.common.vec_env import VecNormalize
import torch
from torch import nn


def recurrent_ppo():
  """sb3-contrib's RecurrentPPO, imported only for the algorithm that needs it."""
  from sb3_contrib import RecurrentPPO  # pylint: disable=g-import-not-at-top
  return RecurrentPPO


class KeepObservationEntries(gymnasium.ObservationWrapper):
  """Keeps only the given entries of a flat Box observation (tfrl's observation_indices)."""

  def __init__(self, env, indices):
    super().__init__(env)
    self.indices = np.asarray(indices)
    space = env.observation_space
    self.observation_space = gymnasium.spaces.Box(
        low=space.low[self.indices], high=space.high[self.indices], dtype=space.dtype)

  def observation(self, observation):
    return observation[self.indices]


def masked_cartpole():
  """CartPole-v1 without its velocities: cart position and pole angle (entries 0, 2)."""
  return KeepObservationEntries(gymnasium.make('CartPole-v1'), (0, 2))


def minigrid_doorkey():
  """MiniGrid-DoorKey-5x5-v0 with its observation flattened (RL-Zoo's env_wrapper)."""
  import minigrid  # pylint: disable=g-import-not-at-top,unused-import (registers the ids)
  from minigrid.wrappers import FlatObsWrapper  # pylint: disable=g-import-not-at-top
  return FlatObsWrapper(gymnasium.make('MiniGrid-DoorKey-5x5-v0'))


def make_atari_envs(env_id, n_envs, seed):
  """RL-Zoo's Atari envs: Monitor, AtariWrapper, then 4 frames stacked."""
  import ale_py  # pylint: disable=g-import-not-at-top
  from stable_baselines3.common.env_util import make_atari_env  # pylint: disable=g-import-not-at-top
  from stable_baselines3.common.vec_env import VecFrameStack  # pylint: disable=g-import-not-at-top
  gymnasium.register_envs(ale_py)
  return VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed,
                                      env_kwargs=dict(frameskip=1)), n_stack=4)


def linear(initial_value):
  """RL-Zoo's `lin_<x>` schedule: x * progress_remaining (1 at the start, 0 at the end)."""

  def schedule(progress_remaining):
    return progress_remaining * initial_value

  return schedule


# RL-Zoo's tuned hyperparameters, copied from DLR-RM/rl-baselines3-zoo
# hyperparams/dqn.yml (CartPole-v1, "Almost Tuned"), hyperparams/ppo.yml (CartPole-v1
# and Pendulum-v1, "Tuned"), hyperparams/sac.yml (Pendulum-v1) and
# hyperparams/ppo_lstm.yml (CartPoleNoVel-v1, "Tuned"); LunarLander from dqn.yml and
# ppo.yml (LunarLander-v2 there; gymnasium 1.x has v3, the same task with fixes),
# evaluated on 20 episodes ("200 over 20 episodes", the target). `n_envs`, `n_timesteps` and
# `normalize` (VecNormalize kwargs, or None) are the Zoo's run settings (n_envs defaults
# to 1 there); the rest are the algorithm's kwargs. `cls` is a callable that returns the
# algorithm class (so sb3-contrib is imported only when used); `env` is an env id or a
# function that builds the env (make_vec_env takes either); `env_id` names it.
HYPERPARAMS = {
    'dqn': dict(
        env_id='CartPole-v1', threshold=475.0, eval_freq=5_000, cls=lambda: DQN,
        n_envs=1, n_timesteps=int(5e4),
        kwargs=dict(policy='MlpPolicy', learning_rate=2.3e-3, batch_size=64,
                    buffer_size=100_000, learning_starts=1000, gamma=0.99,
                    target_update_interval=10, train_freq=256, gradient_steps=128,
                    exploration_fraction=0.16, exploration_final_eps=0.04,
                    policy_kwargs=dict(net_arch=[256, 256]))),
    'ppo': dict(
        env_id='CartPole-v1', threshold=475.0, eval_freq=5_000, cls=lambda: PPO,
        n_envs=8, n_timesteps=int(1e5),
        kwargs=dict(policy='MlpPolicy', n_steps=32, batch_size=256, gae_lambda=0.8,
                    gamma=0.98, n_epochs=20, ent_coef=0.0,
                    learning_rate=linear(0.001), clip_range=linear(0.2))),
    'sac': dict(
        env_id='Pendulum-v1', threshold=-200.0, eval_freq=1_000, cls=lambda: SAC,
        n_envs=1, n_timesteps=20_000,
        kwargs=dict(policy='MlpPolicy', learning_rate=1e-3)),
    'ppo_pendulum': dict(
        env_id='Pendulum-v1', threshold=-200.0, eval_freq=5_000, cls=lambda: PPO,
        n_envs=4, n_timesteps=int(1e5),
        kwargs=dict(policy='MlpPolicy', n_steps=1024, gae_lambda=0.95, gamma=0.9,
                    n_epochs=10, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2,
                    use_sde=True, sde_sample_freq=4)),
    'ppo_lstm_masked': dict(
        env_id='CartPole-v1 (observation entries 0, 2)', env=masked_cartpole,
        threshold=475.0, eval_freq=5_000, cls=recurrent_ppo,
        n_envs=8, n_timesteps=int(1e5), normalize=dict(gamma=0.98),
        kwargs=dict(policy='MlpLstmPolicy', n_steps=32, batch_size=256, gae_lambda=0.8,
                    gamma=0.98, n_epochs=20, ent_coef=0.0,
                    learning_rate=linear(0.001), clip_range=linear(0.2),
                    policy_kwargs=dict(ortho_init=False, activation_fn=nn.ReLU,
                                       lstm_hidden_size=64, enable_critic_lstm=True,
                                       net_arch=dict(pi=[64], vf=[64])))),
    'dqn_lunarlander': dict(
        env_id='LunarLander-v3', threshold=200.0, eval_freq=5_000, n_eval_episodes=20,
        cls=lambda: DQN, n_envs=1, n_timesteps=int(1e5),
        kwargs=dict(policy='MlpPolicy', learning_rate=6.3e-4, batch_size=128,
                    buffer_size=50_000, learning_starts=0, gamma=0.99,
                    target_update_interval=250, train_freq=4, gradient_steps=-1,
                    exploration_fraction=0.12, exploration_final_eps=0.1,
                    policy_kwargs=dict(net_arch=[256, 256]))),
    # Evaluated once per rollout (16 envs x 1,024 steps): 20 episodes on one env every
    # 5,000 steps would cost SB3 more time than its training.
    'ppo_lunarlander': dict(
        env_id='LunarLander-v3', threshold=200.0, eval_freq=16_384, n_eval_episodes=20,
        cls=lambda: PPO, n_envs=16, n_timesteps=int(1e6),
        kwargs=dict(policy='MlpPolicy', n_steps=1024, batch_size=64, gae_lambda=0.98,
                    gamma=0.999, n_epochs=4, ent_coef=0.01)),
    # Budget tasks (threshold None): judged on the return reached by the time cap.
    'sac_halfcheetah': dict(
        env_id='HalfCheetah-v5', threshold=None, eval_freq=10_000, cls=lambda: SAC,
        n_envs=1, n_timesteps=int(1e6),
        kwargs=dict(policy='MlpPolicy', learning_starts=10_000)),
    'ppo_halfcheetah': dict(
        env_id='HalfCheetah-v5', threshold=None, eval_freq=20_000, cls=lambda: PPO,
        n_envs=1, n_timesteps=int(1e6), normalize=dict(gamma=0.98),
        kwargs=dict(policy='MlpPolicy', batch_size=64, n_steps=512, gamma=0.98,
                    learning_rate=2.0633e-05, ent_coef=0.000401762, clip_range=0.1,
                    n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096,
                    policy_kwargs=dict(log_std_init=-2, ortho_init=False,
                                       activation_fn=nn.ReLU,
                                       net_arch=dict(pi=[256, 256], vf=[256, 256])))),
    'ppo_atari': dict(
        env_id='ALE/Pong-v5', threshold=None, eval_freq=20_000, returns='train',
        atari=True, cls=lambda: PPO, n_envs=8, n_timesteps=int(1e7),
        kwargs=dict(policy='CnnPolicy', n_steps=128, n_epochs=4, batch_size=256,
                    learning_rate=linear(2.5e-4), clip_range=linear(0.1), vf_coef=0.5,
                    ent_coef=0.01)),
    'dqn_atari': dict(
        env_id='ALE/Pong-v5', threshold=None, eval_freq=20_000, returns='train',
        atari=True, cls=lambda: DQN, n_envs=8, n_timesteps=int(1e7),
        kwargs=dict(policy='CnnPolicy', buffer_size=100_000, learning_rate=1e-4,
                    batch_size=32, learning_starts=100_000, target_update_interval=1000,
                    train_freq=1, gradient_steps=2, exploration_fraction=0.1,
                    exploration_final_eps=0.01, optimize_memory_usage=True,
                    replay_buffer_kwargs=dict(handle_timeout_termination=False))),
    'ppo_minigrid': dict(
        env_id='MiniGrid-DoorKey-5x5-v0', env=minigrid_doorkey, threshold=0.9,
        eval_freq=10_240, n_eval_episodes=20, cls=lambda: PPO, n_envs=8,
        n_timesteps=int(1e6), normalize=dict(gamma=0.99),
        kwargs=dict(policy='MlpPolicy', n_steps=128, batch_size=64, gae_lambda=0.95,
                    gamma=0.99, n_epochs=10, ent_coef=0.0, learning_rate=2.5e-4,
                    clip_range=0.2)),
}


class SolveCallback(BaseCallback):
  """EvalCallback-like: evaluates every `eval_freq` env steps, stops once solved.

  Keeps the training clock (started by `start_clock` right before `model.learn`) and
  the time spent inside evaluations, so that both can be reported. With
  `train_returns`, a history point is the training games' mean score instead of an
  evaluation (Atari); with no threshold, the run goes to the time cap and ends with a
  last point there.
  """

  def __init__(self, eval_env, eval_freq, n_eval_episodes, threshold, max_seconds,
               train_returns=False, max_env_steps=None, eval_seeds=None, confirm=None):
    """eval_seeds: evaluation k's env seed (sub-env i: it + i), or None to let the eval
    env's stream run on. confirm: (env, episodes, seeds) of the confirmation an
    evaluation at the threshold needs before the run counts as solved, or None."""
    super().__init__()
    self.max_env_steps = max_env_steps
    self.eval_env = eval_env
    self.eval_seeds = eval_seeds
    self.confirm = confirm
    self.confirmations = []
    self.eval_freq = eval_freq
    self.n_eval_episodes = n_eval_episodes
    self.threshold = threshold
    self.max_seconds = max_seconds
    self.train_returns = train_returns
    self.start = None
    self.next_eval = eval_freq
    self.eval_seconds = 0.0
    self.history = []
    self.solved_at = None  # (seconds, env_steps, mean_return)
    self.stopped_by = 'budget'

  def start_clock(self):
    self.start = time.perf_counter()

  def _record(self) -> float:
    """Adds a history point (an evaluation, or the training games' mean score)."""
    eval_start = time.perf_counter()
    if self.train_returns:
      scores = [info['r'] for info in self.model.ep_info_buffer]
      mean_return = float(np.mean(scores)) if scores else float('nan')
    else:
      seed = None if self.eval_seeds is None else self.eval_seeds(len(self.history))
      mean_return = self._evaluate(self.eval_env, self.n_eval_episodes, seed)
    now = time.perf_counter()
    self.eval_seconds += now - eval_start
    elapsed = now - self.start
    self.history.append({'env_steps': int(self.num_timesteps),
                         'eval_return': round(mean_return, 3),
                         'seconds': round(elapsed, 2)})
    kind = 'train return' if self.train_returns else 'eval return'
    print(f'env steps {self.num_timesteps:7d} | {kind} {mean_return:9.3f} | '
          f'{elapsed:6.1f} s', file=sys.stderr, flush=True)
    return mean_return

  def _evaluate(self, env, episodes, seed) -> float:
    """The mean return of `episodes` greedy episodes on `env`, reset with `seed`."""
    if isinstance(env, VecNormalize):
      # The training env's running statistics, frozen in the eval env (EvalCallback's
      # sync_envs_normalization); counted in the evaluation's time.
      sync_envs_normalization(self.training_env, env)
    if seed is not None:
      env.seed(seed)  # evaluate_policy's reset takes it: sub-env i gets seed + i
    returns, _ = evaluate_policy(self.model, env, n_eval_episodes=episodes,
                                 deterministic=True, return_episode_rewards=True)
    return float(np.mean(returns))

  def _confirmed(self) -> bool:
    """Whether a confirmation on fresh episodes repeats the threshold (True without a
    confirmation rule); its time counts as evaluation time."""
    if self.confirm is None:
      return True
    env, episodes, seeds = self.confirm
    start = time.perf_counter()
    mean_return = self._evaluate(env, episodes, seeds(len(self.confirmations)))
    self.eval_seconds += time.perf_counter() - start
    self.confirmations.append({'env_steps': int(self.num_timesteps),
                               'confirmation': round(mean_return, 3)})
    print(f'confirmation over {episodes} episodes: {mean_return:9.3f}', file=sys.stderr,
          flush=True)
    return mean_return >= self.threshold

  def _on_step(self) -> bool:
    if self.num_timesteps >= self.next_eval:
      # With n_envs > 1 one callback step adds n_envs env steps: evaluate once per
      # crossed multiple of eval_freq.
      while self.next_eval <= self.num_timesteps:
        self.next_eval += self.eval_freq
      mean_return = self._record()
      if (self.threshold is not None and mean_return >= self.threshold and
          self._confirmed()):
        self.solved_at = (time.perf_counter() - self.start, int(self.num_timesteps),
                          mean_return)
        self.stopped_by = 'solved'
        return False
    if self.max_env_steps and self.num_timesteps >= self.max_env_steps:
      # An equal-env-steps comparison: stop where the other side stops, with the
      # learning-rate schedule still the one over n_timesteps (RL-Zoo's).
      self.stopped_by = 'env-step cap'
      self._record()
      return False
    if time.perf_counter() - self.start > self.max_seconds:
      self.stopped_by = 'time cap'
      if self.threshold is None:
        self._record()  # the return at the wall-clock budget
      return False
    return True


def seconds_since_process_start() -> float:
  """Seconds since this process started (interpreter start and imports included), from
  /proc, as tfrl's programs measure their start-up."""
  with open('/proc/self/stat') as f:
    start_ticks = int(f.read().rsplit(')', 1)[1].split()[19])
  with open('/proc/uptime') as f:
    return float(f.read().split()[0]) - start_ticks / os.sysconf('SC_CLK_TCK')


def versions(model) -> dict:
  found = {'stable_baselines3': stable_baselines3.__version__,
           'torch': torch.__version__, 'gymnasium': gymnasium.__version__,
           'python': platform.python_version()}
  if type(model).__module__.startswith('sb3_contrib'):
    import sb3_contrib  # pylint: disable=g-import-not-at-top
    found['sb3_contrib'] = sb3_contrib.__version__
  return found


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--algo', choices=sorted(HYPERPARAMS), required=True)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--eval_freq', type=int, default=None,
                      help='env steps between evaluations (default: 5000; SAC 1000)')
  parser.add_argument('--n_eval_episodes', type=int, default=None,
                      help='episodes per evaluation (default: the task\'s, else 10)')
  parser.add_argument('--eval_envs', type=int, default=None,
                      help="eval env copies (default: min(episodes, 10), tfrl's count; "
                      "RL-Zoo's EvalCallback has 1)")
  parser.add_argument('--confirm_episodes', type=int, default=None,
                      help='solved only once the mean over this many fresh episodes (the '
                      "confirmation seed stream) repeats an evaluation's threshold "
                      '(default: no confirmation)')
  parser.add_argument('--max_seconds', type=float, default=480.0,
                      help='training time cap (s)')
  parser.add_argument('--max_env_steps', type=int, default=0,
                      help='stop once this many env steps are done (0: no cap); '
                      'the schedules still span the task\'s n_timesteps')
  parser.add_argument('--torch_threads', type=int, default=0,
                      help="torch intra-op threads (0: torch's default, one per core)")
  parser.add_argument('--env_id', default=None,
                      help="the Atari game for ppo_atari / dqn_atari (default ALE/Pong-v5)")
  return parser


def make_envs(params, collect_seed, eval_envs, confirm_episodes):
  """The training envs (seeded from tfrl's collect stream), the eval envs and the
  confirmation's envs (None without a confirmation; both None for Atari, judged on the
  training games), VecNormalize'd as RL-Zoo's entry says (the eval envs frozen, raw
  rewards)."""
  if params.get('atari'):
    return make_atari_envs(params['env_id'], params['n_envs'], collect_seed), None, None
  make_env = params.get('env', params['env_id'])
  env = make_vec_env(make_env, n_envs=params['n_envs'], seed=collect_seed)
  eval_env = make_vec_env(make_env, n_envs=eval_envs)
  confirm_env = (make_vec_env(make_env, n_envs=min(confirm_episodes, 10))
                 if confirm_episodes else None)
  normalize = params.get('normalize')
  if normalize is None:
    return env, eval_env, confirm_env
  # RL-Zoo's eval env: no reward normalization, statistics not updated.
  frozen = dict(normalize, training=False, norm_reward=False)
  return (VecNormalize(env, **normalize), VecNormalize(eval_env, **frozen),
          None if confirm_env is None else VecNormalize(confirm_env, **frozen))


def main():
  parser = _parser()
  args = parser.parse_args()
  if args.torch_threads:
    torch.set_num_threads(args.torch_threads)

  params = dict(HYPERPARAMS[args.algo])
  if args.env_id:
    if not params.get('atari'):
      parser.error(f'--env_id is for the Atari algorithms, not {args.algo}')
    params['env_id'] = args.env_id
  eval_freq = args.eval_freq or params['eval_freq']
  load_start = os.getloadavg()
  train_returns = params.get('returns') == 'train'
  # The env seeds tfrl's jobs draw for this experiment seed (tfrl.seeding): the
  # collect envs' and the evaluations' streams, which no two experiment seeds share.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import tfrl_leaves  # pylint: disable=g-import-not-at-top (benchmarks/tfrl_leaves.py)
  seeding = tfrl_leaves.load('seeding')  # numpy only: this venv has no TensorFlow
  collect_seed = seeding.derive(args.seed, seeding.COLLECT, 0)
  n_eval_episodes = args.n_eval_episodes or params.get('n_eval_episodes', 10)
  eval_envs = args.eval_envs or min(n_eval_episodes, 10)

  def stream(first):
    """Evaluation k's seed, as tfrl.actors.Evaluator draws it."""
    return lambda k: seeding.evaluation_seed(first, k)
  env, eval_env, confirm_env = make_envs(params, collect_seed, eval_envs,
                                         args.confirm_episodes)
  model = params['cls']()(env=env, seed=args.seed, verbose=0, device='cpu',
                          **params['kwargs'])
  # The model's seed (torch, numpy, the action space) also re-seeds its env with
  # seed + i (SB3's set_random_seed): give the envs their stream back.
  model.get_env().seed(collect_seed)
  confirm = (None if confirm_env is None else
             (confirm_env, args.confirm_episodes,
              stream(seeding.derive(args.seed, seeding.CONFIRM))))
  callback = SolveCallback(eval_env, eval_freq, n_eval_episodes, params['threshold'],
                           args.max_seconds, train_returns=train_returns,
                           max_env_steps=args.max_env_steps,
                           eval_seeds=stream(seeding.derive(args.seed, seeding.EVALUATE)),
                           confirm=confirm)
  startup_seconds = seconds_since_process_start()
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
      'startup_seconds': round(startup_seconds, 2),
      'env_steps': env_steps,
      'eval_return': last_return,
      'threshold': params['threshold'],
      'algo_class': type(model).__name__,
      'normalize': params.get('normalize') is not None,
      'returns': 'train' if train_returns else 'eval',
      'stopped_by': callback.stopped_by,
      'seconds_include_eval': True,
      'eval_seconds': round(callback.eval_seconds, 2),
      'seconds_excluding_eval': round(seconds - callback.eval_seconds, 2),
      'evals': len(callback.history),
      'eval_freq': eval_freq,
      'eval_envs': eval_envs,
      # As benchmarks/tasks.Protocol writes it: solve_time.py compares only runs whose
      # protocols agree.
      'protocol': ({'returns': 'train', 'eval_every_env_steps': None, 'eval_episodes': None,
                    'confirm_episodes': None, 'seeds': 'tfrl.seeding'} if train_returns else
                   {'returns': 'eval', 'eval_every_env_steps': eval_freq,
                    'eval_episodes': n_eval_episodes,
                    'confirm_episodes': args.confirm_episodes, 'seeds': 'tfrl.seeding'}),
      'confirmations': callback.confirmations,
      'n_timesteps_budget': params['n_timesteps'],
      'history': callback.history,
      'load_start': [round(x, 2) for x in load_start],
      'load_end': [round(x, 2) for x in os.getloadavg()],
      'versions': versions(model),
      'torch_threads': torch.get_num_threads(),
  }), flush=True)


if __name__ == '__main__':
  main()

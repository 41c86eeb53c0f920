"""Env factories for tests, named as 'task_envs:<function>': a second CartPole task for
task-sequence tests, and a CartPole that tells when an evaluation begins."""
import threading

import gymnasium as gym

from tfrl import seeding


def long_pole_cartpole(**kwargs) -> gym.Env:
  """CartPole with a pole twice as long: the same specs, other dynamics."""
  env = gym.make('CartPole-v1', **kwargs)
  env.unwrapped.length *= 2.0
  env.unwrapped.polemass_length = env.unwrapped.masspole * env.unwrapped.length
  return env


# Set by `cartpole_flagging_evaluations` envs when an evaluation resets them: a test
# passes it as a job's stop event to stop the job in the middle of an evaluation.
EVALUATION_STARTED = threading.Event()
# A seed-0 Experiment's eval envs: sub-env i resets with this + i (tfrl.seeding).
EVAL_SEED = seeding.derive(0, seeding.EVALUATE)


class _FlagEvaluations(gym.Wrapper):
  """Sets EVALUATION_STARTED at its second reset with an eval seed: the first is the
  eval env's own when it is made, the next an Evaluator's."""

  def __init__(self, env: gym.Env):
    super().__init__(env)
    self._eval_resets = 0

  def reset(self, *, seed=None, options=None):
    if seed is not None and 0 <= seed - EVAL_SEED < 16:
      self._eval_resets += 1
      if self._eval_resets >= 2:
        EVALUATION_STARTED.set()
    return super().reset(seed=seed, options=options)


def cartpole_flagging_evaluations(**kwargs) -> gym.Env:
  """CartPole-v1 that sets EVALUATION_STARTED when an evaluation resets it."""
  return _FlagEvaluations(gym.make('CartPole-v1', **kwargs))

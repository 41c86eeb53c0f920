"""What a one-process job returns: its result figures, and the policy it trained to act
with, as a Stable-Baselines3 user holds a model after `learn()`."""
import functools
from typing import Any, Tuple

from tfrl import export


class TrainingResult(dict):
  """The figures of a finished job (a dict: train_step, env_steps, eval_return,
  reached_target, greedy_policy_dir, history, ...; see `learners.train_eval`) and its
  exported policy.

      result = train_eval.run('runs/cartpole', ['dqn_cartpole.gin'])
      action, state = result.predict(observation)                  # greedy
      action, state = result.predict(observation, deterministic=False)  # sampled
  """

  @property
  def policy_dir(self) -> str:
    """The greedy policy's SavedModel directory (the collect policy's is beside it)."""
    return self['greedy_policy_dir']

  @functools.cached_property
  def policy(self) -> export.ExportedPolicy:
    """The exported greedy policy, loaded on first use (`tfrl.export.load_policy`)."""
    return export.load_policy(self.policy_dir)

  def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
              deterministic: bool = True) -> Tuple[Any, Any]:
    """Acts with the trained policy on numpy observations: see
    `tfrl.export.ExportedPolicy.predict` (its Args, Returns and Raises)."""
    return self.policy.predict(observation, state, episode_start, deterministic)

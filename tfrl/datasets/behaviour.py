"""Behaviour policies for recording datasets: a policy with added exploration.

Offline-RL datasets are rarely a single greedy policy's episodes: D4RL's "medium" and
"mixed" sets come from noisy or epsilon-greedy policies. `NoisyPolicy` wraps any policy
with the `action` / `get_initial_state` / specs API (an exported policy, a tf-agents
policy) and perturbs its actions in-graph, so an `Actor` or `Evaluator` compiles it as
it compiles the policy itself.
"""
from typing import Any, Optional

import tensorflow as tf
from tf_agents.trajectories import policy_step as policy_step_lib


class NoisyPolicy:
  """`policy` with exploration: for discrete actions a uniformly random action with
  probability `noise`; for continuous ones Gaussian noise of standard deviation `noise`
  times the action range's half-width, clipped to the range."""

  def __init__(self, policy: Any, noise: float, seed: Optional[int] = None):
    """Args:
      policy: any policy with `action(time_step, state)`, `get_initial_state(n)`,
        `time_step_spec`, `action_spec` and `policy_state_spec`.
      noise: epsilon (discrete) or the noise's scale (continuous), >= 0.
      seed: seeds the noise.

    Raises:
      ValueError: a negative `noise`, an epsilon above 1, or an action spec that is
        not a single bounded tensor.
    """
    spec = policy.action_spec
    if tf.nest.is_nested(spec) or not hasattr(spec, 'minimum'):
      raise ValueError('NoisyPolicy takes a single bounded action (a tf-agents '
                       f'BoundedTensorSpec), not {spec}.')
    self.discrete = spec.dtype.is_integer
    if noise < 0 or (self.discrete and noise > 1):
      raise ValueError(f'noise = {noise}: an epsilon in [0, 1] for discrete actions, a '
                       'scale >= 0 for continuous ones.')
    self._policy, self.noise = policy, float(noise)
    self.time_step_spec, self.action_spec = policy.time_step_spec, spec
    self.policy_state_spec = policy.policy_state_spec
    self._rng = (tf.random.Generator.from_seed(seed) if seed is not None
                 else tf.random.Generator.from_non_deterministic_state())

  def get_initial_state(self, batch_size: int) -> Any:
    return self._policy.get_initial_state(batch_size)

  def action(self, time_step, policy_state=()) -> policy_step_lib.PolicyStep:
    step = self._policy.action(time_step, policy_state)
    action, spec = step.action, self.action_spec
    low = tf.cast(tf.broadcast_to(spec.minimum, spec.shape), action.dtype)
    high = tf.cast(tf.broadcast_to(spec.maximum, spec.shape), action.dtype)
    if self.discrete:
      shape = tf.shape(action)
      random = self._rng.uniform(shape, 0, 2**31 - 1, dtype=tf.int64)
      random = tf.cast(low, tf.int64) + random % tf.cast(high - low + 1, tf.int64)
      explore = self._rng.uniform(shape) < self.noise
      action = tf.where(explore, tf.cast(random, action.dtype), action)
    else:
      noise = self._rng.normal(tf.shape(action), dtype=action.dtype)
      action = tf.clip_by_value(action + self.noise * (high - low) / 2 * noise, low, high)
    return step._replace(action=action)

"""Generalized advantage estimation and reward clipping, time-major `[T, B]`.

`discounts[t]` is the discount applied after step t: gamma on ordinary steps, 0 after a
terminal step, gamma again after a truncated (time-limit) step, where the value of the
final observation is the bootstrap. GAE stops at episode ends through these discounts
alone. `clip_rewards` is the reward clipping applied before it (and before V-trace).
"""
import tensorflow as tf

REWARD_CLIPPING = ('none', 'abs_one', 'soft_asymmetric')


def check_reward_clipping(mode: str) -> None:
  """Raises a one-line ValueError unless `mode` is one of REWARD_CLIPPING."""
  if mode not in REWARD_CLIPPING:
    raise ValueError(f'reward_clipping must be one of {REWARD_CLIPPING}, got {mode!r}.')


def clip_rewards(rewards, mode: str):
  """IMPALA's reward clipping (Espeholt et al. 2018, section 5.3).

  Args:
    rewards: rewards of any shape.
    mode: 'none'; 'abs_one', clipped to [-1, 1] (Atari's usual clipping: Breakout's 1,
      4 and 7 points all become 1); 'soft_asymmetric', 5 tanh(r / 5) with negative
      rewards scaled by 0.3.

  Returns:
    The clipped rewards, float32, of the same shape.

  Raises:
    ValueError: an unknown mode.
  """
  check_reward_clipping(mode)
  rewards = tf.convert_to_tensor(rewards, tf.float32)
  if mode == 'abs_one':
    return tf.clip_by_value(rewards, -1.0, 1.0)
  if mode == 'soft_asymmetric':
    squeezed = tf.tanh(rewards / 5.0)
    return tf.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
  return rewards


def generalized_advantage_estimation(rewards, discounts, values, bootstrap_value,
                                     lambda_=0.95, valid=None):
  """GAE(lambda) advantages and the matching value targets (advantages + values).

  A_t = sum_k (prod_{j<k} lambda d_{t+j}) delta_{t+k},
  delta_t = r_t + d_t V(x_{t+1}) - V(x_t).

  Args:
    rewards: [T, B] rewards after each step.
    discounts: [T, B] discounts after each step.
    values: [T, B] V(x_t).
    bootstrap_value: [B] V(x_T).
    lambda_: the GAE lambda.
    valid: optional [T, B] 0/1 mask of steps that are experience. A step with 0 (an
      episode boundary LAST -> FIRST) gets delta 0, and its discount must be 0 too, so
      nothing flows across it; V(x_t) of such a step still bootstraps the step before
      (a truncated episode's last value).

  Returns:
    (advantages [T, B], returns [T, B]), without gradients.
  """
  rewards = tf.convert_to_tensor(rewards, tf.float32)
  discounts = tf.convert_to_tensor(discounts, tf.float32)
  values = tf.stop_gradient(tf.convert_to_tensor(values, tf.float32))
  bootstrap_value = tf.stop_gradient(tf.convert_to_tensor(bootstrap_value, tf.float32))
  next_values = tf.concat([values[1:], bootstrap_value[None]], axis=0)
  deltas = rewards + discounts * next_values - values
  if valid is not None:
    deltas *= tf.cast(valid, tf.float32)
  advantages = tf.scan(lambda acc, x: x[0] + lambda_ * x[1] * acc, (deltas, discounts),
                       initializer=tf.zeros_like(bootstrap_value), reverse=True)
  return tf.stop_gradient(advantages), tf.stop_gradient(advantages + values)

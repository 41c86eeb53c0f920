"""GAE against independent numpy loops (n-step returns among them) and small hand cases.

Conventions (tfrl.losses.returns): time-major [T, B]; `discounts[t]` is the discount
applied after step t (gamma, 0 after a terminal step, gamma again after a truncated
time-limit step); `bootstrap_value` [B] is V(x_T).
"""
import numpy as np
import pytest
import tensorflow as tf

from tfrl.losses import returns as returns_lib

T, B = 7, 3


def _random_inputs(seed, length=T, batch=B):
  rng = np.random.default_rng(seed)
  rewards = rng.normal(size=(length, batch))
  discounts = 0.95 * rng.uniform(0.8, 1.0, size=(length, batch))
  discounts[rng.uniform(size=(length, batch)) < 0.2] = 0.0
  discounts[2, 0] = 0.0  # Certainly an episode end mid-sequence ...
  discounts[length - 1, 1] = 0.0  # ... and one on the last step.
  values = rng.normal(size=(length, batch))
  bootstrap_value = rng.normal(size=(batch,))
  return tuple(x.astype(np.float32) for x in (rewards, discounts, values,
                                              bootstrap_value))


def _n_step_reference(rewards, discounts, values, bootstrap_value, n):
  """A plain loop over t and k, in float64."""
  rewards, discounts, values = (np.asarray(x, np.float64)
                                for x in (rewards, discounts, values))
  bootstrap_value = np.asarray(bootstrap_value, np.float64)
  length, batch = rewards.shape
  out = np.zeros((length, batch))
  for b in range(batch):
    for t in range(length):
      total, scale = 0.0, 1.0
      for k in range(n):
        if t + k >= length:  # The sequence ran out before n steps.
          break
        total += scale * rewards[t + k, b]
        scale *= discounts[t + k, b]
      end = min(t + n, length)
      next_value = bootstrap_value[b] if end == length else values[end, b]
      out[t, b] = total + scale * next_value
  return out


@pytest.mark.parametrize('lambda_, n', [(0.0, 1), (1.0, T), (1.0, 10)])
def test_gae_value_targets_at_lambda_0_and_1_are_n_step_returns(lambda_, n):
  """GAE(0) bootstraps after one step, GAE(1) only at the sequence's end (any n >= T)."""
  rewards, discounts, values, bootstrap_value = _random_inputs(seed=n)
  _, value_targets = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=lambda_)
  expected = _n_step_reference(rewards, discounts, values, bootstrap_value, n)
  assert value_targets.shape == (T, B)
  np.testing.assert_allclose(value_targets.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_gae_lambda_1_hand_case_stops_at_a_terminal():
  """T=4, B=1, lambda=1, a terminal step at t=1 (discount 0).

  r = [1, 2, 3, 4], d = [0.5, 0, 0.5, 0.5], V = [10, 20, 30, 40], V(x_T) = 8:
    G_0 = 1 + 0.5 * 2 + 0.5 * 0 * (...)         = 2     (the terminal stops the sum)
    G_1 = 2 + 0 * (...)                           = 2
    G_2 = 3 + 0.5 * 4 + 0.25 * V(x_T)       = 5 + 2 = 7
    G_3 = 4 + 0.5 * V(x_T)                        = 8
  """
  _, value_targets = returns_lib.generalized_advantage_estimation(
      rewards=np.array([[1.0], [2.0], [3.0], [4.0]], np.float32),
      discounts=np.array([[0.5], [0.0], [0.5], [0.5]], np.float32),
      values=np.array([[10.0], [20.0], [30.0], [40.0]], np.float32),
      bootstrap_value=np.array([8.0], np.float32), lambda_=1.0)
  np.testing.assert_allclose(value_targets.numpy(), [[2.0], [2.0], [7.0], [8.0]],
                             rtol=1e-6)


@pytest.mark.parametrize('lambda_', [0.95, 1.0])
def test_zero_discount_stops_the_sum(lambda_):
  """Rewards, values and the bootstrap after a terminal step do not reach earlier A_t."""
  rewards, discounts, values, bootstrap_value = _random_inputs(seed=5)
  discounts[2, :] = 0.0
  base, _ = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=lambda_)
  rewards2, values2 = rewards.copy(), values.copy()
  rewards2[3:] += 100.0
  values2[3:] += 50.0
  other, _ = returns_lib.generalized_advantage_estimation(
      rewards2, discounts, values2, bootstrap_value + 100.0, lambda_=lambda_)
  np.testing.assert_allclose(other.numpy()[:3], base.numpy()[:3], rtol=1e-5, atol=1e-5)
  assert not np.allclose(other.numpy()[3:], base.numpy()[3:])


def _deltas(rewards, discounts, values, bootstrap_value):
  rewards, discounts, values = (np.asarray(x, np.float64)
                                for x in (rewards, discounts, values))
  next_values = np.concatenate(
      [values[1:], np.asarray(bootstrap_value, np.float64)[None]], axis=0)
  return rewards + discounts * next_values - values


def _gae_backward(rewards, discounts, values, bootstrap_value, lambda_):
  """A_t = delta_t + lambda d_t A_{t+1}, A_T = 0."""
  deltas = _deltas(rewards, discounts, values, bootstrap_value)
  discounts = np.asarray(discounts, np.float64)
  advantages = np.zeros_like(deltas)
  acc = np.zeros(deltas.shape[1])
  for t in reversed(range(deltas.shape[0])):
    acc = deltas[t] + lambda_ * discounts[t] * acc
    advantages[t] = acc
  return advantages


def _gae_direct_sum(rewards, discounts, values, bootstrap_value, lambda_):
  """A_t = sum_{k>=0} (prod_{j<k} lambda d_{t+j}) delta_{t+k}, an O(T^2) double loop."""
  deltas = _deltas(rewards, discounts, values, bootstrap_value)
  length = deltas.shape[0]
  advantages = np.zeros_like(deltas)
  for t in range(length):
    for k in range(length - t):
      weight = np.prod(lambda_ * np.asarray(discounts[t:t + k], np.float64), axis=0)
      advantages[t] += weight * deltas[t + k]
  return advantages


def _discounted_return(rewards, discounts, bootstrap_value):
  """Monte Carlo return to the end of the sequence, bootstrapped with V(x_T)."""
  length = rewards.shape[0]
  out = np.zeros(rewards.shape)
  for t in range(length):
    total, scale = 0.0, 1.0
    for k in range(t, length):
      total = total + scale * np.float64(rewards[k])
      scale = scale * np.float64(discounts[k])
    out[t] = total + scale * np.float64(bootstrap_value)
  return out


@pytest.mark.parametrize('lambda_', [0.0, 0.5, 0.95, 1.0])
def test_gae_matches_recursion_and_direct_sum(lambda_):
  rewards, discounts, values, bootstrap_value = _random_inputs(seed=21)
  advantages, value_targets = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=lambda_)
  backward = _gae_backward(rewards, discounts, values, bootstrap_value, lambda_)
  direct = _gae_direct_sum(rewards, discounts, values, bootstrap_value, lambda_)
  np.testing.assert_allclose(backward, direct, rtol=1e-10, atol=1e-10)
  assert advantages.shape == (T, B)
  np.testing.assert_allclose(advantages.numpy(), backward, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(advantages.numpy(), direct, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(value_targets.numpy(), backward + values, rtol=1e-5,
                             atol=1e-5)


def test_gae_default_lambda_is_0_95():
  inputs = _random_inputs(seed=22)
  advantages, _ = returns_lib.generalized_advantage_estimation(*inputs)
  np.testing.assert_allclose(advantages.numpy(), _gae_backward(*inputs, 0.95),
                             rtol=1e-5, atol=1e-5)


def test_gae_lambda_1_is_monte_carlo_with_bootstrap():
  rewards, discounts, values, bootstrap_value = _random_inputs(seed=23)
  advantages, value_targets = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=1.0)
  mc = _discounted_return(rewards, discounts, bootstrap_value)
  np.testing.assert_allclose(advantages.numpy(), mc - values, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(value_targets.numpy(), mc, rtol=1e-5, atol=1e-5)


def test_gae_lambda_0_is_one_step_td_error():
  rewards, discounts, values, bootstrap_value = _random_inputs(seed=24)
  advantages, value_targets = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=0.0)
  deltas = _deltas(rewards, discounts, values, bootstrap_value)
  np.testing.assert_allclose(advantages.numpy(), deltas, rtol=1e-5, atol=1e-6)
  # The matching value target is the one-step TD target r_t + d_t V(x_{t+1}).
  next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
  np.testing.assert_allclose(value_targets.numpy(), rewards + discounts * next_values,
                             rtol=1e-5, atol=1e-5)


def test_gae_returns_equal_advantages_plus_values():
  rewards, discounts, values, bootstrap_value = _random_inputs(seed=25)
  advantages, value_targets = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=0.8)
  np.testing.assert_allclose(value_targets.numpy(), advantages.numpy() + values,
                             rtol=1e-6, atol=1e-6)


def test_gae_hand_case():
  """T=2, B=1, gamma=0.5, lambda=0.5: r = [1, 2], V = [1, 2], V(x_T) = 4.

    delta_1 = 2 + 0.5 * 4 - 2 = 2
    delta_0 = 1 + 0.5 * 2 - 1 = 1
    A_1 = 2,   A_0 = delta_0 + 0.5 * 0.5 * A_1 = 1.5
    returns = A + V = [2.5, 4]
  """
  advantages, value_targets = returns_lib.generalized_advantage_estimation(
      rewards=np.array([[1.0], [2.0]], np.float32),
      discounts=np.array([[0.5], [0.5]], np.float32),
      values=np.array([[1.0], [2.0]], np.float32),
      bootstrap_value=np.array([4.0], np.float32), lambda_=0.5)
  np.testing.assert_allclose(advantages.numpy(), [[1.5], [2.0]], rtol=1e-6)
  np.testing.assert_allclose(value_targets.numpy(), [[2.5], [4.0]], rtol=1e-6)


def test_gae_no_gradients():
  rewards, discounts, values, bootstrap_value = _random_inputs(seed=26)
  rewards = tf.Variable(rewards)
  values = tf.Variable(values)
  bootstrap_value = tf.Variable(bootstrap_value)
  with tf.GradientTape(persistent=True) as tape:
    advantages, value_targets = returns_lib.generalized_advantage_estimation(
        rewards, discounts, values, bootstrap_value)
    total = tf.reduce_sum(advantages) + tf.reduce_sum(value_targets)
  for source in (rewards, values, bootstrap_value):
    assert tape.gradient(total, source) is None


def test_truncation_bootstraps_termination_does_not():
  """The last step of the sequence ends an episode; gamma = 1 for readability.

  r = [1, 1], V = [0, 0] and the value of the final observation V(x_T) = 10.
  - Terminated (discount 0 after the last step): no future beyond the episode,
        G = [1 + 1, 1] = [2, 1].
  - Truncated by a time limit (BatchedEnv: LAST with discount 1): the state at the
    cut-off is not terminal, so the return keeps going through V(x_T):
        G = [1 + 1 + 10, 1 + 10] = [12, 11].
  GAE with lambda = 1 gives these (as n-step returns with n >= 2 would); with
  lambda = 0 the truncated step's TD error delta_1 = 1 + 1 * 10 - 0 still bootstraps.
  """
  rewards = np.array([[1.0, 1.0], [1.0, 1.0]], np.float32)  # B=2: [terminated, truncated]
  discounts = np.array([[1.0, 1.0], [0.0, 1.0]], np.float32)
  values = np.zeros((2, 2), np.float32)
  bootstrap_value = np.array([10.0, 10.0], np.float32)
  expected = np.array([[2.0, 12.0], [1.0, 11.0]])

  _, gae_returns = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=1.0)
  np.testing.assert_allclose(gae_returns.numpy(), expected, rtol=1e-6)
  td_errors, _ = returns_lib.generalized_advantage_estimation(
      rewards, discounts, values, bootstrap_value, lambda_=0.0)
  np.testing.assert_allclose(td_errors.numpy()[1], [1.0, 11.0], rtol=1e-6)


# -- Reward clipping ----------------------------------------------------------------

def test_clip_rewards_modes():
  rewards = np.array([-20.0, -3.0, -1.5, -0.5, 0.0, 0.5, 1.5, 3.0, 20.0], np.float32)
  np.testing.assert_array_equal(
      returns_lib.clip_rewards(tf.constant(rewards), 'none').numpy(), rewards)
  np.testing.assert_array_equal(
      returns_lib.clip_rewards(tf.constant(rewards), 'abs_one').numpy(),
      [-1, -1, -1, -0.5, 0, 0.5, 1, 1, 1])
  expected = 5.0 * np.tanh(rewards / 5.0) * np.where(rewards < 0, 0.3, 1.0)
  np.testing.assert_allclose(
      returns_lib.clip_rewards(tf.constant(rewards), 'soft_asymmetric').numpy(), expected,
      rtol=1e-6)
  with pytest.raises(ValueError, match='reward_clipping'):
    returns_lib.clip_rewards(tf.constant(rewards), 'sign')

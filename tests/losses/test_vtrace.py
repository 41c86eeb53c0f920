"""V-trace against an independent numpy evaluation of the IMPALA paper's sum formula.

Espeholt et al. 2018, arXiv:1802.01561, eq. 1, with per-step discounts gamma_t:

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i) (prod_{i=s}^{t-1} c_i) d_t V
    d_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),   V(x_T) = bootstrap_value
    rho_t = min(rho_bar, pi/mu),   c_i = lambda * min(1, pi/mu)   (c_bar = 1 here)

The reference below evaluates that double sum directly (O(T^2)); the implementation uses
a backward recursion, so the two share no code.
"""
import itertools

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec

from tfrl.losses import vtrace
from tfrl.networks import action_heads


def _vtrace_reference(log_rhos, discounts, rewards, values, bootstrap_value,
                      clip_rho_threshold, clip_pg_rho_threshold, lambda_):
  """Direct evaluation of eq. 1 and of the policy-gradient advantage, in float64."""
  log_rhos, discounts, rewards, values = (
      np.asarray(x, np.float64) for x in (log_rhos, discounts, rewards, values))
  bootstrap_value = np.asarray(bootstrap_value, np.float64)
  length = log_rhos.shape[0]
  rhos = np.exp(log_rhos)
  clipped_rhos = rhos if clip_rho_threshold is None else np.minimum(
      clip_rho_threshold, rhos)
  cs = lambda_ * np.minimum(1.0, rhos)
  values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)  # [T+1, B]

  vs = np.zeros_like(values)
  for s in range(length):
    total = values[s].copy()
    for t in range(s, length):
      discount_prod = np.prod(discounts[s:t], axis=0)  # empty product = 1
      c_prod = np.prod(cs[s:t], axis=0)
      delta = clipped_rhos[t] * (
          rewards[t] + discounts[t] * values_ext[t + 1] - values_ext[t])
      total = total + discount_prod * c_prod * delta
    vs[s] = total

  vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
  clipped_pg_rhos = rhos if clip_pg_rho_threshold is None else np.minimum(
      clip_pg_rho_threshold, rhos)
  pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_ext[1:] - values)
  return vs, pg_advantages


def _random_inputs(rng, length, batch):
  # Log-rhos spread on both sides of 0, so some rhos are > 1 (clipped) and some < 1.
  log_rhos = rng.uniform(-1.5, 1.5, size=(length, batch))
  log_rhos[0, 0], log_rhos[1, 0] = 1.0, -1.0  # Certainly one of each.
  discounts = np.full((length, batch), 0.9)
  discounts *= rng.uniform(0.8, 1.0, size=(length, batch))
  discounts[rng.uniform(size=(length, batch)) < 0.2] = 0.0
  discounts[length // 2, 0] = 0.0  # Certainly one episode end.
  rewards = rng.normal(size=(length, batch))
  values = rng.normal(size=(length, batch))
  bootstrap_value = rng.normal(size=(batch,))
  return tuple(x.astype(np.float32)
               for x in (log_rhos, discounts, rewards, values, bootstrap_value))


_CASES = list(itertools.product([1, 5], [1.0, None], [1.0, None], [1.0, 0.9]))


@pytest.mark.parametrize('batch,clip_rho,clip_pg_rho,lambda_', _CASES)
def test_from_importance_weights_matches_sum_formula(batch, clip_rho, clip_pg_rho,
                                                     lambda_):
  rng = np.random.default_rng(1234 + batch)
  log_rhos, discounts, rewards, values, bootstrap_value = _random_inputs(rng, 7, batch)
  assert (np.exp(log_rhos) > 1).any() and (np.exp(log_rhos) < 1).any()
  assert (discounts == 0).any()

  result = vtrace.from_importance_weights(
      log_rhos, discounts, rewards, values, bootstrap_value,
      clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho, lambda_=lambda_)
  expected_vs, expected_pg = _vtrace_reference(
      log_rhos, discounts, rewards, values, bootstrap_value, clip_rho, clip_pg_rho,
      lambda_)

  assert result.vs.shape == (7, batch)
  assert result.pg_advantages.shape == (7, batch)
  np.testing.assert_allclose(result.vs.numpy(), expected_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(result.pg_advantages.numpy(), expected_pg, rtol=1e-5,
                             atol=1e-5)


def test_reference_is_not_trivially_clip_insensitive():
  """Guards the parametrisation above: the clip thresholds do change the result."""
  rng = np.random.default_rng(7)
  inputs = _random_inputs(rng, 7, 5)
  clipped = vtrace.from_importance_weights(*inputs, clip_rho_threshold=1.0,
                                           clip_pg_rho_threshold=1.0)
  unclipped = vtrace.from_importance_weights(*inputs, clip_rho_threshold=None,
                                             clip_pg_rho_threshold=None)
  assert not np.allclose(clipped.vs.numpy(), unclipped.vs.numpy())
  assert not np.allclose(clipped.pg_advantages.numpy(), unclipped.pg_advantages.numpy())


def test_on_policy_tiny_case_is_discounted_return():
  """T=2, B=1, rhos = 1 (on-policy): v_s is the bootstrapped discounted return.

  r = [1, 2], gamma = [0.5, 0.5], V(x_T) = 4:
    v_1 = 2 + 0.5 * 4 = 4
    v_0 = 1 + 0.5 * 2 + 0.25 * 4 = 3
  pg_advantage_s = r_s + gamma_s v_{s+1} - V(x_s), with V = [10, 20]:
    A_0 = 1 + 0.5 * 4 - 10 = -7,   A_1 = 2 + 0.5 * 4 - 20 = -16
  """
  result = vtrace.from_importance_weights(
      log_rhos=np.zeros((2, 1), np.float32),
      discounts=np.full((2, 1), 0.5, np.float32),
      rewards=np.array([[1.0], [2.0]], np.float32),
      values=np.array([[10.0], [20.0]], np.float32),
      bootstrap_value=np.array([4.0], np.float32))
  np.testing.assert_allclose(result.vs.numpy(), [[3.0], [4.0]], rtol=1e-6)
  np.testing.assert_allclose(result.pg_advantages.numpy(), [[-7.0], [-16.0]],
                             rtol=1e-6)


def _np_log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _random_logits_inputs(rng, length=7, batch=5, num_actions=4):
  behaviour_logits = rng.normal(size=(length, batch, num_actions)).astype(np.float32)
  target_logits = rng.normal(size=(length, batch, num_actions)).astype(np.float32)
  actions = rng.integers(0, num_actions, size=(length, batch)).astype(np.int32)
  _, discounts, rewards, values, bootstrap_value = _random_inputs(rng, length, batch)
  return (behaviour_logits, target_logits, actions, discounts, rewards, values,
          bootstrap_value)


def _categorical_head(num_actions):
  spec = tensor_spec.BoundedTensorSpec((), tf.int32, 0, num_actions - 1)
  return action_heads.CategoricalHead(spec, lambda units, gain: tf.keras.layers.Dense(units))


def _agent_log_rhos(head, behaviour_logits, target_logits, actions):
  """log pi/mu of the taken actions as ImpalaAgent's loss takes them: from its head.

  Returns:
    (log_rhos, target log-probs, behaviour log-probs).
  """
  target = head.log_prob({action_heads.LOGITS: target_logits}, actions, {})
  behaviour = head.log_prob({action_heads.LOGITS: behaviour_logits}, actions, {})
  return target - behaviour, target, behaviour


@pytest.mark.parametrize('clip_rho,lambda_', [(1.0, 1.0), (None, 0.9)])
def test_vtrace_of_head_log_rhos_matches_sum_formula(clip_rho, lambda_):
  """The agent's path from two policies' logits to V-trace targets: the categorical
  head's log-probabilities of the taken actions, their difference as log-rhos, then
  `from_importance_weights`, against numpy's log-softmax and the sum formula."""
  rng = np.random.default_rng(99)
  (behaviour_logits, target_logits, actions, discounts, rewards, values,
   bootstrap_value) = _random_logits_inputs(rng)

  def taken(log_probs):
    return np.take_along_axis(log_probs, actions[..., None], axis=-1)[..., 0]

  expected_target = taken(_np_log_softmax(target_logits))
  expected_behaviour = taken(_np_log_softmax(behaviour_logits))
  expected_log_rhos = expected_target - expected_behaviour

  log_rhos, target_log_probs, behaviour_log_probs = _agent_log_rhos(
      _categorical_head(target_logits.shape[-1]), behaviour_logits, target_logits,
      actions)
  result = vtrace.from_importance_weights(
      log_rhos, discounts, rewards, values, bootstrap_value,
      clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_rho, lambda_=lambda_)
  expected_vs, expected_pg = _vtrace_reference(
      expected_log_rhos, discounts, rewards, values, bootstrap_value, clip_rho,
      clip_rho, lambda_)

  np.testing.assert_allclose(log_rhos.numpy(), expected_log_rhos, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(target_log_probs.numpy(), expected_target, rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(behaviour_log_probs.numpy(), expected_behaviour, rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(result.vs.numpy(), expected_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(result.pg_advantages.numpy(), expected_pg, rtol=1e-5,
                             atol=1e-5)


def test_outputs_have_stopped_gradients():
  rng = np.random.default_rng(5)
  log_rhos, discounts, rewards, values, bootstrap_value = _random_inputs(rng, 7, 5)
  values = tf.Variable(values)
  bootstrap_value = tf.Variable(bootstrap_value)
  log_rhos = tf.Variable(log_rhos)
  rewards = tf.Variable(rewards)
  with tf.GradientTape(persistent=True) as tape:
    result = vtrace.from_importance_weights(log_rhos, discounts, rewards, values,
                                            bootstrap_value)
    vs_sum = tf.reduce_sum(result.vs)
    pg_sum = tf.reduce_sum(result.pg_advantages)
  for output in (vs_sum, pg_sum):
    for source in (values, bootstrap_value, log_rhos, rewards):
      assert tape.gradient(output, source) is None


def test_vtrace_of_head_log_rhos_gradients():
  """vs and pg_advantages are constants; the head's target action log-probs are not."""
  rng = np.random.default_rng(11)
  (behaviour_logits, target_logits, actions, discounts, rewards, values,
   bootstrap_value) = _random_logits_inputs(rng)
  behaviour_logits = tf.Variable(behaviour_logits)
  target_logits = tf.Variable(target_logits)
  values = tf.Variable(values)
  head = _categorical_head(target_logits.shape[-1])
  with tf.GradientTape(persistent=True) as tape:
    log_rhos, target_log_probs, _ = _agent_log_rhos(head, behaviour_logits,
                                                    target_logits, actions)
    result = vtrace.from_importance_weights(log_rhos, discounts, rewards, values,
                                            bootstrap_value)
    vs_sum = tf.reduce_sum(result.vs)
    pg_sum = tf.reduce_sum(result.pg_advantages)
    target_sum = tf.reduce_sum(target_log_probs)
    # The usual policy-gradient loss: the advantage is a constant weight.
    pg_loss = -tf.reduce_sum(result.pg_advantages * target_log_probs)

  for source in (values, target_logits, behaviour_logits):
    assert tape.gradient(vs_sum, source) is None
    assert tape.gradient(pg_sum, source) is None

  grad = tape.gradient(target_sum, target_logits)
  assert grad is not None
  # d log softmax(z)[a] / dz = onehot(a) - softmax(z).
  probs = np.exp(_np_log_softmax(target_logits.numpy()))
  onehot = np.eye(probs.shape[-1])[actions]
  np.testing.assert_allclose(grad.numpy(), onehot - probs, rtol=1e-5, atol=1e-6)

  pg_grad = tape.gradient(pg_loss, target_logits)
  assert pg_grad is not None
  np.testing.assert_allclose(
      pg_grad.numpy(), -result.pg_advantages.numpy()[..., None] * (onehot - probs),
      rtol=1e-4, atol=1e-5)
  assert tape.gradient(pg_loss, values) is None

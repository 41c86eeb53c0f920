"""CLEAR's cloning losses: KL(mu || pi) and the squared value difference."""
import numpy as np
import pytest
import tensorflow as tf

from tfrl.losses import cloning


def _np_log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _np_kl(behaviour_logits, target_logits):
  """KL(mu || pi) = sum_a mu(a) (log mu(a) - log pi(a))."""
  log_mu = _np_log_softmax(behaviour_logits)
  log_pi = _np_log_softmax(target_logits)
  return np.sum(np.exp(log_mu) * (log_mu - log_pi), axis=-1)


@pytest.mark.parametrize('shape', [(5,), (7, 3, 5), (4, 2)])
def test_policy_cloning_loss_is_kl_behaviour_to_target(shape):
  rng = np.random.default_rng(sum(shape))
  behaviour_logits = (2.0 * rng.normal(size=shape)).astype(np.float32)
  target_logits = (2.0 * rng.normal(size=shape)).astype(np.float32)
  loss = cloning.policy_cloning_loss(behaviour_logits, target_logits)
  expected = _np_kl(behaviour_logits, target_logits)
  assert loss.shape == shape[:-1]
  np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5, atol=1e-6)
  assert (loss.numpy() >= -1e-6).all()
  # The direction matters: KL is not symmetric, and this is KL(mu || pi).
  assert not np.allclose(expected, _np_kl(target_logits, behaviour_logits))


def test_policy_cloning_loss_hand_case():
  """mu = (1/2, 1/2), pi = (1/4, 3/4): KL = 1/2 log 2 + 1/2 log(2/3) = 1/2 log(4/3)."""
  loss = cloning.policy_cloning_loss(
      np.array([0.0, 0.0], np.float32), np.log(np.array([0.25, 0.75], np.float32)))
  np.testing.assert_allclose(loss.numpy(), 0.5 * np.log(4.0 / 3.0), rtol=1e-5)


def test_policy_cloning_loss_zero_for_equal_and_shifted_logits():
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(7, 3, 4)).astype(np.float32)
  np.testing.assert_allclose(
      cloning.policy_cloning_loss(logits, logits).numpy(), np.zeros((7, 3)), atol=1e-6)
  # Logits that differ by a constant (per step) describe the same policy.
  shift = rng.normal(size=(7, 3, 1)).astype(np.float32) * 5.0
  np.testing.assert_allclose(
      cloning.policy_cloning_loss(logits, logits + shift).numpy(), np.zeros((7, 3)),
      atol=1e-5)


def test_policy_cloning_loss_gradients():
  rng = np.random.default_rng(4)
  behaviour_logits = tf.Variable(rng.normal(size=(6, 2, 3)).astype(np.float32))
  target_logits = tf.Variable(rng.normal(size=(6, 2, 3)).astype(np.float32))
  with tf.GradientTape(persistent=True) as tape:
    loss = tf.reduce_sum(cloning.policy_cloning_loss(behaviour_logits, target_logits))
  assert tape.gradient(loss, behaviour_logits) is None
  grad = tape.gradient(loss, target_logits)
  assert grad is not None
  # d KL(mu || softmax(z)) / dz = softmax(z) - mu.
  expected = (np.exp(_np_log_softmax(target_logits.numpy())) -
              np.exp(_np_log_softmax(behaviour_logits.numpy())))
  np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_value_cloning_loss_is_squared_difference():
  rng = np.random.default_rng(5)
  values = rng.normal(size=(7, 3)).astype(np.float32)
  replayed_values = rng.normal(size=(7, 3)).astype(np.float32)
  loss = cloning.value_cloning_loss(values, replayed_values)
  assert loss.shape == (7, 3)
  np.testing.assert_allclose(loss.numpy(), (values - replayed_values) ** 2, rtol=1e-6)
  np.testing.assert_allclose(
      cloning.value_cloning_loss(np.float32([3.0]), np.float32([1.0])).numpy(), [4.0])


def test_value_cloning_loss_gradients():
  rng = np.random.default_rng(6)
  values = tf.Variable(rng.normal(size=(7, 3)).astype(np.float32))
  replayed_values = tf.Variable(rng.normal(size=(7, 3)).astype(np.float32))
  with tf.GradientTape(persistent=True) as tape:
    loss = tf.reduce_sum(cloning.value_cloning_loss(values, replayed_values))
  assert tape.gradient(loss, replayed_values) is None
  grad = tape.gradient(loss, values)
  np.testing.assert_allclose(grad.numpy(),
                             2.0 * (values.numpy() - replayed_values.numpy()),
                             rtol=1e-5, atol=1e-6)


def _np_gaussian_kl(loc_p, log_scale_p, loc_q, log_scale_q):
  """KL(N_p || N_q) of diagonal Gaussians by numerical integration per dimension."""
  x = np.linspace(-30, 30, 600_001)
  total = np.zeros(np.shape(loc_p)[:-1])
  for index in np.ndindex(*np.shape(loc_p)):
    sp, sq = np.exp(log_scale_p[index]), np.exp(log_scale_q[index])
    log_p = -0.5 * ((x - loc_p[index]) / sp) ** 2 - np.log(sp * np.sqrt(2 * np.pi))
    log_q = -0.5 * ((x - loc_q[index]) / sq) ** 2 - np.log(sq * np.sqrt(2 * np.pi))
    total[index[:-1]] += np.trapz(np.exp(log_p) * (log_p - log_q), x)
  return total


def test_gaussian_policy_cloning_loss_is_kl_behaviour_to_target():
  rng = np.random.default_rng(3)
  shape = (3, 2, 2)
  loc_mu, loc_pi = rng.normal(size=shape), rng.normal(size=shape)
  log_scale_mu, log_scale_pi = rng.uniform(-1, 0.5, shape), rng.uniform(-1, 0.5, shape)
  loss = cloning.gaussian_policy_cloning_loss(
      *(tf.constant(x, tf.float32) for x in (loc_mu, log_scale_mu, loc_pi, log_scale_pi)))
  np.testing.assert_allclose(loss, _np_gaussian_kl(loc_mu, log_scale_mu, loc_pi,
                                                   log_scale_pi), rtol=1e-4, atol=1e-5)
  same = cloning.gaussian_policy_cloning_loss(loc_mu, log_scale_mu, loc_mu, log_scale_mu)
  np.testing.assert_allclose(same, np.zeros(shape[:-1]), atol=1e-6)


def test_gaussian_policy_cloning_gradients_reach_only_the_target():
  loc_mu, log_scale_mu = tf.Variable([[0.5]]), tf.Variable([[0.0]])
  loc_pi, log_scale_pi = tf.Variable([[-0.5]]), tf.Variable([[0.3]])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(cloning.gaussian_policy_cloning_loss(loc_mu, log_scale_mu, loc_pi,
                                                              log_scale_pi))
  grads = tape.gradient(loss, [loc_mu, log_scale_mu, loc_pi, log_scale_pi])
  assert grads[0] is None and grads[1] is None
  assert grads[2] is not None and grads[3] is not None

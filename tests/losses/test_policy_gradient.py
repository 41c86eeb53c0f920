"""Policy-gradient primitives against independent numpy references.

The references are written from the definitions, not from the implementation:
log-probabilities and entropies from a float64 log-softmax; the clipped surrogate by
its case analysis (A >= 0: min(r, 1 + eps) A; A < 0: max(r, 1 - eps) A, which is what
min(r A, clip(r) A) reduces to); advantage normalization from masked float64 moments.
"""
import numpy as np
import pytest
import tensorflow as tf

from tfrl.losses import policy_gradient


def _np_log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _np_log_prob(logits, actions):
  return np.take_along_axis(_np_log_softmax(logits), actions[..., None], -1)[..., 0]


def _np_surrogate(ratio, adv, epsilon):
  ratio, adv = np.asarray(ratio, np.float64), np.asarray(adv, np.float64)
  return np.where(adv >= 0, np.minimum(ratio, 1 + epsilon) * adv,
                  np.maximum(ratio, 1 - epsilon) * adv)


def _mask(rng, shape):
  mask = (rng.uniform(size=shape) < 0.7).astype(np.float32)
  mask[0, 0], mask[-1, -1] = 1.0, 0.0
  return mask


# -- Categorical log-probs and entropy ------------------------------------------------

@pytest.mark.parametrize('shape', [(7, 3, 4), (5, 2), (2,)], ids=['TBA', 'BA', 'A'])
@pytest.mark.parametrize('dtype', [np.int32, np.int64])
def test_categorical_log_prob_matches_numpy(shape, dtype):
  rng = np.random.default_rng(sum(shape))
  logits = (2.0 * rng.normal(size=shape)).astype(np.float32)
  actions = rng.integers(0, shape[-1], size=shape[:-1]).astype(dtype)
  log_prob = policy_gradient.categorical_log_prob(logits, actions)
  assert log_prob.shape == shape[:-1]
  np.testing.assert_allclose(log_prob.numpy(), _np_log_prob(logits, actions), rtol=1e-5,
                             atol=1e-6)


def test_categorical_log_prob_hand_case_and_gradient():
  """pi = (1/4, 3/4): log pi(1) = log 3/4; d log pi(a) / dz = onehot(a) - pi."""
  logits = tf.Variable(np.log(np.array([[0.25, 0.75]], np.float32)))
  with tf.GradientTape() as tape:
    log_prob = policy_gradient.categorical_log_prob(logits, np.array([1]))
  np.testing.assert_allclose(log_prob.numpy(), [np.log(0.75)], rtol=1e-6)
  np.testing.assert_allclose(tape.gradient(log_prob, logits).numpy(), [[-0.25, 0.25]],
                             rtol=1e-5)


def test_categorical_log_prob_shape_mismatch_raises():
  logits = np.zeros((7, 3, 4), np.float32)
  with pytest.raises(ValueError, match=r'logits_t.*a_t.*\(7, 3, 4\).*\(3, 7\)'):
    policy_gradient.categorical_log_prob(logits, np.zeros((3, 7), np.int32))
  # Logits without the action axis (or actions with one) are refused, not broadcast.
  with pytest.raises(ValueError, match='logits_t'):
    policy_gradient.categorical_log_prob(logits, np.zeros((7, 3, 4), np.int32))


@pytest.mark.parametrize('shape', [(7, 3, 4), (5, 2)])
def test_categorical_entropy_matches_numpy(shape):
  rng = np.random.default_rng(10 + sum(shape))
  logits = (3.0 * rng.normal(size=shape)).astype(np.float32)
  log_probs = _np_log_softmax(logits)
  expected = -(np.exp(log_probs) * log_probs).sum(-1)
  entropy = policy_gradient.categorical_entropy(logits)
  assert entropy.shape == shape[:-1]
  np.testing.assert_allclose(entropy.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_categorical_entropy_extremes():
  # Uniform over A actions: log A, whatever the constant; nearly one-hot: about 0.
  np.testing.assert_allclose(
      policy_gradient.categorical_entropy(np.full((2, 5), 3.0, np.float32)).numpy(),
      [np.log(5.0)] * 2, rtol=1e-6)
  assert float(policy_gradient.categorical_entropy(
      np.array([30.0, -30.0, -30.0], np.float32))) < 1e-6


# -- Policy-gradient loss -----------------------------------------------------------

def test_policy_gradient_loss_matches_numpy_and_stops_advantage_gradient():
  rng = np.random.default_rng(20)
  logp = tf.Variable(rng.normal(size=(6, 4)).astype(np.float32))
  adv = tf.Variable(rng.normal(size=(6, 4)).astype(np.float32))
  mask = _mask(rng, (6, 4))
  with tf.GradientTape(persistent=True) as tape:
    loss = policy_gradient.policy_gradient_loss(logp, adv, mask)
    loss_with_count = policy_gradient.policy_gradient_loss(logp, adv, mask, count=50.0)
  products = logp.numpy().astype(np.float64) * adv.numpy() * mask
  np.testing.assert_allclose(loss.numpy(), -products.sum() / mask.sum(), rtol=1e-5)
  np.testing.assert_allclose(loss_with_count.numpy(), -products.sum() / 50.0, rtol=1e-5)
  assert tape.gradient(loss, adv) is None
  np.testing.assert_allclose(tape.gradient(loss, logp).numpy(),
                             -adv.numpy() * mask / mask.sum(), rtol=1e-5)


def test_policy_gradient_loss_shape_mismatch_raises():
  with pytest.raises(ValueError, match=r'logp_t.*adv_t'):
    policy_gradient.policy_gradient_loss(np.zeros((6, 4), np.float32),
                                         np.zeros((4, 6), np.float32),
                                         np.ones((6, 4), np.float32))
  with pytest.raises(ValueError, match='mask_t'):
    policy_gradient.policy_gradient_loss(np.zeros((6, 4), np.float32),
                                         np.zeros((6, 4), np.float32),
                                         np.ones((6, 1), np.float32))


# -- Clipped surrogate ----------------------------------------------------------------

def _surrogate_inputs(seed):
  rng = np.random.default_rng(seed)
  # Ratios on both sides of the clip range, advantages of both signs.
  ratio = np.exp(rng.uniform(-0.6, 0.6, size=(8, 5))).astype(np.float32)
  adv = rng.normal(size=(8, 5)).astype(np.float32)
  return ratio, adv, _mask(rng, (8, 5))


@pytest.mark.parametrize('epsilon', [0.1, 0.2, 0.3])
def test_clipped_surrogate_matches_case_analysis(epsilon):
  ratio, adv, _ = _surrogate_inputs(30)
  outside = np.abs(ratio - 1) > epsilon
  assert outside.any() and (~outside).any()
  assert (adv > 0).any() and (adv < 0).any()
  np.testing.assert_allclose(
      policy_gradient.clipped_surrogate(ratio, adv, epsilon).numpy(),
      _np_surrogate(ratio, adv, epsilon), rtol=1e-6, atol=1e-7)


def test_clipped_surrogate_loss_matches_numpy():
  ratio, adv, mask = _surrogate_inputs(31)
  expected = -(_np_surrogate(ratio, adv, 0.2) * mask).sum()
  np.testing.assert_allclose(
      policy_gradient.clipped_surrogate_loss(ratio, adv, mask, 0.2).numpy(),
      expected / mask.sum(), rtol=1e-5)
  np.testing.assert_allclose(
      policy_gradient.clipped_surrogate_loss(ratio, adv, mask, 0.2, count=100.0).numpy(),
      expected / 100.0, rtol=1e-5)


def test_clipped_surrogate_gradient_vanishes_only_beyond_the_clip():
  """d/dr of the objective: A where unclipped (or clipped against A's direction), 0
  where r is past the clip in the direction A favours."""
  ratio, adv, _ = _surrogate_inputs(32)
  ratio_variable = tf.Variable(ratio)
  adv_variable = tf.Variable(adv)
  with tf.GradientTape(persistent=True) as tape:
    objective = tf.reduce_sum(
        policy_gradient.clipped_surrogate(ratio_variable, adv_variable, 0.2))
  clipped = ((adv >= 0) & (ratio > 1.2)) | ((adv < 0) & (ratio < 0.8))
  assert clipped.any() and (~clipped).any()
  np.testing.assert_allclose(tape.gradient(objective, ratio_variable).numpy(),
                             np.where(clipped, 0.0, adv), rtol=1e-6)
  assert tape.gradient(objective, adv_variable) is None


def test_clipped_surrogate_shape_mismatch_raises():
  ratio, adv, mask = _surrogate_inputs(33)
  with pytest.raises(ValueError, match=r'ratio_t.*adv_t.*\(8, 5\).*\(5, 8\)'):
    policy_gradient.clipped_surrogate(ratio, adv.T, 0.2)
  with pytest.raises(ValueError, match='mask_t'):
    policy_gradient.clipped_surrogate_loss(ratio, adv, mask[:, :1], 0.2)


# -- Advantage normalization --------------------------------------------------------

def test_normalize_advantages_uses_masked_moments():
  rng = np.random.default_rng(40)
  adv = (3.0 + 2.0 * rng.normal(size=(7, 5))).astype(np.float32)
  mask = _mask(rng, (7, 5))
  kept = adv[mask > 0].astype(np.float64)
  expected = (adv - kept.mean()) / (kept.std() + 1e-8)
  normalized = policy_gradient.normalize_advantages(adv, mask)
  np.testing.assert_allclose(normalized.numpy(), expected, rtol=1e-4, atol=1e-5)
  # Over the kept steps: mean 0, standard deviation 1.
  np.testing.assert_allclose(normalized.numpy()[mask > 0].mean(), 0.0, atol=1e-5)
  np.testing.assert_allclose(normalized.numpy()[mask > 0].std(), 1.0, rtol=1e-4)
  # Dropped steps do not move the moments.
  changed = np.where(mask > 0, adv, 1e3).astype(np.float32)
  np.testing.assert_allclose(
      policy_gradient.normalize_advantages(changed, mask).numpy()[mask > 0],
      normalized.numpy()[mask > 0], rtol=1e-5)


def test_normalize_advantages_takes_the_moments_fn():
  """Under tf.distribute the moments come from all replicas: a moments_fn decides."""
  adv = np.array([[1.0, 3.0], [5.0, 7.0]], np.float32)
  mask = np.ones_like(adv)
  seen = []

  def global_moments(x, weights):
    seen.append((x, weights))
    return tf.constant(3.0), tf.constant(4.0)  # mean 3, std 2

  normalized = policy_gradient.normalize_advantages(adv, mask, global_moments,
                                                    epsilon=0.0)
  np.testing.assert_allclose(normalized.numpy(), (adv - 3.0) / 2.0, rtol=1e-6)
  assert len(seen) == 1
  np.testing.assert_array_equal(seen[0][1].numpy(), mask)


def test_normalize_advantages_constant_batch_is_finite():
  normalized = policy_gradient.normalize_advantages(np.full((3, 2), 5.0, np.float32),
                                                    np.ones((3, 2), np.float32))
  np.testing.assert_array_equal(normalized.numpy(), np.zeros((3, 2)))


def test_normalize_advantages_shape_mismatch_raises():
  with pytest.raises(ValueError, match=r'adv_t.*mask_t.*\(7, 5\).*\(5, 7\)'):
    policy_gradient.normalize_advantages(np.zeros((7, 5), np.float32),
                                         np.ones((5, 7), np.float32))


# -- Gaussian log-probs, entropy and the tanh squashing ------------------------------

def _np_gaussian_log_prob(loc, log_scale, u):
  """Sum over the last axis of log N(u; loc, exp(log_scale)), from the density."""
  loc, log_scale, u = (np.asarray(x, np.float64) for x in (loc, log_scale, u))
  scale = np.exp(log_scale)
  density = np.exp(-0.5 * ((u - loc) / scale) ** 2) / (scale * np.sqrt(2 * np.pi))
  return np.log(density).sum(-1)


@pytest.mark.parametrize('shape', [(7, 3, 2), (5, 1), (3,)], ids=['TBD', 'BD', 'D'])
def test_gaussian_log_prob_and_entropy_match_the_density(shape):
  rng = np.random.default_rng(len(shape))
  loc = rng.normal(size=shape).astype(np.float32)
  log_scale = rng.uniform(-1.0, 0.5, size=shape).astype(np.float32)
  u = (loc + np.exp(log_scale) * rng.normal(size=shape)).astype(np.float32)
  np.testing.assert_allclose(policy_gradient.gaussian_log_prob(loc, log_scale, u),
                             _np_gaussian_log_prob(loc, log_scale, u), rtol=1e-5, atol=1e-5)
  # Entropy: 0.5 log(2 pi e sigma^2) per dimension.
  expected = (0.5 * np.log(2 * np.pi * np.e * np.exp(2.0 * log_scale.astype(np.float64)))
              ).sum(-1)
  np.testing.assert_allclose(policy_gradient.gaussian_entropy(log_scale), expected,
                             rtol=1e-5, atol=1e-5)


def test_gaussian_log_prob_rejects_mismatched_shapes():
  with pytest.raises(ValueError, match='loc_t and u_t must have the same shape'):
    policy_gradient.gaussian_log_prob(tf.zeros([4, 2]), tf.zeros([4, 2]), tf.zeros([4, 3]))


def test_tanh_log_det_jacobian_is_stable_where_tanh_saturates():
  u = np.array([[-30.0, -3.0], [0.0, 0.5], [2.0, 30.0]], np.float32)
  half_range = np.array([2.0, 0.5], np.float32)
  # float64 reference: log(h (1 - tanh(u)^2)) = log h + log 4 - 2 log(e^u + e^-u).
  u64 = u.astype(np.float64)
  expected = (np.log(half_range.astype(np.float64)) + np.log(4.0) -
              2.0 * np.logaddexp(u64, -u64)).sum(-1)
  actual = policy_gradient.tanh_log_det_jacobian(u, half_range).numpy()
  np.testing.assert_allclose(actual, expected, rtol=1e-5)
  assert np.all(np.isfinite(actual))  # the naive log(1 - tanh^2) is -inf at |u| = 30


_LOC = np.array([0.4, -1.3])
_HALF_RANGE = np.array([2.0, 0.5])  # bounds [-2, 2] and [0.5, 1.5]: rescaled actions


def _np_sent_action_entropy(log_sigma, samples=400_000):
  """Monte-Carlo entropy of a = center + h tanh(u), u ~ N(_LOC, e^log_sigma): minus the
  mean exact log-density of sampled actions, log N(u) - log |da/du|, in float64."""
  rng = np.random.default_rng(123)
  scale = np.exp(log_sigma)
  u = _LOC + scale * rng.standard_normal((samples, 2))
  log_density = (-0.5 * ((u - _LOC) / scale) ** 2 - np.log(scale) -
                 0.5 * np.log(2 * np.pi)).sum(-1)
  # |da/du| = h (1 - tanh(u)^2) = 4h / (e^u + e^-u)^2, without tanh's rounding to 1.
  log_det = (np.log(_HALF_RANGE) + np.log(4.0) - 2.0 * np.logaddexp(u, -u)).sum(-1)
  return -(log_density - log_det).mean()


@pytest.mark.parametrize('log_sigma', [-1.0, 0.0, 1.0])
def test_tanh_gaussian_entropy_is_the_sent_actions_entropy(log_sigma):
  """Within 0.1 nats of a Monte-Carlo estimate of the squashed, rescaled action's
  entropy, which the pre-squash Gaussian's entropy misses at log sigma 1."""
  loc = np.tile(_LOC.astype(np.float32), [3, 1])  # [B=3, D=2]
  log_scale = np.full_like(loc, log_sigma)
  entropy = policy_gradient.tanh_gaussian_entropy(loc, log_scale,
                                                  _HALF_RANGE.astype(np.float32))
  assert entropy.shape == (3,)
  reference = _np_sent_action_entropy(log_sigma)
  np.testing.assert_allclose(entropy.numpy(), reference, atol=0.1)
  if log_sigma == 1.0:
    assert abs(float(policy_gradient.gaussian_entropy(log_scale)[0]) - reference) > 1.0


def test_tanh_gaussian_entropy_falls_as_the_scale_saturates_tanh():
  """Its gradient turns: a wider u first widens the sent action, then piles it on the
  bounds. The Gaussian's entropy (gradient +1 per dimension) rewards saturation."""
  half_range = _HALF_RANGE.astype(np.float32)
  log_scale = tf.Variable(np.array([[-2.0, -2.0], [2.0, 2.0], [4.0, 4.0]], np.float32))
  loc = tf.Variable(np.array([[0.0, 0.0], [1.5, 1.5], [0.0, 0.0]], np.float32))
  with tf.GradientTape() as tape:
    entropy = policy_gradient.tanh_gaussian_entropy(loc, log_scale, half_range)
  d_log_scale, d_loc = tape.gradient(entropy, [log_scale, loc])
  assert np.all(d_log_scale[0] > 0.5)  # narrow: about +1, the Gaussian's own
  assert np.all(d_log_scale[1:] < -1.0)  # past saturation: wider is lower entropy
  assert entropy[2] < entropy[1] < entropy[0]
  np.testing.assert_allclose(d_loc[0], 0.0, atol=1e-6)  # symmetric about tanh's center
  assert np.all(d_loc[1] < 0)  # a mean towards a bound lowers the entropy

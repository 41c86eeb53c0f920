"""Masked reductions against numpy sums, and the shape checks at their entry."""
import numpy as np
import pytest
import tensorflow as tf

from tfrl.losses import reductions


def _inputs(seed=0, shape=(7, 5)):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=shape).astype(np.float32)
  mask = (rng.uniform(size=shape) < 0.6).astype(np.float32)
  mask[0, 0], mask[1, 0] = 1.0, 0.0  # Certainly one kept and one dropped step.
  return x, mask


def test_masked_sum_matches_numpy():
  x, mask = _inputs()
  np.testing.assert_allclose(reductions.masked_sum(x, mask).numpy(),
                             (x.astype(np.float64) * mask).sum(), rtol=1e-5)
  # Fractional weights (row weights) weight the elements.
  weights = np.linspace(0.0, 1.0, x.size).reshape(x.shape).astype(np.float32)
  np.testing.assert_allclose(reductions.masked_sum(x, weights).numpy(),
                             (x.astype(np.float64) * weights).sum(), rtol=1e-5)


def test_masked_mean_divides_by_the_mask_sum_or_the_given_count():
  x, mask = _inputs(1)
  expected_sum = (x.astype(np.float64) * mask).sum()
  np.testing.assert_allclose(reductions.masked_mean(x, mask).numpy(),
                             expected_sum / mask.sum(), rtol=1e-5)
  # Under tf.distribute the count is that of all replicas: here 3 x this one's.
  np.testing.assert_allclose(
      reductions.masked_mean(x, mask, count=tf.constant(3.0 * mask.sum())).numpy(),
      expected_sum / (3.0 * mask.sum()), rtol=1e-5)
  # A Python number works too.
  np.testing.assert_allclose(reductions.masked_mean(x, mask, count=10.0).numpy(),
                             expected_sum / 10.0, rtol=1e-5)


def test_masked_mean_of_nothing_is_zero():
  x, _ = _inputs(2)
  assert float(reductions.masked_mean(x, np.zeros_like(x))) == 0.0


def test_masked_mean_ignores_dropped_values():
  x, mask = _inputs(3)
  changed = np.where(mask > 0, x, 1e6).astype(np.float32)
  np.testing.assert_allclose(reductions.masked_mean(changed, mask).numpy(),
                             reductions.masked_mean(x, mask).numpy(), rtol=1e-6)


def test_masked_mean_gradient_is_mask_over_count():
  x, mask = _inputs(4)
  x = tf.Variable(x)
  mask_variable = tf.Variable(mask)
  with tf.GradientTape(persistent=True) as tape:
    mean = reductions.masked_mean(x, mask_variable)
  np.testing.assert_allclose(tape.gradient(mean, x).numpy(), mask / mask.sum(),
                             rtol=1e-6)
  # The default count is no function of the data: only the numerator's mask has a
  # gradient, x / count.
  np.testing.assert_allclose(tape.gradient(mean, mask_variable).numpy(),
                             x.numpy() / mask.sum(), rtol=1e-5)


@pytest.mark.parametrize('fn', [reductions.masked_sum, reductions.masked_mean])
def test_shape_mismatch_raises_naming_the_arguments(fn):
  x, mask = _inputs(5)
  with pytest.raises(ValueError, match=r'x_t.*mask_t.*\(7, 5\).*\(5, 7\)'):
    fn(x, mask.T)
  # A mask that would broadcast is refused too: it would weigh steps silently.
  with pytest.raises(ValueError, match='mask_t'):
    fn(x, mask[:1])


def test_unknown_dimensions_pass_the_check():
  x, mask = _inputs(6)

  @tf.function(input_signature=[tf.TensorSpec([None, 5]), tf.TensorSpec([7, None])])
  def mean(x, mask):
    return reductions.masked_mean(x, mask)

  np.testing.assert_allclose(mean(x, mask).numpy(),
                             (x.astype(np.float64) * mask).sum() / mask.sum(), rtol=1e-5)


def test_check_same_shape():
  reductions.check_same_shape('a', tf.zeros([2, 3]), 'b', tf.zeros([2, 3]))
  with pytest.raises(ValueError, match=r'a and b must have the same shape.*\(2, 3\).*\(3,\)'):
    reductions.check_same_shape('a', tf.zeros([2, 3]), 'b', tf.zeros([3]))

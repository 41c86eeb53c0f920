"""The running observation normalizer: statistics equal numpy's over everything folded
in, masked entries are left out, and only float leaves change. (Through an agent and its
export: tests/agents/test_normalized_observations.py; under MirroredStrategy:
tests/agents/test_distributed.py.)
"""
import numpy as np
import pytest
import tensorflow as tf

from tfrl.networks import normalization


def test_statistics_equal_numpy_over_all_batches_and_skip_masked_entries():
  spec = tf.TensorSpec([3], tf.float32)
  normalizer = normalization.ObservationNormalizer(spec)
  rng = np.random.RandomState(0)
  kept = []
  for scale in (1.0, 10.0, 0.1):
    batch = (5.0 + scale * rng.randn(4, 6, 3)).astype(np.float32)
    mask = (rng.rand(4, 6) > 0.3).astype(np.float32)
    normalizer.update(batch, mask)
    kept.append(batch[mask > 0])
  kept = np.concatenate(kept)
  mean, variance = normalizer.weights[1].numpy(), normalizer.weights[2].numpy()
  assert normalizer.count.numpy() == len(kept)
  np.testing.assert_allclose(mean, kept.mean(0), rtol=1e-5)
  np.testing.assert_allclose(variance, kept.var(0), rtol=1e-4)
  x = rng.randn(2, 3).astype(np.float32) * 30
  want = np.clip((x - kept.mean(0)) / np.sqrt(kept.var(0) + 1e-8), -10, 10)
  np.testing.assert_allclose(normalizer(x), want, rtol=1e-4, atol=1e-5)
  assert np.abs(normalizer(x).numpy()).max() == pytest.approx(10.0)  # clipped


def test_an_all_masked_batch_changes_nothing():
  normalizer = normalization.ObservationNormalizer(tf.TensorSpec([2], tf.float32))
  normalizer.update(np.ones((3, 2), np.float32) * 7)
  before = [w.numpy().copy() for w in normalizer.weights]
  normalizer.update(np.full((3, 2), 100.0, np.float32), np.zeros(3, np.float32))
  for got, want in zip(normalizer.weights, before):
    np.testing.assert_array_equal(got.numpy(), want)


def test_only_float_leaves_of_a_dict_are_normalized():
  spec = {'image': tf.TensorSpec([4, 4, 1], tf.uint8),
          'vector': tf.TensorSpec([2], tf.float32),
          'index': tf.TensorSpec([], tf.int32)}
  normalizer = normalization.ObservationNormalizer(spec)
  batch = {'image': np.full((5, 4, 4, 1), 200, np.uint8),
           'vector': np.arange(10, dtype=np.float32).reshape(5, 2),
           'index': np.arange(5, dtype=np.int32)}
  normalizer.update(batch)
  out = normalizer(batch)
  np.testing.assert_array_equal(out['image'], batch['image'])
  np.testing.assert_array_equal(out['index'], batch['index'])
  np.testing.assert_allclose(out['vector'].numpy().mean(0), [0, 0], atol=1e-5)
  np.testing.assert_allclose(out['vector'].numpy().std(0), [1, 1], rtol=1e-4)


def test_a_spec_with_nothing_to_normalize_is_refused():
  with pytest.raises(ValueError, match='needs a float observation'):
    normalization.ObservationNormalizer(tf.TensorSpec([84, 84, 4], tf.uint8))

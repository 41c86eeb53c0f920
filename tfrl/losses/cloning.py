"""CLEAR's behavioural cloning losses on replayed experience.

Rolnick et al. 2019, "Experience Replay for Continual Learning", arXiv:1811.11682:
on replayed steps, keep the current policy close to the stored behaviour policy and the
current value close to the stored value, which protects what was learned before.
"""
import tensorflow as tf

from tfrl.losses import reductions


def policy_cloning_loss(behaviour_logits, target_logits):
  """KL(mu || pi) per step for categorical policies, `[..., A]` logits -> `[...]`.

  The behaviour policy mu is a fixed target (no gradient); gradients reach pi.
  """
  behaviour_logits = tf.stop_gradient(behaviour_logits)
  behaviour_log_probs = tf.nn.log_softmax(behaviour_logits)
  target_log_probs = tf.nn.log_softmax(target_logits)
  return tf.reduce_sum(tf.exp(behaviour_log_probs) *
                       (behaviour_log_probs - target_log_probs), axis=-1)


def gaussian_policy_cloning_loss(behaviour_loc, behaviour_log_scale, target_loc,
                                 target_log_scale):
  """KL(mu || pi) per step for diagonal Gaussians, `[..., D]` parameters -> `[...]`.

  Also the KL of the two policies after the same squashing bijection (tanh to the
  action bounds): a KL divergence does not change under an invertible map applied to
  both. The behaviour policy mu is a fixed target (no gradient); gradients reach pi.
  """
  behaviour_loc = tf.stop_gradient(behaviour_loc)
  behaviour_log_scale = tf.stop_gradient(behaviour_log_scale)
  variance_ratio = tf.exp(2.0 * (behaviour_log_scale - target_log_scale))
  mean_term = tf.square((behaviour_loc - target_loc) * tf.exp(-target_log_scale))
  return tf.reduce_sum(
      0.5 * (variance_ratio + mean_term - 1.0) + target_log_scale - behaviour_log_scale,
      axis=-1)


def value_cloning_loss(values, replayed_values):
  """||V(x) - V_replay(x)||^2 per step; the stored values are a fixed target."""
  return tf.square(values - tf.stop_gradient(replayed_values))


def replay_cloning_losses(policy_kl, values, replayed_values, replayed, count):
  """CLEAR's two scalar losses over the replayed steps of a batch.

  Each is summed over the replayed steps and divided by the count of all valid steps
  (fresh and replayed), like the V-trace terms (CLEAR's learner sums every term over
  its steps): a replayed step's cloning term then weighs its cost against its own
  V-trace terms, and the pull towards the stored behaviour grows with the replayed
  share of the batch. (Dividing by the replayed count instead made the costs act
  1 / replay_fraction times larger.)

  Args:
    policy_kl: [T, B] KL(mu || pi) per step (`policy_cloning_loss` or its Gaussian
      form, as the policy head computes it).
    values, replayed_values: [T, B] the current and the stored values.
    replayed: [T, B] the valid steps' weights on replayed rows, 0 elsewhere.
    count: the count of all valid steps (of all replicas).

  Returns:
    (policy cloning loss, value cloning loss).
  """
  return (reductions.masked_mean(policy_kl, replayed, count),
          reductions.masked_mean(value_cloning_loss(values, replayed_values), replayed,
                                 count))

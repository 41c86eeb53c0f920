"""V-trace off-policy value targets and policy-gradient advantages (IMPALA).

Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", arXiv:1802.01561, section 4. All tensors are time-major
`[T, B]`; `bootstrap_value` is `[B]`, the value of the state after the last step.

    v_s = V(x_s) + sum_{t>=s} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))
    rho_t = min(rho_bar, pi/mu), c_i = lambda * min(c_bar, pi/mu)

computed by the equivalent backward recursion
    v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1})).
"""
import collections

import tensorflow as tf

VTraceReturns = collections.namedtuple('VTraceReturns', ['vs', 'pg_advantages'])


def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                            clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                            lambda_=1.0, name='vtrace_from_importance_weights'):
  """V-trace targets from log importance weights log(pi(a_t|x_t) / mu(a_t|x_t)).

  Args:
    log_rhos: [T, B] log importance weights of the taken actions.
    discounts: [T, B] discount applied after step t (gamma, times 0 at episode ends).
    rewards: [T, B] rewards after step t.
    values: [T, B] value estimates V(x_t) under the target policy.
    bootstrap_value: [B] V(x_T).
    clip_rho_threshold: rho_bar, the truncation of the importance weights in delta_t V
      (None: no truncation).
    clip_pg_rho_threshold: the truncation of the weights in the policy-gradient
      advantage (None: no truncation).
    lambda_: mixes in TD(lambda)-style trace cutting: c_i = lambda * min(1, rho_i).
    name: name scope.

  Returns:
    VTraceReturns(vs [T, B], pg_advantages [T, B]), both with stopped gradients.
  """
  with tf.name_scope(name):
    log_rhos = tf.convert_to_tensor(log_rhos, tf.float32)
    discounts = tf.convert_to_tensor(discounts, tf.float32)
    rewards = tf.convert_to_tensor(rewards, tf.float32)
    values = tf.convert_to_tensor(values, tf.float32)
    bootstrap_value = tf.convert_to_tensor(bootstrap_value, tf.float32)
    rhos = tf.exp(log_rhos)
    clipped_rhos = (tf.minimum(clip_rho_threshold, rhos)
                    if clip_rho_threshold is not None else rhos)
    cs = lambda_ * tf.minimum(1.0, rhos)
    values_t_plus_1 = tf.concat([values[1:], bootstrap_value[None]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    def backward(acc, elements):
      delta, discount, c = elements
      return delta + discount * c * acc

    # A reverse scan: acc_s = delta_s + gamma_s c_s acc_{s+1}, acc_T = 0.
    vs_minus_v = tf.scan(backward, (deltas, discounts, cs),
                         initializer=tf.zeros_like(bootstrap_value), reverse=True)
    vs = vs_minus_v + values
    vs_t_plus_1 = tf.concat([vs[1:], bootstrap_value[None]], axis=0)
    clipped_pg_rhos = (tf.minimum(clip_pg_rho_threshold, rhos)
                       if clip_pg_rho_threshold is not None else rhos)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=tf.stop_gradient(vs),
                         pg_advantages=tf.stop_gradient(pg_advantages))


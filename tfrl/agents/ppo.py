"""PPO: clipped surrogate, GAE, value clipping, epochs of minibatches per batch.

Schulman et al. 2017, arXiv:1707.06347. Trains on batch-major `[B, T+1]` unrolls from a
FIFO queue (`SequenceWriter(length=T+1, stride=T)`), the same data as IMPALA, with the
same `ActorCriticNetwork` and policy, whose info holds the behaviour logits and value of
every acted step: the old log-probabilities and old values PPO needs.

Why not tf-agents' PPOAgent: it has no minibatches (each epoch is one step on the whole
batch), and it expects its own policy-info layout and trajectory handling; this one
reuses tfrl's tested GAE (`tfrl.losses.returns`) and the on-policy data path.

One `train` call = `num_epochs` passes over the batch, each in `num_minibatches`
shuffled minibatches of rows: num_epochs * num_minibatches gradient steps. The train
step counter advances by one per call.
"""
import collections
from typing import Optional, Sequence

import gin
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.trajectories import time_step as ts

from tfrl.agents import actor_critic_agent
from tfrl.agents import actor_critic_policy
from tfrl.losses import returns as returns_lib
from tfrl.losses import vtrace
from tfrl.networks import actor_critic

PpoLossInfo = collections.namedtuple(
    'PpoLossInfo', ['policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction'])


@gin.configurable
class PpoAgent(actor_critic_agent.ActorCriticAgentBase):
  """PPO-clip over an `ActorCriticNetwork`."""

  def __init__(self, time_step_spec, action_spec, network, optimizer,
               train_step_counter: tf.Variable, gamma: float = 0.99,
               lambda_: float = 0.95, clip_ratio: float = 0.2,
               value_clip: Optional[float] = 0.2, value_cost: float = 0.5,
               entropy_cost: float = 0.0, num_epochs: int = 4,
               num_minibatches: int = 1, normalize_advantages: bool = True,
               gradient_clipping: Optional[float] = 0.5, name: str = 'PpoAgent'):
    """Args:
      time_step_spec, action_spec: the environment's specs.
      network: an `ActorCriticNetwork`.
      optimizer: a Keras optimizer.
      train_step_counter: advanced once per `train` call.
      gamma: the discount.
      lambda_: GAE's lambda.
      clip_ratio: epsilon of the clipped surrogate.
      value_clip: clip the new value to old value +- this in the value loss (None: off).
      value_cost, entropy_cost: loss weights.
      num_epochs, num_minibatches: passes over the batch, and minibatches per pass
        (must divide the batch's rows).
      normalize_advantages: standardize advantages per minibatch.
      gradient_clipping: global gradient norm clip (None: off).
      name: agent name.
    """
    self._gamma = gamma
    self._lambda = lambda_
    self._clip_ratio = clip_ratio
    self._value_clip = value_clip
    self._value_cost = value_cost
    self._entropy_cost = entropy_cost
    self._num_epochs = num_epochs
    self._num_minibatches = num_minibatches
    self._normalize_advantages = normalize_advantages
    self._gradient_clipping = gradient_clipping
    super().__init__(time_step_spec, action_spec, network, optimizer, train_step_counter,
                     name)

  def _prepare(self, experience):
    """Time-major tensors, masks, old log-probs/values, GAE advantages and returns."""
    data = self.time_major(experience)
    valid = tf.cast(data.step_type[:-1] != ts.StepType.LAST, tf.float32)  # [T, B]
    old_logits = data.policy_info[actor_critic_policy.LOGITS][:-1]
    old_values = data.policy_info[actor_critic_policy.VALUE]  # [T+1, B]
    actions = data.action[:-1]
    discounts = self._gamma * data.discount[:-1] * valid
    advantages, value_targets = returns_lib.generalized_advantage_estimation(
        data.reward[:-1], discounts, old_values[:-1], old_values[-1], self._lambda, valid)
    return {'observation': data.observation[:-1], 'action': actions, 'valid': valid,
            'old_log_prob': vtrace.action_log_probs(old_logits, actions),
            'old_value': old_values[:-1], 'advantage': advantages,
            'value_target': value_targets}

  def _minibatch_loss(self, batch):
    """This replica's share of the PPO loss on a dict of time-major [T, b] tensors.

    Sums over this replica's steps divided by the count over all replicas (see
    `actor_critic_agent`): with one replica, the minibatch mean.
    """
    (logits, values), _ = self._network(batch['observation'])
    valid = batch['valid']
    count = actor_critic_agent.global_count(tf.reduce_sum(valid))
    advantages = batch['advantage']
    if self._normalize_advantages:
      mean, variance = actor_critic_agent.global_weighted_moments(advantages, valid)
      advantages = (advantages - mean) / (tf.sqrt(variance) + 1e-8)
    log_prob = vtrace.action_log_probs(logits, batch['action'])
    log_ratio = log_prob - batch['old_log_prob']
    ratio = tf.exp(log_ratio)
    clipped = tf.clip_by_value(ratio, 1 - self._clip_ratio, 1 + self._clip_ratio)
    surrogate = tf.minimum(ratio * advantages, clipped * advantages)
    policy_loss = -tf.reduce_sum(valid * surrogate) / count
    value_error = tf.square(values - batch['value_target'])
    if self._value_clip is not None:
      clipped_values = batch['old_value'] + tf.clip_by_value(
          values - batch['old_value'], -self._value_clip, self._value_clip)
      value_error = tf.maximum(value_error, tf.square(clipped_values - batch['value_target']))
    value_loss = 0.5 * tf.reduce_sum(valid * value_error) / count
    entropy = tf.reduce_sum(valid * -tf.reduce_sum(
        tf.nn.softmax(logits) * tf.nn.log_softmax(logits), -1)) / count
    total = policy_loss + self._value_cost * value_loss - self._entropy_cost * entropy
    approx_kl = tf.reduce_sum(valid * ((ratio - 1) - log_ratio)) / count
    clip_fraction = tf.reduce_sum(
        valid * tf.cast(tf.abs(ratio - 1) > self._clip_ratio, tf.float32)) / count
    return total, PpoLossInfo(policy_loss, value_loss, entropy, approx_kl, clip_fraction)

  def _train(self, experience, weights=None):
    del weights
    data = self._prepare(experience)
    rows = tf.shape(data['valid'])[1]
    minibatch = rows // self._num_minibatches
    # One shuffled row order per epoch, drawn up front.
    orders = tf.argsort(tf.random.uniform([self._num_epochs, rows]), axis=1)
    num_steps = self._num_epochs * self._num_minibatches

    def gradient_step(i, unused_loss):
      start = (i % self._num_minibatches) * minibatch
      index = orders[i // self._num_minibatches, start:start + minibatch]
      batch = tf.nest.map_structure(lambda x: tf.gather(x, index, axis=1), data)
      with tf.GradientTape() as tape:
        total, extra = self._minibatch_loss(batch)
      self.apply_gradients(tape, total, self._gradient_clipping)
      return i + 1, tf_agent.LossInfo(total, extra)

    zero = tf.constant(0.0)
    loss_info = tf_agent.LossInfo(zero, PpoLossInfo(*[zero] * 5))
    if tf.distribute.has_strategy():
      # Under a tf.distribute strategy every gradient step synchronizes the replicas,
      # which TF does not allow inside a tf.while_loop: the steps are unrolled in the
      # graph instead (a graph num_epochs * num_minibatches steps long).
      for i in range(num_steps):
        _, loss_info = gradient_step(tf.constant(i), loss_info)
    else:
      # A while loop keeps the traced graph small whatever the number of steps.
      _, loss_info = tf.while_loop(lambda i, _: i < num_steps, gradient_step,
                                   (tf.constant(0), loss_info))
    self.train_step_counter.assign_add(1)
    actor_critic_agent.write_summaries('losses', PpoLossInfo._fields, loss_info.extra,
                                       self.train_step_counter)
    return loss_info

  def _loss(self, experience, weights=None, training=False):
    del weights, training
    total, extra = self._minibatch_loss(self._prepare(experience))
    return tf_agent.LossInfo(total, extra)


@gin.configurable
def create_ppo_agent(time_step_spec, action_spec, train_step: tf.Variable,
                     gamma: float = 0.99, fc_layer_params: Sequence[int] = (64, 64),
                     learning_rate: float = 3e-4, shared_torso: bool = True,
                     **kwargs) -> PpoAgent:
  """Builds a PpoAgent with an ActorCriticNetwork and Adam (kwargs: PpoAgent's)."""
  network = actor_critic.ActorCriticNetwork(time_step_spec.observation, action_spec,
                                            fc_layer_params, shared_torso=shared_torso)
  return PpoAgent(time_step_spec, action_spec, network,
                  tf.keras.optimizers.Adam(learning_rate), train_step, gamma=gamma, **kwargs)

"""An actor-critic policy whose info carries the behaviour distribution and value.

IMPALA/APPO need the behaviour policy's distribution parameters of every acted step
(for importance weights; for squashed Gaussians also the pre-squash sample), and CLEAR
also its value estimate (for value cloning); writers store `policy_step.info` with
each step, so the policy emits them.
"""
import tensorflow as tf
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

from tfrl.networks import action_heads

LOGITS = action_heads.LOGITS
VALUE = 'value'


class ActorCriticPolicy(tf_policy.TFPolicy):
  """Samples from the action head of an `ActorCriticNetwork`."""

  def __init__(self, time_step_spec, action_spec, network, name=None):
    """Args:
      time_step_spec, action_spec: the environment's specs.
      network: a `tfrl.networks.ActorCriticNetwork`.
      name: policy name.
    """
    info_spec = dict(network.head.info_spec, **{VALUE: tf.TensorSpec([], tf.float32)})
    super().__init__(time_step_spec, action_spec, policy_state_spec=network.state_spec,
                     info_spec=info_spec, name=name)
    self._network = network

  def _variables(self):
    return self._network.variables

  def _action(self, time_step, policy_state, seed=None):
    del seed  # the head samples with TensorFlow's global generator
    (params, value), state = self._network(time_step.observation, time_step.step_type,
                                           policy_state)
    action, extras = self._network.head.sample(params)
    return policy_step.PolicyStep(action, state, dict(params, **extras, **{VALUE: value}))

  def _distribution(self, time_step, policy_state):
    (params, value), state = self._network(time_step.observation, time_step.step_type,
                                           policy_state)
    head = self._network.head
    # The info describes the mode (what a greedy policy built on this one sends).
    return policy_step.PolicyStep(head.distribution(params), state,
                                  dict(params, **head.mode_extras(params),
                                       **{VALUE: value}))

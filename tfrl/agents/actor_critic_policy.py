"""A categorical actor-critic policy whose info carries the behaviour logits and value.

IMPALA/APPO need the behaviour policy's logits of every acted step (for importance
weights), and CLEAR also its value estimate (for value cloning); writers store
`policy_step.info` with each step, so the policy emits both.
"""
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

LOGITS = 'logits'
VALUE = 'value'


class ActorCriticPolicy(tf_policy.TFPolicy):
  """Samples from Categorical(logits) of an `ActorCriticNetwork`."""

  def __init__(self, time_step_spec, action_spec, network, name=None):
    """Args:
      time_step_spec, action_spec: the environment's specs.
      network: a `tfrl.networks.ActorCriticNetwork`.
      name: policy name.
    """
    info_spec = {LOGITS: tf.TensorSpec([network.num_actions], tf.float32),
                 VALUE: tf.TensorSpec([], tf.float32)}
    super().__init__(time_step_spec, action_spec, policy_state_spec=(),
                     info_spec=info_spec, name=name)
    self._network = network

  def _variables(self):
    return self._network.variables

  def _distribution(self, time_step, policy_state):
    (logits, value), _ = self._network(time_step.observation, time_step.step_type)
    distribution = tfp.distributions.Categorical(logits=logits,
                                                 dtype=self.action_spec.dtype)
    return policy_step.PolicyStep(distribution, policy_state,
                                  {LOGITS: logits, VALUE: value})

"""What IMPALA and PPO share: an actor-critic network, its policies, time-major data."""
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.policies import greedy_policy

from tfrl.agents import actor_critic_policy
from tfrl.networks import actor_critic


class ActorCriticAgentBase(tf_agent.TFAgent):
  """A TFAgent over an `ActorCriticNetwork` trained on `[B, T+1]` unrolls.

  The collect policy samples from the network's logits and records them (and the value)
  in its info; the greedy policy takes the most likely action.
  """

  def __init__(self, time_step_spec, action_spec, network, optimizer,
               train_step_counter: tf.Variable, name: str):
    """Args:
      time_step_spec, action_spec: the environment's specs.
      network: an `ActorCriticNetwork`.
      optimizer: a Keras optimizer.
      train_step_counter: the learner's step variable.
      name: agent name.
    """
    tf.Module.__init__(self, name=name)
    actor_critic.create_variables(network, time_step_spec.observation)
    # Slots now: a subclass may step the optimizer inside a tf.while_loop, where
    # variables cannot be created.
    optimizer.build(network.trainable_variables)
    self._network = network
    self._optimizer = optimizer
    collect = actor_critic_policy.ActorCriticPolicy(time_step_spec, action_spec, network)
    super().__init__(time_step_spec, action_spec,
                     policy=greedy_policy.GreedyPolicy(collect), collect_policy=collect,
                     train_sequence_length=None, train_step_counter=train_step_counter)

  def _initialize(self):
    return tf.no_op()

  @staticmethod
  def time_major(experience):
    """[B, T, ...] -> [T, B, ...] for every leaf of a batch-major Trajectory."""
    return tf.nest.map_structure(
        lambda x: tf.transpose(x, [1, 0] + list(range(2, x.shape.rank))), experience)

"""What IMPALA and PPO share: an actor-critic network, its policies, time-major data, and
losses and gradient steps that mean the same under every `tf.distribute` strategy.

Under a strategy with N replicas, each replica trains on its shard of the batch. For the
result to equal one replica training on the whole batch, three things must be global:

- Normalizers. A loss is a sum over valid steps divided by their count; each replica
  divides its local sum by the count over *all* replicas, so the replicas' losses (and
  their gradients) sum to the loss of the whole batch. The Learner SUM-reduces the loss
  info it reports, so every reported field is a replica's share in the same way.
- Gradient clipping. The global norm is taken of the summed gradients, so gradients are
  all-reduced first, clipped, and applied without the optimizer's own aggregation.
- Statistics used inside the loss (advantage normalization): moments over all replicas.

With one replica (the default strategy) the all-reductions are skipped and nothing
changes. Summaries are written from the global values.
"""
from typing import Mapping, Optional, Sequence, Type

import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.policies import greedy_policy

from tfrl import replicas
from tfrl.agents import actor_critic_policy
from tfrl.agents import hyperparameters as hyperparameters_lib
from tfrl.networks import actor_critic


def write_summaries(prefix: str, names: Sequence[str], local_shares: Sequence[tf.Tensor],
                    step: tf.Variable) -> None:
  """Writes scalars whose global value is the SUM of the replicas' shares."""
  values = tf.unstack(replicas.sum_over_replicas(tf.stack(list(local_shares))))
  for name, value in zip(names, values):
    tf.summary.scalar(f'{prefix}/{name}', value, step=step)


class ActorCriticAgentBase(tf_agent.TFAgent):
  """A TFAgent over an `ActorCriticNetwork` trained on `[B, T+1]` unrolls.

  The collect policy samples from the network's action head and records its parameters
  (and the value) in its info; the greedy policy takes the distribution's mode.
  """

  def __init__(self, time_step_spec, action_spec, network, optimizer,
               train_step_counter: tf.Variable, name: str,
               hyperparameters: Mapping[str, float]):
    """Args:
      time_step_spec, action_spec: the environment's specs.
      network: an `ActorCriticNetwork`.
      optimizer: a Keras optimizer.
      train_step_counter: the learner's step variable.
      name: agent name.
      hyperparameters: the loss settings the subclass reads from variables (beside the
        optimizer's learning rate, unless that is a schedule).
    """
    tf.Module.__init__(self, name=name)
    actor_critic.create_variables(network, time_step_spec.observation)
    # Slots now: a subclass may step the optimizer inside a tf.while_loop, where
    # variables cannot be created.
    optimizer.build(network.trainable_variables)
    self._network = network
    self._optimizer = optimizer
    rate = hyperparameters_lib.rate_of(optimizer)
    self._hyperparameters = hyperparameters_lib.untracked(
        self, hyperparameters_lib.Hyperparameters(
            **({'learning_rate': rate} if rate is not None else {}),
            **{key: float(value) for key, value in hyperparameters.items()}))
    collect = actor_critic_policy.ActorCriticPolicy(time_step_spec, action_spec, network)
    super().__init__(time_step_spec, action_spec,
                     policy=greedy_policy.GreedyPolicy(collect), collect_policy=collect,
                     train_sequence_length=None, train_step_counter=train_step_counter)

  @property
  def hyperparameters(self) -> hyperparameters_lib.Hyperparameters:
    """What population-based training may change while the agent trains."""
    return self._hyperparameters

  def _initialize(self):
    return tf.no_op()

  def initial_network_state(self, policy_state):
    """The network state an unroll starts from: the stored one for a recurrent network.

    Raises:
      ValueError: a recurrent network trained without its unrolls' starting states.
    """
    if not self._network.is_recurrent:
      return ()
    if policy_state is None:
      raise ValueError(f'{self.name} has a recurrent network: train it on unrolls with '
                       "their starting states (the 'policy_state' train input).")
    return tuple(policy_state)

  def update_normalizer(self, experience, after=()) -> None:
    """Folds a batch-major [B, T+1] batch's observations, all but each row's bootstrap
    step (the next unroll's first), into the network's observation normalizer, if it
    has one.

    Called after the batch's gradient steps (as tf-agents' PPOAgent does): the loss
    then normalizes with the statistics the behaviour policy acted with, so that at a
    learning rate of 0 every importance ratio is 1. Folding the batch in first moved
    the statistics under the stored behaviour log-probs.

    Args:
      experience: the batch-major Trajectory just trained on.
      after: tensors (a nest) of the gradient steps, which the update waits for: in a
        graph, the loss's reads of the statistics come before their assignment.
    """
    with tf.control_dependencies(tf.nest.flatten(after)):
      self._network.update_normalizer(
          tf.nest.map_structure(lambda x: x[:, :-1], experience.observation))

  @staticmethod
  def time_major(experience):
    """[B, T, ...] -> [T, B, ...] for every leaf of a batch-major Trajectory."""
    return tf.nest.map_structure(
        lambda x: tf.transpose(x, [1, 0] + list(range(2, x.shape.rank))), experience)

  def apply_gradients(self, tape: tf.GradientTape, loss: tf.Tensor,
                      clip_norm=None) -> tf.Tensor:
    """One optimizer step on the network from a replica's share of the loss.

    Args:
      tape: the tape that recorded `loss`.
      loss: this replica's share (local sum / global count) of the batch's loss.
      clip_norm: clip the global norm of the summed gradients to this (None: no clip).

    Returns:
      The global norm of the summed gradients, before clipping.
    """
    variables = self._network.trainable_variables
    gradients = replicas.sum_over_replicas(tape.gradient(loss, variables))
    if clip_norm:
      gradients, norm = tf.clip_by_global_norm(gradients, clip_norm)
    else:
      norm = tf.linalg.global_norm(gradients)
    # Already summed: the optimizer must not sum the replicas' copies again. (The
    # argument is the one both Keras 2 optimizer families read.)
    self._optimizer.apply_gradients(zip(gradients, variables),
                                    experimental_aggregate_gradients=False)
    return norm


def create_agent(agent_class: Type[ActorCriticAgentBase], time_step_spec, action_spec,
                 train_step: tf.Variable, gamma: float, learning_rate: float,
                 fc_layer_params: Sequence[int] = (64, 64), shared_torso: bool = True,
                 lstm_size: Optional[int] = None, cnn: str = 'nature',
                 normalize_observations: bool = False, activation: str = 'tanh',
                 initial_log_scale: float = 0.0, continuous_head: str = 'tanh',
                 initializer: str = 'orthogonal', adam_epsilon: float = 1e-7,
                 **agent_kwargs) -> ActorCriticAgentBase:
  """Builds `agent_class` with an `ActorCriticNetwork` and Adam.

  What `create_ppo_agent` and `create_impala_agent` share: they pass their keyword
  arguments through, so a config binds these under the builder's own name
  (`create_ppo_agent.lstm_size = 64`).

  Args:
    agent_class: `PpoAgent` or `ImpalaAgent`.
    time_step_spec, action_spec: the environment's specs.
    train_step: the learner's step variable.
    gamma: the discount.
    learning_rate: Adam's learning rate.
    fc_layer_params: hidden layers of the encoder's MLPs (see `ActorCriticNetwork`).
    shared_torso: see `ActorCriticNetwork`.
    lstm_size: units of an LSTM core (None: a feed-forward policy).
    cnn: the CNN for image observations: 'nature', 'impala', 'grid' or a callable (see
      `tfrl.networks.encoders.make_encoder`).
    normalize_observations: normalize float observations by running statistics the
      agent updates from each training batch (see `ActorCriticNetwork`).
    activation: the MLPs' hidden activation ('tanh'; RL-Zoo's MuJoCo PPO uses 'relu').
    initial_log_scale: continuous actions' starting log standard deviation (SB3's
      log_std_init; -2 makes the first policy nearly deterministic).
    continuous_head: 'tanh' squashes continuous samples into the bounds, 'clipped'
      clips them (SB3's way; see `tfrl.networks.action_heads`).
    initializer: how the dense layers start: 'orthogonal', or 'fan_in_uniform' (SB3's
      ortho_init=False; see `ActorCriticNetwork`).
    adam_epsilon: Adam's epsilon (Keras' default 1e-7; SB3's PPO, CleanRL and OpenAI
      Baselines use 1e-5, which damps the steps of parameters with small gradients).
    **agent_kwargs: any other `agent_class` argument.

  Returns:
    The agent.

  Raises:
    ValueError: an observation or action spec the network cannot serve, or bad agent
      arguments.
  """
  network = actor_critic.ActorCriticNetwork(time_step_spec.observation, action_spec,
                                            fc_layer_params, shared_torso=shared_torso,
                                            lstm_size=lstm_size, cnn=cnn,
                                            normalize_observations=normalize_observations,
                                            activation=activation,
                                            initial_log_scale=initial_log_scale,
                                            continuous_head=continuous_head,
                                            initializer=initializer)
  return agent_class(time_step_spec, action_spec, network,
                     tf.keras.optimizers.Adam(learning_rate, epsilon=adam_epsilon),
                     train_step, gamma=gamma,
                     **agent_kwargs)

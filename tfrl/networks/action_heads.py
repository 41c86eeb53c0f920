"""The action head of an actor-critic network: its layer, and how its outputs are
sampled, stored and scored.

A head turns the torso's features into distribution parameters (a dict of tensors),
which the policy stores in each step's info so the learner can score the behaviour
policy later (IMPALA's importance ratios, PPO's old log-probs, CLEAR's cloning KL).

- `CategoricalHead` (discrete actions 0..A-1): {'logits'}.
- `TanhGaussianHead` (bounded continuous actions): {'loc', 'log_scale'}, a diagonal
  Gaussian whose log standard deviation is a learned vector independent of the input
  (as PPO reference implementations use). The policy samples u ~ N(loc, scale) and
  sends a = center + half_range * tanh(u), which always lies within the bounds; u is
  stored as 'raw_action', and log pi(a) = log N(u) - log |da/du| is the log-density of
  the action actually sent. (Clipping an unbounded Gaussian sample instead, as SB3
  does, sends an action whose probability is not the one the loss uses.) The entropy
  is the sent action's too: the Gaussian's plus E[log |da/du|], by quadrature
  (`policy_gradient.tanh_gaussian_entropy`; the Gaussian's alone keeps rising with the
  scale while the sent action's falls, so an entropy bonus on it pushed policies to
  saturated bang-bang actions). The KL of two squashed policies equals the Gaussians'.
- `ClippedGaussianHead` (bounded continuous actions, SB3's way): the same parameters
  and stored sample u, but the env gets clip(u) to the bounds and the loss scores
  log N(u). The loss then scores the sample, not the action sent (at a bound many u
  send the same action), but a policy reaches full torque by moving its mean past the
  bound, where tanh needs an ever larger mean. An option, not the default: on PPO
  HalfCheetah over 5 seeds its return at 200k env steps is within seed noise of the
  tanh head's (docs/results/ppo.md, "PPO on HalfCheetah-v5 at 200k env steps: each
  departure from RL-Zoo"), and a first check on 4 seeds, in the changelog of
  docs/results/index.md, left half its seeds stuck.
"""
import abc
from typing import Any, Dict, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.distributions import utils as distribution_utils
from tf_agents.specs import tensor_spec

from tfrl.losses import cloning
from tfrl.losses import policy_gradient

LOGITS = 'logits'
LOC = 'loc'
LOG_SCALE = 'log_scale'
RAW_ACTION = 'raw_action'

Params = Dict[str, tf.Tensor]


class ActionHead(tf.keras.layers.Layer, abc.ABC):
  """features -> distribution parameters; and the family's sampling and scoring."""

  def __init__(self, action_spec, name: str):
    super().__init__(name=name)
    self.action_spec = action_spec

  @property
  @abc.abstractmethod
  def info_spec(self) -> Dict[str, tf.TensorSpec]:
    """What a policy step's info stores for the learner (parameters and extras)."""

  @abc.abstractmethod
  def sample(self, params: Params) -> Tuple[tf.Tensor, Params]:
    """(action sent to the env, info extras beyond the parameters)."""

  @abc.abstractmethod
  def distribution(self, params: Params) -> tfp.distributions.Distribution:
    """The action distribution (its `mode()` is the greedy action)."""

  def mode_extras(self, params: Params) -> Params:
    """The info extras of the greedy action (as `sample` gives for a sample)."""
    del params
    return {}

  @abc.abstractmethod
  def log_prob(self, params: Params, action: tf.Tensor, info: Params) -> tf.Tensor:
    """log pi(action) per step; `info` is the step's stored info (for its extras)."""

  @abc.abstractmethod
  def entropy(self, params: Params) -> tf.Tensor:
    """The entropy (bonus) per step."""

  @abc.abstractmethod
  def kl(self, behaviour: Params, params: Params) -> tf.Tensor:
    """KL(behaviour || params) per step; no gradient into `behaviour`."""


class CategoricalHead(ActionHead):
  """Softmax over A discrete actions."""

  def __init__(self, action_spec, dense):
    """Args:
      action_spec: a scalar integer spec with minimum 0.
      dense: (units, gain) -> a Dense layer (the network's initializer).
    """
    super().__init__(action_spec, name='categorical_head')
    self.num_actions = int(action_spec.maximum) + 1
    # Small initial logits: the first policy is close to uniform.
    self._logits = dense(self.num_actions, 0.01)

  def call(self, features):
    return {LOGITS: self._logits(features)}

  @property
  def info_spec(self):
    return {LOGITS: tf.TensorSpec([self.num_actions], tf.float32)}

  def sample(self, params):
    return self.distribution(params).sample(), {}

  def distribution(self, params):
    return tfp.distributions.Categorical(logits=params[LOGITS],
                                         dtype=self.action_spec.dtype)

  def log_prob(self, params, action, info):
    del info
    return policy_gradient.categorical_log_prob(params[LOGITS], action)

  def entropy(self, params):
    return policy_gradient.categorical_entropy(params[LOGITS])

  def kl(self, behaviour, params):
    return cloning.policy_cloning_loss(behaviour[LOGITS], params[LOGITS])


class _GaussianHead(ActionHead):
  """A diagonal Gaussian over a pre-bound sample u, with a learned input-independent
  log standard deviation; subclasses say how u meets the action bounds."""

  def __init__(self, action_spec, dense, initial_log_scale: float, name: str):
    """Args:
      action_spec: a bounded float spec of shape [D] (or scalar).
      dense: (units, gain) -> a Dense layer (the network's initializer).
      initial_log_scale: the starting log standard deviation of u.
      name: the layer name.
    """
    super().__init__(action_spec, name=name)
    self._shape = tuple(action_spec.shape.as_list())
    self.action_size = int(tf.TensorShape(self._shape).num_elements())
    self._loc = dense(self.action_size, 0.01)
    self._log_scale = self.add_weight(
        name='log_scale', shape=[self.action_size], trainable=True,
        initializer=tf.keras.initializers.Constant(initial_log_scale))
    self._low = np.broadcast_to(action_spec.minimum, self._shape).astype(np.float32).ravel()
    self._high = np.broadcast_to(action_spec.maximum,
                                 self._shape).astype(np.float32).ravel()

  def call(self, features):
    loc = self._loc(features)
    return {LOC: loc, LOG_SCALE: tf.broadcast_to(self._log_scale, tf.shape(loc))}

  @property
  def info_spec(self):
    vector = tf.TensorSpec([self.action_size], tf.float32)
    return {LOC: vector, LOG_SCALE: vector, RAW_ACTION: vector}

  @abc.abstractmethod
  def _bound(self, u: tf.Tensor) -> tf.Tensor:
    """[..., D] samples -> the [..., D] actions sent, within the bounds."""

  def _shaped(self, flat_action):
    return tf.reshape(flat_action, tf.concat([tf.shape(flat_action)[:-1], self._shape], 0))

  def sample(self, params):
    u = params[LOC] + tf.exp(params[LOG_SCALE]) * tf.random.normal(tf.shape(params[LOC]))
    return tf.cast(self._shaped(self._bound(u)), self.action_spec.dtype), {RAW_ACTION: u}

  def _reshaped(self, distribution):
    """A distribution over flat [D] actions as one over the spec's shape."""
    return tfp.distributions.TransformedDistribution(
        distribution, tfp.bijectors.Reshape(self._shape, [self.action_size]))

  def mode_extras(self, params):
    return {RAW_ACTION: params[LOC]}

  def entropy(self, params):
    return policy_gradient.gaussian_entropy(params[LOG_SCALE])

  def kl(self, behaviour, params):
    return cloning.gaussian_policy_cloning_loss(behaviour[LOC], behaviour[LOG_SCALE],
                                                params[LOC], params[LOG_SCALE])


class TanhGaussianHead(_GaussianHead):
  """A diagonal Gaussian squashed into the action bounds by tanh (module docstring)."""

  def __init__(self, action_spec, dense, initial_log_scale: float = 0.0):
    """Args:
      action_spec: a bounded float spec of shape [D] (or scalar).
      dense: (units, gain) -> a Dense layer (the network's initializer).
      initial_log_scale: the starting log standard deviation (before tanh).
    """
    super().__init__(action_spec, dense, initial_log_scale, name='tanh_gaussian_head')
    self._center = (self._high + self._low) / 2.0
    self._half_range = (self._high - self._low) / 2.0
    # The bounds as a flat spec, for tf-agents' squashed Normal (the greedy mode).
    self._flat_spec = tensor_spec.BoundedTensorSpec([self.action_size], tf.float32,
                                                    self._low, self._high)

  def _bound(self, u):
    return self._center + self._half_range * tf.tanh(u)

  def distribution(self, params):
    normal = tfp.distributions.Normal(params[LOC], tf.exp(params[LOG_SCALE]))
    return self._reshaped(distribution_utils.SquashToSpecNormal(normal, self._flat_spec))

  def entropy(self, params):
    return policy_gradient.tanh_gaussian_entropy(params[LOC], params[LOG_SCALE],
                                                 self._half_range)

  def log_prob(self, params, action, info):
    del action  # scored by its pre-squash sample: tanh's inverse is unstable at bounds
    u = info[RAW_ACTION]
    return (policy_gradient.gaussian_log_prob(params[LOC], params[LOG_SCALE], u) -
            policy_gradient.tanh_log_det_jacobian(u, self._half_range))


class ClippedGaussianHead(_GaussianHead):
  """A diagonal Gaussian whose samples are clipped to the action bounds (module
  docstring)."""

  def __init__(self, action_spec, dense, initial_log_scale: float = 0.0):
    """Args:
      action_spec: a bounded float spec of shape [D] (or scalar).
      dense: (units, gain) -> a Dense layer (the network's initializer).
      initial_log_scale: the starting log standard deviation.
    """
    super().__init__(action_spec, dense, initial_log_scale, name='clipped_gaussian_head')

  def _bound(self, u):
    return tf.clip_by_value(u, self._low, self._high)

  def distribution(self, params):
    # A Normal truncated to the bounds: its mode is the greedy action clip(loc), the
    # mode of the clipped Gaussian too (the policy samples with `sample`).
    truncated = tfp.distributions.TruncatedNormal(params[LOC], tf.exp(params[LOG_SCALE]),
                                                  self._low, self._high)
    return self._reshaped(tfp.distributions.Independent(truncated, 1))

  def log_prob(self, params, action, info):
    del action  # scored by its unclipped sample, as SB3 does
    return policy_gradient.gaussian_log_prob(params[LOC], params[LOG_SCALE],
                                             info[RAW_ACTION])


CONTINUOUS_HEADS = ('tanh', 'clipped')


def make_head(action_spec, dense, initial_log_scale: float = 0.0,
              continuous_head: str = 'tanh') -> ActionHead:
  """The head for `action_spec`: categorical for integer actions from 0, a Gaussian
  for bounded float actions (starting at `initial_log_scale`).

  Args:
    action_spec: the action spec.
    dense: (units, gain) -> a Dense layer (the network's initializer).
    initial_log_scale: continuous actions' starting log standard deviation.
    continuous_head: how a Gaussian sample meets the bounds: 'tanh' squashes it
      (`TanhGaussianHead`), 'clipped' clips it (`ClippedGaussianHead`).

  Returns:
    The head.

  Raises:
    ValueError: an action spec no head serves, or an unknown continuous_head.
  """
  if continuous_head not in CONTINUOUS_HEADS:
    raise ValueError(f'continuous_head must be one of {CONTINUOUS_HEADS}, got '
                     f'{continuous_head!r}.')
  if action_spec.dtype.is_integer:
    if action_spec.shape.rank != 0 or int(action_spec.minimum) != 0:
      raise ValueError(f'Discrete actions must be a scalar from 0, got {action_spec}.')
    return CategoricalHead(action_spec, dense)
  if action_spec.dtype.is_floating:
    if not all(hasattr(action_spec, bound) for bound in ('minimum', 'maximum')):
      raise ValueError(f'Continuous actions need bounds, got {action_spec}.')
    head_class = TanhGaussianHead if continuous_head == 'tanh' else ClippedGaussianHead
    return head_class(action_spec, dense, initial_log_scale=initial_log_scale)
  raise ValueError(f'No action head for {action_spec}.')


def params_of(info: Dict[str, Any], head: ActionHead) -> Params:
  """The distribution parameters within a stored info dict."""
  return {name: info[name] for name in head.info_spec if name != RAW_ACTION}

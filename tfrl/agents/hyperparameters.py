"""Settings an agent's train step reads from variables, so they can change while it runs.

Population-based training (`learners.pbt`) changes a member's learning rate, entropy
cost, clip ratio, reward scale, discount or exploration between its train calls. Were
these Python floats, `tf.function` would bake them into the traced train step: a new
value would need a new trace (seconds, and a leak of graphs), and a checkpoint would not
hold it. Here each is a scalar `tf.Variable` the loss reads, so an `assign` takes effect on the next train
step of the same traced function.

They are checkpointed beside the agent, not inside it: `tfrl.learner.Learner` adds them
to its checkpoint's extras, which a checkpoint written before an agent had them may lack
(the job then resumes with the config's values) where the agent itself must match.

An agent that has them exposes `agent.hyperparameters`: every tfrl agent with an
optimizer does, each listing its own in its file (PPO, IMPALA / APPO / CLEAR, DQN, SAC,
CQL-SAC, IQL, BC), and its builder declares the same names
(`tfrl.agents.interface.tunable`) so a population's bounds are checked at configuration,
before any member starts. `of(agent)` also gives any other tf-agents agent with one Keras
optimizer (`agent._optimizer`) its learning rate.

An agent with several optimizers names each rate after its part (`actor_learning_rate`,
`critic_learning_rate`, ...). tf-agents' SAC keeps legacy Keras optimizers, whose rate
becomes a variable only when first read: `rate_of` reads it at construction, so the
variable exists (and is the one the optimizer steps with) before the population sets it.
"""
from typing import Dict, Mapping, Optional, Union

import tensorflow as tf

Number = Union[int, float]


class NotTunable(ValueError):
  """An agent lacks a hyperparameter a population wants to change (a configuration
  error: every member of the population runs the same config, so none can train)."""


class Hyperparameters(tf.Module):
  """Named scalar variables, tracked (and so checkpointed) with the agent that owns them.

  Floats become float32 variables and ints int64 ones; a value that is already a
  `tf.Variable` is adopted as it is (a Keras optimizer's learning rate, which the
  optimizer reads and checkpoints itself). Create it where the agent's variables are
  created (inside a distribution strategy's scope).
  """

  def __init__(self, name: str = 'hyperparameters', **values: Union[Number, tf.Variable]):
    """Args:
      name: the module's name.
      **values: each hyperparameter's initial value or variable.

    Raises:
      TypeError: a value that is not an int, a float or a scalar variable.
    """
    super().__init__(name=name)
    self._variables: Dict[str, tf.Variable] = {}
    for key, value in values.items():
      self._variables[key] = _as_variable(key, value)

  @property
  def names(self) -> tuple:
    """The hyperparameters' names, in the order they were given."""
    return tuple(self._variables)

  def __getitem__(self, key: str) -> tf.Variable:
    return self._variables[self._known(key)]

  def __contains__(self, key: str) -> bool:
    return key in self._variables

  def values(self) -> Dict[str, Number]:
    """{name: current value} as Python numbers."""
    return {key: _python(variable) for key, variable in self._variables.items()}

  def assign(self, values: Mapping[str, Number]) -> None:
    """Sets some of them; the next train step reads the new values.

    Raises:
      KeyError: a name this agent has no hyperparameter of (the error lists them).
      ValueError: a value that is not finite.
    """
    for key in values:
      self._known(key)
    for key, value in values.items():
      variable = self._variables[key]
      if variable.dtype.is_floating:
        value = float(value)
        if not tf.math.is_finite(value):
          raise ValueError(f'hyperparameter {key} must be finite, got {value}')
      else:
        value = int(value)
      variable.assign(tf.cast(value, variable.dtype))

  def _known(self, key: str) -> str:
    if key not in self._variables:
      raise KeyError(f'no hyperparameter {key!r}; this agent has: '
                     f'{", ".join(self._variables) or "none"}')
    return key


def rate_of(optimizer) -> Optional[tf.Variable]:
  """The learning-rate variable of a Keras optimizer, legacy (`tf.keras.optimizers.legacy`,
  what tf-agents' SAC converts its optimizers to) or not; None for a schedule.

  A legacy optimizer creates its hyperparameter variables on first read (`_get_hyper`),
  in the distribution strategy it was made under: read here, once the agent is built,
  they exist before a population assigns them, and a checkpoint holds them as it would
  after the first step.

  Args:
    optimizer: a Keras optimizer.

  Returns:
    Its learning-rate variable, or None when its rate is a schedule.
  """
  # A Keras 2.11+ optimizer given a schedule answers `learning_rate` with the variable
  # it writes the schedule's value into at every step: a population's value there
  # would be overwritten at once.
  schedule = getattr(optimizer, '_learning_rate', None)
  if isinstance(schedule, tf.keras.optimizers.schedules.LearningRateSchedule):
    return None
  rate = getattr(optimizer, 'learning_rate', None)
  return rate if isinstance(rate, tf.Variable) else None


def tunable_variable(value: Number, name: str) -> tf.Variable:
  """A scalar variable for a setting an agent's loss reads (a discount). Keep it on the
  agent without a checkpoint dependency (`owner._no_dependency`), as `untracked` does:
  the Learner saves it with the hyperparameters.

  Args:
    value: its initial value: a float makes a float32 variable, an int an int64 one.
    name: the variable's name.

  Returns:
    The variable (create it inside the distribution strategy's scope).

  Raises:
    TypeError: a value that is not an int or a float.
  """
  return _as_variable(name, value)


def require(agent, names) -> Hyperparameters:
  """The agent's hyperparameters, checked to include every one of `names`.

  Args:
    agent: a tf-agents agent.
    names: the hyperparameters a population will set.

  Returns:
    `of(agent)`.

  Raises:
    NotTunable: the agent has none, or lacks one of `names` (one line naming them).
  """
  hyperparameters = of(agent)
  kind = type(agent).__name__
  if hyperparameters is None:
    raise NotTunable(f'{kind} has no hyperparameters a population can change (see '
                     'tfrl.agents.hyperparameters)')
  missing = [name for name in names if name not in hyperparameters]
  if missing:
    raise NotTunable(f'{kind} has no hyperparameter {", ".join(missing)} a population can '
                     f'change; it has: {", ".join(hyperparameters.names) or "none"}')
  return hyperparameters


def _as_variable(key: str, value) -> tf.Variable:
  if isinstance(value, tf.Variable):
    if value.shape.rank != 0:
      raise TypeError(f'hyperparameter {key} must be a scalar, got shape {value.shape}')
    return value
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise TypeError(f'hyperparameter {key} must be an int or a float, got {value!r}')
  dtype = tf.int64 if isinstance(value, int) else tf.float32
  return tf.Variable(value, dtype=dtype, trainable=False, name=key)


def _python(variable: tf.Variable) -> Number:
  value = variable.numpy()
  return float(value) if variable.dtype.is_floating else int(value)


def untracked(owner: tf.Module, hyperparameters: Hyperparameters) -> Hyperparameters:
  """`hyperparameters`, to be kept on `owner` without joining its checkpoint (see the
  module docstring): `owner._hyperparameters = untracked(owner, ...)`."""
  return owner._no_dependency(hyperparameters)  # pylint: disable=protected-access


def of(agent) -> Optional[Hyperparameters]:
  """The agent's hyperparameters: its own (`agent.hyperparameters`), or for another
  agent with a single Keras optimizer (`agent._optimizer`) its learning rate; None
  when it has neither."""
  own = getattr(agent, 'hyperparameters', None)
  if isinstance(own, Hyperparameters):
    return own
  optimizer = getattr(agent, '_optimizer', None)
  rate = None if optimizer is None else rate_of(optimizer)
  if rate is not None:  # the optimizer's own variable, adopted: no copy
    return Hyperparameters(learning_rate=rate)
  return None

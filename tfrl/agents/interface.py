"""What a trainer asks of an agent beyond tf-agents' `TFAgent`, and the check of it.

An agent builder names the data layout its agents train from (`trains_from`), so a
config names the agent and nothing else about where its data comes from.

An agent may declare (each optional; any tf-agents agent trains without them):
- `train_inputs`: names of the sample fields its `train` takes besides `experience`
  and `weights`, from `KNOWN_INPUTS` (e.g. 'replay_mask' for CLEAR's cloning,
  'policy_version' for a maximum policy lag). The data layout supplies them or refuses
  the agent by name.
- `priorities(loss_info)`: per-row priorities for prioritized replay (DQN: |TD error|).
- `collect_policy_for_task(task_id, num_tasks)`: the collect policy of one of several
  collectors, e.g. a spread of exploration rates (Ape-X).
- `on_policy = True`: its loss assumes the data was acted by the policy it trains
  (PPO), so separate collectors are paced to the trainer (`learners.job.pacing`).
  tf-agents' PPOAgent counts as on-policy without saying so.
- `hyperparameters`: a `tfrl.agents.hyperparameters.Hyperparameters`, the settings its
  train step reads from variables (what population-based training may change).

A builder may also declare the action spaces its agents act in (`acts_in`), so that a
config pairing it with an env of another kind fails at configuration, naming both, and the
hyperparameters its agents expose (`tunable`), so that a population's bounds on one they
lack fail at configuration, before any member starts.

A builder takes (time_step_spec, action_spec, train_step, gamma=) and may also declare
`dataset_dir=` (the job's offline dataset, `Experiment.dataset_dir`, None without one)
and `num_train_steps=` (the job's length), for settings that come from the data or the
run (IQL's reward scale, its actor's rate annealed over the run). `offered_kwargs` picks what
a builder declares.

`check_agent` runs when a job builds its agent: a declaration with a misspelt name
(`train_input`), an unknown input, or an input its `train` does not accept is an
error that names it, not a feature silently switched off.
"""
import difflib
import functools
import inspect
from typing import Any, Callable, Optional, Tuple

import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.ppo import ppo_agent
from tf_agents.policies import tf_policy

from tfrl.agents import hyperparameters as hyperparameters_lib

# The declarations `check_agent` knows.
PROTOCOL = ('train_inputs', 'priorities', 'collect_policy_for_task', 'on_policy',
            'hyperparameters')
# Sample fields a layout can supply (`tfrl.layouts`): each unroll's policy version per
# step, a recurrent policy's state at the first step, 1.0 on replayed rows (CLEAR).
KNOWN_INPUTS = ('policy_version', 'policy_state', 'replay_mask')
# How close (difflib's ratio) an attribute name must be to a protocol name to be taken
# for a misspelling of it.
_MISSPELLING_RATIO = 0.85
# Where a builder's layout is recorded.
_LAYOUT_ATTRIBUTE = 'tfrl_data_layout'
# Where a builder's action spaces are recorded, and the kinds there are.
_ACTIONS_ATTRIBUTE = 'tfrl_action_kinds'
# Where a builder's tunable hyperparameters are recorded.
_TUNABLE_ATTRIBUTE = 'tfrl_tunable'
ACTION_KINDS = ('discrete', 'continuous')


class AgentProtocolError(ValueError):
  """An agent's declaration that tfrl cannot honour (the message names it)."""


def trains_from(layout_class: type) -> Callable[[Callable], Callable]:
  """Marks an agent builder with the data layout its agents train from.

  Put it under `@gin.configurable`:

      @gin.configurable
      @interface.trains_from(tfrl.layouts.TransitionReplay)
      def create_my_agent(time_step_spec, action_spec, train_step, gamma=0.99): ...

  Args:
    layout_class: a `tfrl.layouts.Layout` subclass.

  Returns:
    A decorator that returns the builder itself, marked.
  """
  def mark(builder: Callable) -> Callable:
    setattr(builder, _LAYOUT_ATTRIBUTE, layout_class)
    return builder
  return mark


def layout_of(builder: Callable) -> type:
  """The layout class `builder` (or the builder a `functools.partial` wraps) names.

  Raises:
    AgentProtocolError: the builder names no layout.
  """
  target = builder
  layout_class = getattr(target, _LAYOUT_ATTRIBUTE, None)
  while layout_class is None and isinstance(target, functools.partial):
    target = target.func
    layout_class = getattr(target, _LAYOUT_ATTRIBUTE, None)
  if layout_class is None:
    name = getattr(target, '__qualname__', repr(target))
    raise AgentProtocolError(
        f'The agent builder {name} names no data layout: decorate it with '
        '@tfrl.agents.interface.trains_from(<layout>), e.g. tfrl.layouts.TransitionReplay '
        '(DQN, SAC), SequenceQueue (PPO, IMPALA) or SequenceQueueAndReplay (CLEAR).')
  return layout_class


def acts_in(*kinds: str) -> Callable[[Callable], Callable]:
  """Marks an agent builder with the action spaces its agents act in, so a job that
  pairs it with an env of another kind is refused at configuration
  (`learners.configuration.experiment_checks`). Put it under `@gin.configurable`.

  Args:
    *kinds: from ACTION_KINDS: 'discrete' (a gymnasium Discrete space) and/or
      'continuous' (a Box).

  Returns:
    A decorator that returns the builder itself, marked.

  Raises:
    ValueError: a kind not in ACTION_KINDS.
  """
  unknown = [k for k in kinds if k not in ACTION_KINDS]
  if unknown or not kinds:
    raise ValueError(f'acts_in{kinds}: kinds are {", ".join(ACTION_KINDS)}.')

  def mark(builder: Callable) -> Callable:
    setattr(builder, _ACTIONS_ATTRIBUTE, tuple(kinds))
    return builder
  return mark


def _mark_of(builder: Callable, attribute: str) -> Optional[Tuple[str, ...]]:
  """`attribute` of `builder`, or of the builder the `functools.partial`s around it
  wrap; None where none carries it."""
  while True:
    mark = getattr(builder, attribute, None)
    if mark is not None or not isinstance(builder, functools.partial):
      return mark
    builder = builder.func


def action_kinds_of(builder: Callable) -> Optional[Tuple[str, ...]]:
  """The action kinds `builder` (or the builder a `functools.partial` wraps) declares
  with `acts_in`; None for a builder that declares none (not checked)."""
  return _mark_of(builder, _ACTIONS_ATTRIBUTE)


def tunable(*names: str) -> Callable[[Callable], Callable]:
  """Marks an agent builder with the names of its agents' `hyperparameters` (what a
  population may change), so bounds on another name are refused at configuration
  (`learners.pbt`). Put it under `@gin.configurable`. A name some settings leave out
  (a learning rate given as a schedule) is still listed: the member refuses it when it
  builds the agent.

  Args:
    *names: the hyperparameters' names.

  Returns:
    A decorator that returns the builder itself, marked.
  """
  def mark(builder: Callable) -> Callable:
    setattr(builder, _TUNABLE_ATTRIBUTE, tuple(names))
    return builder
  return mark


def tunable_of(builder: Callable) -> Optional[Tuple[str, ...]]:
  """The hyperparameter names `builder` (or the builder a `functools.partial` wraps)
  declares with `tunable`; None for a builder that declares none (not checked)."""
  return _mark_of(builder, _TUNABLE_ATTRIBUTE)


def offered_kwargs(builder: Callable, **offered: Any) -> dict:
  """The keyword arguments of `offered` that `builder` (a function, a gin-configurable
  or a `functools.partial` of one) declares by name."""
  parameters = inspect.signature(builder).parameters
  return {name: value for name, value in offered.items() if name in parameters}


def train_inputs(agent: tf_agent.TFAgent) -> Tuple[str, ...]:
  """The sample fields `agent.train` takes as keyword arguments (beyond experience)."""
  return tuple(getattr(agent, 'train_inputs', ()))


def priorities_fn(agent: tf_agent.TFAgent) -> Optional[Callable[[tf_agent.LossInfo],
                                                                  tf.Tensor]]:
  """`agent.priorities` (loss info -> one priority per row), or None if it has none."""
  return getattr(agent, 'priorities', None)


def collect_policy(agent: tf_agent.TFAgent, task_id: int = 0,
                   num_tasks: int = 1) -> tf_policy.TFPolicy:
  """The collect policy of collector `task_id` of `num_tasks`.

  Agents without `collect_policy_for_task` give every collector `agent.collect_policy`.
  Either way the policy's variables are the agent's, so pulling the learner's
  variables into `agent.collect_policy.variables()` updates it.
  """
  for_task = getattr(agent, 'collect_policy_for_task', None)
  if for_task is None or num_tasks < 2:
    return agent.collect_policy
  return for_task(task_id, num_tasks)


def on_policy(agent: tf_agent.TFAgent) -> bool:
  """Whether `agent` must train on data of the policy it trains (see the module doc)."""
  return isinstance(agent, ppo_agent.PPOAgent) or bool(getattr(agent, 'on_policy', False))


def check_agent(agent: Any) -> None:
  """Checks `agent`'s declarations (see the module docstring).

  Raises:
    AgentProtocolError: an attribute whose name is a near miss of a declaration's, a
      train input outside `KNOWN_INPUTS` or not a parameter of the agent's `_train`,
      `priorities` or `collect_policy_for_task` that is not callable, an `on_policy`
      that is not a bool, or `hyperparameters` of another type.
  """
  kind = type(agent).__name__
  for name in _public_names(agent):
    close = difflib.get_close_matches(name, PROTOCOL, n=1, cutoff=_MISSPELLING_RATIO)
    if close and close[0] != name:
      raise AgentProtocolError(
          f'{kind} defines {name!r}, which tfrl does not read; did you mean '
          f'{close[0]!r}? (the declarations: {", ".join(PROTOCOL)})')
  for name in train_inputs(agent):
    if name not in KNOWN_INPUTS:
      raise AgentProtocolError(
          f'{kind}.train_inputs names {name!r}, which no data layout supplies '
          f'(they supply: {", ".join(KNOWN_INPUTS)}).')
    if not _train_accepts(agent, name):
      raise AgentProtocolError(
          f"{kind}.train_inputs names {name!r}, but {kind}._train has no parameter "
          f'{name!r} to take it.')
  for name in ('priorities', 'collect_policy_for_task'):
    value = getattr(agent, name, None)
    if value is not None and not callable(value):
      raise AgentProtocolError(f'{kind}.{name} must be a method, got {value!r}.')
  value = getattr(agent, 'on_policy', False)
  if not isinstance(value, bool):
    raise AgentProtocolError(f'{kind}.on_policy must be True or False, got {value!r}.')
  value = getattr(agent, 'hyperparameters', None)
  if value is not None and not isinstance(value, hyperparameters_lib.Hyperparameters):
    raise AgentProtocolError(f'{kind}.hyperparameters must be a tfrl.agents.'
                             f'hyperparameters.Hyperparameters, got {value!r}.')


def _public_names(agent: Any) -> set:
  """Names on the agent's class hierarchy and instance, without private ones."""
  names = set(vars(agent)) if hasattr(agent, '__dict__') else set()
  for cls in type(agent).__mro__:
    names.update(vars(cls))
  return {name for name in names if not name.startswith('_')}


def _train_accepts(agent: Any, name: str) -> bool:
  """Whether `agent._train` (where tf-agents sends train's keywords) takes `name`."""
  train = getattr(agent, '_train', None)
  if train is None:
    return False
  parameters = inspect.signature(train).parameters
  return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD
                                   for p in parameters.values())

"""Configuration-time checks of every `Experiment` field and the common flags.

One rule per field, in one table: the type and range (or choices) a field accepts,
with the text that says so. A bad value fails as one line naming the field, the value
and what is allowed, e.g. `Experiment.num_envs = 0: must be an integer >= 1`, before
anything is built (the programs turn it into 'error: ...' and exit status 2), rather
than as a ZeroDivisionError or a TensorFlow shape error from deep inside a build.
Cross-field rules that the data layouts own (batch_size against num_envs and items)
stay there and fail at the same time, from `Experiment.__post_init__`.
"""
import dataclasses
import functools
import numbers
import os
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple


class ValidationError(ValueError):
  """A setting outside what it accepts; `message` is one line naming it (str() may
  carry more: gin appends the configurable it was raised in)."""

  def __init__(self, message: str):
    super().__init__(message)
    self.message = message


class Rule(NamedTuple):
  """What one field accepts: `check(value)` is True for a good value; `allowed` says
  which values those are, for the message."""
  check: Callable[[Any], bool]
  allowed: str


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(minimum: int) -> Rule:
  return Rule(lambda v: _is_int(v) and v >= minimum, f'must be an integer >= {minimum}')


def number(low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False) -> Rule:
  """A real number in [low, high] (or an open end where asked)."""
  def check(v):
    if not _is_number(v) or v != v:  # NaN compares unequal to itself
      return False
    if low is not None and (v <= low if low_open else v < low):
      return False
    return high is None or (v < high if high_open else v <= high)
  if low is not None and high is not None:
    text = (f'must be a number in {"(" if low_open else "["}{low:g}, {high:g}'
            f'{")" if high_open else "]"}')
  elif low is not None:
    text = f'must be a number {">" if low_open else ">="} {low:g}'
  else:
    text = 'must be a number'
  return Rule(check, text)


def optional(rule: Rule) -> Rule:
  return Rule(lambda v: v is None or rule.check(v), f'{rule.allowed}, or None')


def choice(options: Sequence[str]) -> Rule:
  return Rule(lambda v: v in options, f'must be one of {", ".join(map(repr, options))}')


def sequence_of(item_check: Callable[[Any], bool], what: str) -> Rule:
  return Rule(lambda v: v is None or (isinstance(v, (tuple, list)) and len(v) > 0 and
                                       all(item_check(i) for i in v)),
              f'must be None or a non-empty tuple of {what}')


BOOLEAN = Rule(lambda v: isinstance(v, bool), 'must be True or False')
NONEMPTY_STRING = Rule(lambda v: isinstance(v, str) and bool(v.strip()),
                       'must be a non-empty string')
ENV = Rule(lambda v: (isinstance(v, str) and bool(v.strip())) or callable(v) or
           _is_gym_env(v),
           "must be a gymnasium id, a 'module:function' string, a function returning a "
           'gymnasium env, or an env object')


def _is_gym_env(value) -> bool:
  import gymnasium  # pylint: disable=g-import-not-at-top (only when an object is given)
  return isinstance(value, gymnasium.Env)

def _env_step_counts(value) -> bool:
  """An integer >= 0, or a non-empty tuple of integers >= 1."""
  if _is_int(value):
    return value >= 0
  return (isinstance(value, (tuple, list)) and len(value) > 0 and
          all(_is_int(i) and i >= 1 for i in value))

# Every Experiment field, by name. A field absent from Experiment is skipped, so a rule
# may precede its field (env_step_timeout_s comes from the watchdog work).
EXPERIMENT_RULES: Dict[str, Rule] = {
    'env_name': ENV,
    'observation_indices': sequence_of(_is_int, 'integers'),
    'observation_keys': sequence_of(lambda i: isinstance(i, str), 'strings'),
    'frame_stack': integer(0),
    'atari': BOOLEAN,
    'terminal_on_life_loss': BOOLEAN,
    'fire_reset': BOOLEAN,
    'clip_reward': BOOLEAN,
    'normalize_reward': BOOLEAN,
    'env_backend': choice(('gymnasium', 'envpool')),  # tfrl.envs.BACKENDS (a test checks)
    'seed': integer(0),
    'deterministic': BOOLEAN,
    'agent_fn': Rule(callable, 'must be a callable (an agent builder)'),
    'layout_settings': Rule(lambda v: v is None or isinstance(v, dict),
                            'must be None or a dict of the layout\'s settings'),
    'gamma': number(0.0, 1.0),
    'num_envs': integer(1),
    'env_workers': integer(0),
    'batch_size': integer(1),
    'samples_per_insert': optional(number(0.0, low_open=True)),
    'initial_collect_steps': integer(0),
    'collect_steps_per_iteration': integer(1),
    'train_steps_per_iteration': integer(1),
    'num_train_steps': integer(1),
    'eval_interval': integer(1),
    'eval_every_env_steps': optional(integer(1)),
    'log_interval': optional(integer(1)),
    'max_train_seconds': optional(number(0.0, low_open=True)),
    'dataset_dir': optional(NONEMPTY_STRING),
    'record_dir': optional(NONEMPTY_STRING),
    'num_eval_episodes': integer(1),
    'target_return': optional(number()),
    'num_confirm_episodes': integer(1),
    'max_eval_envs': integer(1),
    'checkpoint_interval': integer(1),
    'max_checkpoints_to_keep': integer(1),
    'policy_checkpoint_interval': integer(1),
    'saved_model_interval': optional(integer(1)),
    'summary_interval': integer(0),
    'env_step_timeout_s': number(0.0),  # 0 disables the env step timeout
    'tasks': sequence_of(lambda v: isinstance(v, str) and bool(v.strip()),
                         "env names (gymnasium ids or 'module:function' strings)"),
    'task_mode': choice(('sequence', 'multi_task')),
    'task_env_steps': Rule(_env_step_counts, 'must be an integer >= 0, or a tuple of '
                           'integers >= 1 (one per task)'),
    'task_target_returns': sequence_of(_is_number, 'numbers'),
    'task_cycles': integer(1),
    'task_index_input': BOOLEAN,
}


# Every data layout's own setting (`tfrl.layouts`), by name; the same name means the same
# thing in every layout that has it.
LAYOUT_RULES: Dict[str, Rule] = {
    'n_step': integer(1),
    'steps_per_item': integer(1),
    'capacity': integer(1),
    'prioritized': BOOLEAN,
    'priority_exponent': number(0.0),
    'importance_sampling_exponent': number(0.0, 1.0),
    'shuffle_buffer_batches': integer(0),
    'dataset_fraction': optional(number(0.0, 1.0, low_open=True, high_open=True)),
    'dataset_capacity': integer(1),
    'cast_dataset_dtypes': BOOLEAN,
    'dataset_only_steps': integer(0),
    'online_every': integer(1),
    'unroll_length': integer(1),
    'queue_capacity': integer(1),
    'replay_capacity': integer(1),
    'replay_fraction': number(0.0, 1.0, low_open=True, high_open=True),
    'replay_remover': choice(('reservoir', 'fifo')),
}
# Layout fields the job sets (Experiment's num_envs, batch_size, gamma, num_train_steps).
JOB_LAYOUT_FIELDS = ('num_envs', 'batch_size', 'gamma', 'beta_anneal_steps')

_RATE = number(0.0, 1.0, low_open=True)
_COST = number(0.0)
_POSITIVE = number(0.0, low_open=True)
_LAYERS = Rule(lambda v: isinstance(v, (tuple, list)) and all(_is_int(i) and i >= 1
                                                              for i in v),
               'must be a tuple of layer sizes (integers >= 1)')
# The agent builders' settings (tfrl.agents: bound in gin on the builder, or a
# functools.partial's keywords), by parameter name; the same name means the same thing
# in every builder that has it. A builder's setting not named here is not checked.
AGENT_RULES: Dict[str, Rule] = {
    'learning_rate': _RATE,
    'actor_learning_rate': _RATE,
    'critic_learning_rate': _RATE,
    'alpha_learning_rate': _RATE,
    'value_learning_rate': _RATE,
    'cql_alpha_learning_rate': _RATE,
    'adam_epsilon': _POSITIVE,
    'gamma': number(0.0, 1.0),
    'lambda_': number(0.0, 1.0),
    'clip_ratio': number(0.0, 1.0, low_open=True),
    'ppo_clip_ratio': optional(number(0.0, 1.0, low_open=True)),
    'value_clip': optional(_POSITIVE),
    'entropy_cost': _COST,
    'value_cost': _COST,
    'baseline_cost': _COST,
    'policy_cloning_cost': _COST,
    'value_cloning_cost': _COST,
    'cql_alpha': _COST,
    'num_epochs': integer(1),
    'num_minibatches': integer(1),
    'num_cql_samples': integer(1),
    'target_update_period': integer(1),
    'target_update_tau': number(0.0, 1.0, low_open=True),
    'epsilon_start': number(0.0, 1.0),
    'epsilon_end': number(0.0, 1.0),
    'epsilon_decay_steps': integer(0),
    'gradient_clipping': optional(_POSITIVE),
    'global_gradient_clipping': optional(_POSITIVE),
    'expectile': number(0.0, 1.0, low_open=True, high_open=True),
    'temperature': _POSITIVE,
    'max_weight': _POSITIVE,
    'reward_scale': _POSITIVE,
    'reward_scale_factor': optional(_POSITIVE),
    'max_policy_lag': optional(integer(0)),
    'replay_burn_in_steps': integer(0),
    'lstm_size': optional(integer(1)),
    'fc_layer_params': _LAYERS,
    'actor_fc_layer_params': _LAYERS,
    'critic_joint_fc_layer_params': _LAYERS,
    'value_fc_layer_params': _LAYERS,
}


PORT = Rule(lambda v: _is_int(v) and 0 <= v <= 65535,
            'must be a port number in [0, 65535] (0: pick a free one)')
# The programs' own flags that take a range, by flag name.
FLAG_RULES: Dict[str, Rule] = {
    'port': PORT,
    'num_collectors': integer(1),
    'status_interval_s': number(0.0, low_open=True),
    'timeout_s': number(0.0),
    'summary_interval_s': number(0.0, low_open=True),
    'stall_timeout_s': number(0.0),
}


def check_flags(flag_values, names: Sequence[str]) -> None:
  """Checks the flags `names` of `flag_values` against FLAG_RULES.

  Args:
    flag_values: absl FLAGS, or a program's options (`config.options_from_flags`): any
      object with the flags as attributes.
    names: the flags to check.

  Raises:
    ValidationError: '--<name> = <value>: <allowed>' for the first bad one.
  """
  for name in names:
    value = getattr(flag_values, name)
    if not FLAG_RULES[name].check(value):
      raise ValidationError(f'--{name} = {_describe(value)}: {FLAG_RULES[name].allowed}')


def _describe(value) -> str:
  return repr(value) if isinstance(value, str) else str(value)


def check_value(owner: str, name: str, value, rule: Rule) -> None:
  """Raises ValidationError('<owner>.<name> = <value>: <allowed>') unless `rule` holds."""
  if not rule.check(value):
    raise ValidationError(f'{owner}.{name} = {_describe(value)}: {rule.allowed}')


def validate_experiment(experiment) -> None:
  """Checks every field of `experiment` that has a rule, the cross-field rule of
  env_workers, and that env_name is a registered gymnasium id or an env factory.

  Args:
    experiment: an `Experiment` (any dataclass with its field names).

  Raises:
    ValidationError: the first bad field, in one line; an unknown env id lists close
      registered ids.
  """
  # A field without a rule is not checked here (tests/learners/test_bad_input.py
  # fails until it has one), so a new field never stops every program at start-up.
  for field in dataclasses.fields(experiment):
    rule = EXPERIMENT_RULES.get(field.name)
    if rule is not None:
      check_value('Experiment', field.name, getattr(experiment, field.name), rule)
  if experiment.env_workers > experiment.num_envs:
    raise ValidationError(
        f'Experiment.env_workers = {experiment.env_workers}: must be at most '
        f'Experiment.num_envs ({experiment.num_envs}): each worker steps at least one env')
  check_env_id(experiment.env_name)
  for task in getattr(experiment, 'tasks', None) or ():
    check_env_id(task, field='tasks')


def _unwrapped(agent_fn) -> Tuple[Callable, Dict[str, Any]]:
  """(the builder inside any functools.partials, their keywords, outer ones last)."""
  keywords: Dict[str, Any] = {}
  while isinstance(agent_fn, functools.partial):
    keywords = {**agent_fn.keywords, **keywords}
    agent_fn = agent_fn.func
  return agent_fn, keywords


def _gin_bindings(configurable) -> Dict[str, Any]:
  import gin  # pylint: disable=g-import-not-at-top (gin: only where agents are configured)
  try:
    return dict(gin.get_bindings(configurable))
  except ValueError:  # not a gin configurable: nothing bound on it
    return {}


def validate_agent_settings(agent_fn, agent_classes: Sequence[type] = ()) -> None:
  """Checks the agent's settings against AGENT_RULES: what gin binds on the builder and
  on `agent_classes`, and a functools.partial's keywords.

  Args:
    agent_fn: `Experiment.agent_fn` (a builder, maybe inside functools.partial).
    agent_classes: gin-configurable agent classes a config may bind settings on
      (`tfrl.agents.builders.AGENT_CLASSES`).

  Raises:
    ValidationError: '<owner>.<name> = <value>: <allowed>' for the first bad one.
  """
  builder, keywords = _unwrapped(agent_fn)
  owners = [(getattr(builder, '__name__', type(builder).__name__),
             {**_gin_bindings(builder), **keywords})]
  owners += [(cls.__name__, _gin_bindings(cls)) for cls in agent_classes]
  for owner, settings in owners:
    for name, value in sorted(settings.items()):
      rule = AGENT_RULES.get(name)
      if rule is not None:
        check_value(owner, name, value, rule)


def validate_layout_settings(layout_class: type, settings: Dict[str, Any]) -> None:
  """Checks a layout's own settings (gin-bound and `Experiment.layout_settings`).

  Args:
    layout_class: the `tfrl.layouts` class the agent trains from.
    settings: setting name -> value.

  Raises:
    ValidationError: '<Layout>.<name> = <value>: <allowed>' for the first bad value; a
      name the layout does not have, or one the job sets, names the layout's settings.
  """
  owner = layout_class.__name__
  own = [field.name for field in dataclasses.fields(layout_class)
         if field.name not in JOB_LAYOUT_FIELDS]
  for name, value in settings.items():
    if name not in own:
      where = ('the Experiment sets it' if name in JOB_LAYOUT_FIELDS
               else f'{owner} has no such setting')
      raise ValidationError(f'{owner}.{name} = {_describe(value)}: {where} (its settings: '
                            f'{", ".join(own)})')
    check_value(owner, name, value, LAYOUT_RULES[name])


def check_env_id(env, field: str = 'env_name') -> None:
  """Raises ValidationError naming `env` (as Experiment.`field`) unless it is a
  registered id (close registered ids named) or resolves to an env factory
  (`tfrl.envs.sources`)."""
  import tfrl.envs  # pylint: disable=g-import-not-at-top (gymnasium's registry)
  from tfrl.envs import sources  # pylint: disable=g-import-not-at-top
  try:
    source = sources.resolve(env)
    if source.env_id is not None:
      tfrl.envs.check_registered(source.env_id)
  except (tfrl.envs.UnknownEnvironmentError, ValueError) as e:
    raise ValidationError(f'Experiment.{field} = {env!r}: {e}') from e


def check_root_dir(root_dir: Optional[str], flag: str = '--root_dir') -> None:
  """Raises ValidationError unless `root_dir` is a directory or can become one.

  Raises:
    ValidationError: it is empty, a regular file, or below a regular file; a remote
      path (gs://...) whose filesystem TensorFlow lacks or cannot reach.
  """
  if not root_dir:
    raise ValidationError(f'{flag} is required: the job directory')
  if '://' in root_dir and not root_dir.startswith('file://'):  # gs://, ...
    import tensorflow as tf  # pylint: disable=g-import-not-at-top (local paths need none)
    try:
      is_file = tf.io.gfile.exists(root_dir) and not tf.io.gfile.isdir(root_dir)
    except tf.errors.OpError as e:  # no such filesystem, no network, no credentials
      reason = ' '.join(e.message.split())
      raise ValidationError(f'{flag} = {root_dir}: cannot be reached ({reason})') from e
    if is_file:
      raise ValidationError(f'{flag} = {root_dir}: is a file; it must be a directory (or '
                            'a path where one can be made)')
    return
  path = os.path.abspath(root_dir)
  while path and not os.path.exists(path):
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  if not os.path.isdir(path):
    what = 'is a file' if path == os.path.abspath(root_dir) else f'is below the file {path}'
    raise ValidationError(f'{flag} = {root_dir}: {what}; it must be a directory (or a '
                          'path where one can be made)')

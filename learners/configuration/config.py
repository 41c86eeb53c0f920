"""What every program shares of its configuration: gin parsing, with errors that name
the problem, and options declared once as dataclass fields that are also its flags."""
import dataclasses
import os
import re
import sys
import typing
from typing import Any, List, NoReturn, Optional, Sequence, Tuple

from absl import flags
import gin

from learners.configuration import validation

# The flags `define_flags` defines below belong to the program that asks for them (its
# --helpshort, and absl's duplicate-flag check), not to this module.
flags.disclaim_key_flags()

# The bundled configs: learners/configs, beside the programs that name them.
CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'configs')


class ConfigError(ValueError):
  """A gin file that does not exist, or a binding gin cannot apply."""


def resolve_gin_file(path: str) -> str:
  """Returns `path`, or `learners/configs/<path>` when only that exists, absolute (gin
  tries each search location before a relative path, and logs an error line for every
  location where it is not).

  Raises:
    ConfigError: neither exists (the message lists the bundled configs).
  """
  for candidate in (path, os.path.join(CONFIG_DIR, path)):
    if os.path.isfile(candidate):
      return os.path.abspath(candidate)
  bundled = sorted(f for f in os.listdir(CONFIG_DIR) if f.endswith('.gin'))
  raise ConfigError(f'gin file {path!r} not found (bundled configs in {CONFIG_DIR}: '
                    f'{", ".join(bundled)}).')


def parse(gin_files: Sequence[str] = (), gin_bindings: Sequence[str] = ()
          ) -> 'experiment.Experiment':
  """Parses gin files and bindings (later ones win).

  Returns:
    The `Experiment` they bind, checked: what a program passes to its body.

  Raises:
    ConfigError: a missing file, a binding gin cannot parse or apply (unknown
      configurable or parameter, a syntax error, an `import` that fails), or
      `Experiment` settings it rejects.
  """
  files = [resolve_gin_file(f) for f in gin_files]
  # Registers Experiment and the agent builders with gin (imports TensorFlow).
  from learners.configuration import experiment  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  # `include 'dqn_cartpole.gin'` in a config means the bundled file. Searched first,
  # so gin does not log a "Path not found" error for the cwd-relative try.
  prefixes = gin.config._LOCATION_PREFIXES  # pylint: disable=protected-access
  if CONFIG_DIR not in prefixes:
    prefixes.insert(0, CONFIG_DIR)
  where = f'{", ".join(files) or "no files"}; bindings {list(gin_bindings)}'
  try:
    gin.parse_config_files_and_bindings(files, list(gin_bindings))
  except Exception as e:  # pylint: disable=broad-except
    # gin raises ValueError, KeyError, SyntaxError, ImportError or TypeError (from a
    # configurable's code): all of them are this configuration's fault.
    raise ConfigError(f'Bad gin configuration ({where}): {_one_line(e)}') from e
  try:
    exp = experiment.Experiment()
  except validation.ValidationError as e:  # already one line naming the field
    raise ConfigError(e.message) from e
  except (ValueError, TypeError) as e:
    raise ConfigError(f'Invalid Experiment settings ({where}): {_one_line(e)}') from e
  check_agent_fits_env(exp)
  return exp


def check_agent_fits_env(exp: 'experiment.Experiment') -> None:
  """`experiment_checks.check_agent_fits_env`, naming the bundled configs.

  Raises:
    ConfigError: the agent cannot act in the env's action space.
  """
  from learners.configuration import experiment_checks  # pylint: disable=g-import-not-at-top (TF)
  try:
    experiment_checks.check_agent_fits_env(exp, bundled_configs())
  except ValueError as e:
    raise ConfigError(str(e)) from e


_SETTING = re.compile(r"^\s*Experiment\.(env_name|agent_fn)\s*=\s*['\"@]?([\w/:.-]+)")
_INCLUDE = re.compile(r"^\s*include\s+['\"]([^'\"]+)['\"]")


def _config_settings(path: str) -> dict:
  """Experiment.env_name and agent_fn as the gin file at `path` and its includes set
  them (read as text: no gin parse)."""
  settings = {}
  with open(path) as f:
    for line in f:
      include = _INCLUDE.match(line)
      if include:
        settings.update(_config_settings(resolve_gin_file(include.group(1))))
      setting = _SETTING.match(line)
      if setting:
        settings[setting.group(1)] = setting.group(2)
  return settings


def bundled_configs() -> List[Tuple[str, Optional[str], Optional[str]]]:
  """(file name, env_name, agent builder name) of every bundled config."""
  summaries = []
  for name in sorted(os.listdir(CONFIG_DIR)):
    if name.endswith('.gin'):
      settings = _config_settings(os.path.join(CONFIG_DIR, name))
      summaries.append((name, settings.get('env_name'), settings.get('agent_fn')))
  return summaries


def _one_line(error: BaseException) -> str:
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text}' if isinstance(error, SyntaxError) else text


def fail(message: str) -> NoReturn:
  """Ends a program on bad input: 'error: <message>' on stderr, exit status 2."""
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


def option(default: Any, help_text: str, choices: Optional[Sequence[str]] = None
           ) -> Any:
  """Declares one program option: a dataclass field that is also its flag.

  `define_flags` defines the flag of the field's name from it; `options_from_flags`
  reads it back. The flag's type comes from the field's annotation: bool, int, float,
  str (an enum with `choices`), `Optional` of one of them, or `List[str]` (a
  repeatable flag).

  Args:
    default: the option's default, also the flag's (a list is copied per instance).
    help_text: what the option does: the flag's --help text and the field's documentation.
    choices: the values a str option accepts.

  Returns:
    A `dataclasses.Field` for the options dataclass.
  """
  metadata = {'help': help_text, 'choices': None if choices is None else list(choices)}
  if isinstance(default, list):
    return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def shared_option(name: str) -> Any:
  """A field for the common flag `name` (see `CommonOptions`): its default, and no flag
  of its own (the common flags define it once for every program)."""
  common = {f.name: f for f in dataclasses.fields(CommonOptions)}[name]
  return dataclasses.field(default=common.default, metadata={'shared': True})


@dataclasses.dataclass(frozen=True)
class CommonOptions:
  """The flags of every program (see `define_common_flags`); each field's help is in its
  metadata."""
  root_dir: Optional[str] = option(
      None, 'The job directory: checkpoints, summaries, policies, logs.')
  gin_file: List[str] = option(
      [], 'gin files (repeatable; later ones win); a bare name is looked up in '
      'learners/configs.')
  gin_bindings: List[str] = option(
      [], "gin bindings (repeatable), e.g. 'Experiment.seed = 1'.")
  overwrite: bool = option(
      False, "Start from scratch: delete root_dir's checkpoints and exports and begin a "
      'new run id. Without it a job resumes, or stops with exit status 2 where it cannot '
      'resume.')


@dataclasses.dataclass(frozen=True)
class RayOptions:
  """Where the programs of a launcher (tfrl-launch, tfrl-pbt) run: this host, or a Ray
  cluster (`define_ray_flags`; `learners.processes.ray_backend.from_flags` reads them)."""
  backend: str = option(
      'local', 'local: every program a subprocess of this host. ray: processes placed by '
      "Ray on the cluster at --ray_address (the 'ray' extra; root_dir on a path every "
      'node sees).', choices=['local', 'ray'])
  ray_address: Optional[str] = option(
      None, "The Ray cluster's address (HOST:PORT of its head).")
  ray_resources: str = option(
      '{}', 'JSON: program (tfrl-launch: reverb_server, train, collect, eval; tfrl-pbt: '
      'pbt_member) -> extra Ray resources its process asks for, e.g. '
      '\'{"collect": {"actors": 1}}\' to put collectors on the nodes started with that '
      'custom resource.')


def _flag_definer(field: dataclasses.Field, annotation: Any):
  """The absl DEFINE_* call for `field`, as f(name, default, help, flag_values)."""
  if typing.get_origin(annotation) is typing.Union:  # Optional[X]: the flag of X
    annotation, = [a for a in typing.get_args(annotation) if a is not type(None)]
  choices = field.metadata.get('choices')
  if annotation is str and choices is not None:
    return lambda name, default, text, fv: flags.DEFINE_enum(
        name, default, choices, text, flag_values=fv)
  if (typing.get_origin(annotation) in (list, List) and
      typing.get_args(annotation) == (str,)):
    return lambda name, default, text, fv: flags.DEFINE_multi_string(
        name, default, text, flag_values=fv)
  definers = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
              float: flags.DEFINE_float, str: flags.DEFINE_string}
  if annotation not in definers:
    raise TypeError(f'Option {field.name}: no flag type for {annotation!r}.')
  return lambda name, default, text, fv: definers[annotation](name, default, text,
                                                              flag_values=fv)


def define_flags(options_class: type, flag_values: Any = flags.FLAGS) -> None:
  """Defines a flag for every field of `options_class` declared with `option`.

  A field from `shared_option` gets none: its flag is a common one.

  Args:
    options_class: a dataclass whose fields come from `option` (or `shared_option`).
    flag_values: where to define them (absl's FLAGS).

  Raises:
    TypeError: a field's annotation has no flag type (see `option`).
  """
  hints = typing.get_type_hints(options_class)
  for field in dataclasses.fields(options_class):
    if field.metadata.get('shared'):
      continue
    default = (field.default_factory() if field.default is dataclasses.MISSING
               else field.default)
    _flag_definer(field, hints[field.name])(field.name, default, field.metadata['help'],
                                            flag_values)


def define_common_flags() -> None:
  """Defines --root_dir, --gin_file, --gin_bindings and --overwrite (once per process)."""
  if 'root_dir' not in flags.FLAGS:
    define_flags(CommonOptions)


def define_ray_flags() -> None:
  """Defines --backend, --ray_address and --ray_resources (once per process)."""
  if 'backend' not in flags.FLAGS:
    define_flags(RayOptions)


def define_reverb_address_flag() -> None:
  """Defines --reverb_address, for the programs that connect to a job's server."""
  flags.DEFINE_string('reverb_address', '127.0.0.1:8000', 'host:port of the Reverb server.')


def parse_from_flags(one_process: bool = False) -> 'experiment.Experiment':
  """Checks --root_dir and parses the gin files and bindings given on the command line.

  Args:
    one_process: the program runs the whole job (train_eval); the separate programs
      refuse what only that runs (a task sequence; multi-task they run).

  Returns:
    The `Experiment` they bind, built once here for the program's body.

  Raises:
    SystemExit: status 2 with the error's message, so programs fail fast and clearly
      (see `fail`).
  """
  try:
    validation.check_root_dir(flags.FLAGS.root_dir)
    exp = parse(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings)
    if exp.task_sequence is not None and not one_process:
      fail("Experiment.tasks: a task sequence runs in one process (tfrl-train-eval) for "
           "now; the separate programs take Experiment.task_mode = 'multi_task' (each "
           'collector on one task).')
    return exp
  except validation.ValidationError as e:
    fail(e.message)
  except ConfigError as e:
    fail(str(e))


def options_from_flags(options_class: type, flag_values: Any = flags.FLAGS) -> Any:
  """A program's options dataclass filled from the flags of the same names.

  The program bodies take these options instead of reading FLAGS, so Python (tests,
  notebooks) calls them as the command line does.

  Args:
    options_class: a dataclass declared with `option` (see `define_flags`).
    flag_values: the parsed flags (absl's FLAGS).

  Returns:
    An instance of `options_class`.
  """
  return options_class(**{field.name: getattr(flag_values, field.name)
                          for field in dataclasses.fields(options_class)})

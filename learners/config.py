"""Gin parsing shared by every program, with errors that name the problem."""
import dataclasses
import os
import sys
from typing import Any, NoReturn, Sequence

import gin

from learners import validation

CONFIG_DIR = os.path.join(os.path.dirname(__file__), 'configs')


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


def parse(gin_files: Sequence[str] = (), gin_bindings: Sequence[str] = ()) -> None:
  """Parses gin files and bindings (later ones win).

  Raises:
    ConfigError: a missing file, a binding gin cannot parse or apply (unknown
      configurable or parameter, a syntax error, an `import` that fails), or
      `Experiment` settings it rejects.
  """
  files = [resolve_gin_file(f) for f in gin_files]
  # Registers Experiment and the agent builders with gin (imports TensorFlow).
  from learners import experiment  # pylint: disable=g-import-not-at-top
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
    experiment.Experiment()
  except validation.ValidationError as e:  # already one line naming the field
    raise ConfigError(e.message) from e
  except (ValueError, TypeError) as e:
    raise ConfigError(f'Invalid Experiment settings ({where}): {_one_line(e)}') from e


def _one_line(error: BaseException) -> str:
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text}' if isinstance(error, SyntaxError) else text


def fail(message: str) -> NoReturn:
  """Ends a program on bad input: 'error: <message>' on stderr, exit status 2."""
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


def define_common_flags() -> None:
  """Defines --root_dir, --gin_file, --gin_bindings and --overwrite (once per process)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if 'root_dir' in flags.FLAGS:
    return
  flags.DEFINE_string('root_dir', None, 'The job directory: checkpoints, summaries, '
                      'policies, logs.')
  flags.DEFINE_multi_string('gin_file', [], 'gin files (repeatable; later ones win); a '
                            'bare name is looked up in learners/configs.')
  flags.DEFINE_multi_string('gin_bindings', [],
                            "gin bindings (repeatable), e.g. 'Experiment.seed = 1'.")
  flags.DEFINE_bool('overwrite', False, "Start from scratch: delete root_dir's "
                    'checkpoints and exports and begin a new run id. Without it a job '
                    'resumes, or stops with exit status 2 where it cannot resume.')


def parse_from_flags() -> None:
  """Checks --root_dir and parses the gin files and bindings given on the command line.

  Raises:
    SystemExit: status 2 with the error's message, so programs fail fast and clearly
      (see `fail`).
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  try:
    validation.check_root_dir(flags.FLAGS.root_dir)
    parse(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings)
  except validation.ValidationError as e:
    fail(e.message)
  except ConfigError as e:
    fail(str(e))


def options_from_flags(options_class: type, flag_values: Any) -> Any:
  """A program's options dataclass filled from the flags of the same names.

  The program bodies take these options instead of reading FLAGS, so Python (tests,
  notebooks) calls them as the command line does.
  """
  return options_class(**{field.name: getattr(flag_values, field.name)
                          for field in dataclasses.fields(options_class)})

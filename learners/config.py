"""Gin parsing shared by every program, with errors that name the problem."""
import os
from typing import Sequence

import gin

CONFIG_DIR = os.path.join(os.path.dirname(__file__), 'configs')


class ConfigError(ValueError):
  """A gin file that does not exist, or a binding gin cannot apply."""


def resolve_gin_file(path: str) -> str:
  """Returns `path`, or `learners/configs/<path>` when only that exists.

  Raises:
    ConfigError: neither exists (the message lists the bundled configs).
  """
  for candidate in (path, os.path.join(CONFIG_DIR, path)):
    if os.path.isfile(candidate):
      return candidate
  bundled = sorted(f for f in os.listdir(CONFIG_DIR) if f.endswith('.gin'))
  raise ConfigError(f'gin file {path!r} not found (bundled configs in {CONFIG_DIR}: '
                    f'{", ".join(bundled)}).')


def parse(gin_files: Sequence[str] = (), gin_bindings: Sequence[str] = ()) -> None:
  """Parses gin files and bindings (later ones win).

  Raises:
    ConfigError: a missing file, or a binding of an unknown configurable or parameter.
  """
  files = [resolve_gin_file(f) for f in gin_files]
  gin.clear_config()
  # `include 'dqn_cartpole.gin'` in a config means the bundled file. Searched first,
  # so gin does not log a "Path not found" error for the cwd-relative try.
  prefixes = gin.config._LOCATION_PREFIXES  # pylint: disable=protected-access
  if CONFIG_DIR not in prefixes:
    prefixes.insert(0, CONFIG_DIR)
  try:
    gin.parse_config_files_and_bindings(files, list(gin_bindings))
  except (ValueError, KeyError) as e:
    raise ConfigError(f'Bad gin configuration ({", ".join(files) or "no files"}; '
                      f'bindings {list(gin_bindings)}): {e}') from e


def define_common_flags() -> None:
  """Defines --root_dir, --gin_file and --gin_bindings (once per process)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if 'root_dir' in flags.FLAGS:
    return
  flags.DEFINE_string('root_dir', None, 'The job directory: checkpoints, summaries, '
                      'policies, logs.')
  flags.DEFINE_multi_string('gin_file', [], 'gin files (repeatable; later ones win); a '
                            'bare name is looked up in learners/configs.')
  flags.DEFINE_multi_string('gin_bindings', [],
                            "gin bindings (repeatable), e.g. 'Experiment.seed = 1'.")


def parse_from_flags() -> None:
  """Parses the gin files and bindings given on the command line.

  Raises:
    SystemExit: with the ConfigError's message, so programs fail fast and clearly.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  try:
    parse(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings)
  except ConfigError as e:
    raise SystemExit(f'error: {e}') from e

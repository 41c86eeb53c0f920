"""Which gymnasium ids exist, and which package registers them: 'ALE/...' ids come with
ale-py (tfrl's 'atari' extra), 'MiniGrid-...' with minigrid; 'module:Id-v0' imports
the module; 'tfrl/...' ids are tfrl's toy envs (`tfrl.envs.toy`), registered when first
named. Errors name the id and the extra to install."""
import difflib
import importlib
from typing import Optional, Tuple

import gymnasium as gym

from tfrl.envs import toy


class UnknownEnvironmentError(ValueError):
  """Raised for an environment id that gymnasium has not registered."""


class MissingExtraError(ImportError):
  """Raised when an environment needs a package of a tfrl extra that is not installed."""


# Id prefix -> (the package whose import registers those ids, the tfrl extra with it).
_REGISTERING_PACKAGES = {
    'ALE/': ('ale_py', 'atari'),
    'MiniGrid-': ('minigrid', 'minigrid'),
    'BabyAI-': ('minigrid', 'minigrid'),
}
# A word of a registered entry point -> the tfrl extra its simulator comes with.
_SIMULATOR_EXTRAS = {'box2d': 'box2d', 'mujoco': 'mujoco'}


def missing_extra(env_id: str, extra: str, cause: Exception) -> MissingExtraError:
  return MissingExtraError(
      f"{env_id} needs tfrl's {extra!r} extra: pip install 'tfrl[{extra}]' "
      f'(or, in a clone, .venv/bin/pip install -e ".[{extra}]"); {cause}')


def split_module(env_id: str) -> Tuple[Optional[str], str]:
  """'module:Id-v0' (gymnasium's form for an id a module registers) -> (module, id)."""
  module, colon, name = env_id.partition(':')
  return (module, name) if colon else (None, env_id)


def import_registering_package(env_id: str) -> None:
  """Imports the package that registers `env_id`: the module of a 'module:Id-v0' id,
  ale_py for 'ALE/...', minigrid for 'MiniGrid-...' (and registers tfrl's 'tfrl/...'
  toy envs), so users need no import of their own (and env worker processes, which start fresh, find the ids too).

  Raises:
    MissingExtraError: that package is not installed (names the extra).
    ImportError: the module of a 'module:Id-v0' id cannot be imported.
  """
  module, env_id = split_module(env_id)
  if module is not None:
    importlib.import_module(module)
  if env_id.startswith(toy.NAMESPACE):
    toy.register()
  for prefix, (package, extra) in _REGISTERING_PACKAGES.items():
    if env_id.startswith(prefix) and env_id not in gym.registry:
      try:
        __import__(package)  # both register their ids on import
      except ImportError as e:
        raise missing_extra(env_id, extra, e) from e


def simulator_extra(env_id: str) -> Optional[str]:
  """The extra whose simulator a registered env's entry point names, if any."""
  env_id = split_module(env_id)[1]
  entry_point = str(gym.registry[env_id].entry_point).lower()
  return next((extra for word, extra in _SIMULATOR_EXTRAS.items() if word in entry_point),
              None)


def check_registered(env_id: str) -> None:
  """Raises UnknownEnvironmentError (listing close registered ids) unless `env_id`
  ('module:Id' imports the module first) is a registered gymnasium id."""
  import_registering_package(env_id)
  env_id = split_module(env_id)[1]
  if env_id in gym.registry:
    return
  close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=5, cutoff=0.5)
  hint = f' Close registered ids: {", ".join(close)}.' if close else (
      ' No registered id is close; see gymnasium.pprint_registry().')
  raise UnknownEnvironmentError(
      f'Unknown environment id {env_id!r}.{hint} (Ids of other packages need their '
      'import first, e.g. `import ale_py`.)')

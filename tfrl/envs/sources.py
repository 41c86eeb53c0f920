"""What a job's environments are made from, besides a registered gymnasium id.

`tfrl.envs.make` and `Experiment.env_name` take any of:

- a registered id, 'CartPole-v1' (or 'module:Id-v0', which imports the module that
  registers it);
- 'module:function', an importable function (or class) that returns a gymnasium env,
  the form a program's flags and gin files can name;
- the function itself (any callable returning a gymnasium env);
- an env object, used as a template: every env the job makes is a deep copy of it (a
  job makes several: its collect envs, its eval envs, one to read the specs).

Env worker processes (`num_workers`, `Experiment.env_workers`) are spawned, so what they
build from must pickle: an id, a 'module:function', a module-level function or a
picklable env object.
"""
import copy
import dataclasses
import importlib
import pickle
from typing import Any, Callable, Optional, Union

import gymnasium as gym

EnvLike = Union[str, Callable[..., gym.Env], gym.Env]


@dataclasses.dataclass(frozen=True)
class ImportedFactory:
  """'module:function', imported where it is called (a worker process too)."""
  module: str
  function: str

  def __call__(self, **kwargs) -> gym.Env:
    return getattr(importlib.import_module(self.module), self.function)(**kwargs)

  def __str__(self) -> str:
    return f'{self.module}:{self.function}'


@dataclasses.dataclass(frozen=True)
class CopyOf:
  """Makes deep copies of a template env object."""
  template: gym.Env

  def __call__(self, **kwargs) -> gym.Env:
    if kwargs:
      raise ValueError(f'An env object takes no constructor arguments (got '
                       f'{sorted(kwargs)}): pass a function that makes the env.')
    try:
      return copy.deepcopy(self.template)
    except Exception as e:  # pylint: disable=broad-except (any object's __deepcopy__)
      raise ValueError(f'The env object {self} cannot be copied ({type(e).__name__}: '
                       f'{e}); a job makes several envs: pass a function that makes '
                       'one instead.') from e

  def __str__(self) -> str:
    spec = getattr(self.template, 'spec', None)
    return spec.id if spec is not None else type(self.template.unwrapped).__name__


@dataclasses.dataclass(frozen=True)
class EnvSource:
  """A resolved env argument: a registered id, or a factory of single envs."""
  env_id: Optional[str] = None
  factory: Optional[Callable[..., gym.Env]] = None

  @property
  def name(self) -> str:
    """The id, or the factory's name: what progress lines and errors call the env."""
    if self.env_id is not None:
      return self.env_id
    return str(self.factory) if isinstance(self.factory, (ImportedFactory, CopyOf)) else (
        getattr(self.factory, '__qualname__', None) or repr(self.factory))

  def check_picklable(self) -> None:
    """Raises ValueError unless env worker processes can be sent the factory."""
    if self.factory is None:
      return
    try:
      pickle.dumps(self.factory)
    except Exception as e:  # pylint: disable=broad-except (pickling raises many types)
      raise ValueError(
          f'The env factory {self.name} cannot be sent to env worker processes '
          f'({type(e).__name__}: {e}): define it at module level in an importable '
          "module (or name it as 'module:function'), or use no env workers "
          '(Experiment.env_workers = 0).') from e


def is_registered(env_id: str) -> bool:
  return env_id in gym.registry


def resolve(env: EnvLike) -> EnvSource:
  """The source `env` names (see the module docstring).

  Raises:
    ValueError: 'module:name' whose module cannot be imported, or whose name is neither
      a registered id nor an attribute of the module; anything else that is not a
      string, a callable or a gymnasium env.
  """
  if isinstance(env, gym.Env):
    return EnvSource(factory=CopyOf(env))
  if callable(env):
    return EnvSource(factory=env)
  if not isinstance(env, str):
    raise ValueError(f'An env must be a gymnasium id, a \'module:function\' string, a '
                     f'function returning a gymnasium env or an env object; got {env!r}.')
  module_name, colon, name = env.partition(':')
  if not colon:
    return EnvSource(env_id=env)
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f'Env {env!r}: cannot import {module_name!r} ({e}).') from e
  if is_registered(name):
    return EnvSource(env_id=env)  # 'module:Id-v0': the module registered the id
  if callable(getattr(module, name, None)):
    return EnvSource(factory=ImportedFactory(module_name, name))
  raise ValueError(f'Env {env!r}: {module_name} neither registers the gymnasium id '
                   f'{name!r} nor has a function of that name.')


def display_name(env: Any) -> str:
  """What to call `env` (an id, a factory or an env object) in messages."""
  try:
    return resolve(env).name
  except ValueError:
    return repr(env)

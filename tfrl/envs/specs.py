"""Maps gymnasium spaces to (nested) tf-agents tensor specs."""
from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec

SUPPORTED_SPACES = ('Box', 'Discrete', 'MultiDiscrete', 'MultiBinary', 'Dict', 'Tuple')


def _bound(values: np.ndarray) -> np.ndarray:
  """A Box bound as one scalar when every entry is the same (an image's 0 and 255):
  the spec then prints, and exports into policy_specs.pbtxt, as two numbers rather
  than two arrays of the observation's size."""
  values = np.asarray(values)
  if values.size and np.all(values == values.flat[0]):
    return values.flat[0].copy()
  return values


def space_to_spec(space: gym.Space, name: str = 'observation') -> Any:
  """Returns the tensor spec (a nest of `BoundedTensorSpec`) describing `space`.

  Args:
    space: a single-environment gymnasium space (not a batched vector space).
    name: name given to the spec; nested specs get `name/key` names.

  Returns:
    A `BoundedTensorSpec`, or a dict/tuple of them for `Dict`/`Tuple` spaces.

  Raises:
    TypeError: for a space type that has no fixed-shape tensor form (Text, Graph,
      Sequence, OneOf, custom spaces), naming the space.
  """
  if isinstance(space, gym.spaces.Box):
    # The space's dtype is kept: uint8 pixels stay uint8 (the encoder casts them).
    return tensor_spec.BoundedTensorSpec(
        space.shape, tf.as_dtype(space.dtype), _bound(space.low), _bound(space.high),
        name=name)
  if isinstance(space, gym.spaces.Discrete):
    start = int(space.start)
    return tensor_spec.BoundedTensorSpec(
        (), tf.int64, start, start + int(space.n) - 1, name=name)
  if isinstance(space, gym.spaces.MultiDiscrete):
    start = np.asarray(space.start, dtype=np.int64)
    nvec = np.asarray(space.nvec, dtype=np.int64)
    return tensor_spec.BoundedTensorSpec(
        nvec.shape, tf.int64, start, start + nvec - 1, name=name)
  if isinstance(space, gym.spaces.MultiBinary):
    return tensor_spec.BoundedTensorSpec(space.shape, tf.int8, 0, 1, name=name)
  if isinstance(space, gym.spaces.Dict):
    return {key: space_to_spec(sub, f'{name}/{key}') for key, sub in space.spaces.items()}
  if isinstance(space, gym.spaces.Tuple):
    return tuple(space_to_spec(sub, f'{name}/{i}') for i, sub in enumerate(space.spaces))
  raise TypeError(
      f'tfrl cannot turn the gymnasium space {space!r} ({type(space).__name__}) into a '
      f'tensor spec: it has no fixed shape. Supported spaces: {", ".join(SUPPORTED_SPACES)}. '
      'Wrap the environment (e.g. gymnasium.wrappers.FlattenObservation) to convert it.')

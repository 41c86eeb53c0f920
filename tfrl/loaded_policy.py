"""Loading an exported policy (`tfrl.export`'s writing side makes them): the tf-agents
policy API over `tf.saved_model.load`, and `predict` on numpy observations, greedy or
sampled (a job exports both, side by side: `tfrl.root_dir_layout`)."""
import os
from typing import Any, Dict, Tuple

import numpy as np
import tensorflow as tf
import tree
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl import root_dir_layout

POLICY_SPECS_PBTXT = 'policy_specs.pbtxt'  # the name tf-agents' loader looks for

# What `ExportedPolicy` calls on a loaded export.
_POLICY_FUNCTIONS = ('action', 'get_initial_state', 'get_train_step')


class NotAPolicyError(ValueError):
  """A SavedModel that is not a policy exported by tfrl (or tf-agents' saver)."""


class ExportedPolicy:
  """A loaded export: the policy API on top of `tf.saved_model.load`."""

  def __init__(self, path: str):
    """Loads the SavedModel at `path`.

    Raises:
      FileNotFoundError: `path` holds no SavedModel.
      NotAPolicyError: it holds a SavedModel that is not an exported policy.
    """
    if not tf.saved_model.contains_saved_model(path):
      raise FileNotFoundError(f'No SavedModel at {path!r} (export a policy there with '
                              'tfrl.export.export_policy or a PolicySavedModelTrigger).')
    self.path = path
    specs_path = os.path.join(path, POLICY_SPECS_PBTXT)
    if not tf.io.gfile.exists(specs_path):
      raise NotAPolicyError(f'The SavedModel at {path!r} is not an exported policy: it has '
                            f'no {POLICY_SPECS_PBTXT} (export one with '
                            'tfrl.export.export_policy).')
    self._module = tf.saved_model.load(path)
    missing = [f for f in _POLICY_FUNCTIONS if not hasattr(self._module, f)]
    if missing:
      raise NotAPolicyError(f'The SavedModel at {path!r} is not an exported policy: it has '
                            f'no {", ".join(missing)} function.')
    self._checkpoint = tf.train.Checkpoint(policy=self._module)
    specs = tensor_spec.from_pbtxt_file(os.path.join(path, POLICY_SPECS_PBTXT))
    collect = specs['collect_data_spec']
    self.time_step_spec = ts.TimeStep(collect.step_type, collect.reward, collect.discount,
                                      collect.observation)
    self.action_spec = collect.action
    self.policy_state_spec = specs['policy_state_spec']
    self._siblings: Dict[str, 'ExportedPolicy'] = {}

  def action(self, time_step: ts.TimeStep, policy_state: Any = ()):
    """Returns the PolicyStep for a batched `time_step`."""
    return self._module.action(time_step, policy_state)

  def get_initial_state(self, batch_size: int):
    return self._module.get_initial_state(tf.constant(batch_size, tf.int32))

  def predict(self, observation: Any, state: Any = None,
              episode_start: Any = None, deterministic: bool = True
              ) -> Tuple[np.ndarray, Any]:
    """Acts on numpy observations, as Stable-Baselines3's `model.predict` does.

    Args:
      observation: one observation as the env returns it (an array or a list, or a
        dict of them for Dict observations), or a batch of them (every entry with a
        leading batch dimension); cast to the export's dtypes.
      state: what the previous `predict` of the same episodes returned; None at their
        start (the initial state).
      episode_start: which entries start an episode (a bool, or one per batch entry);
        a recurrent policy's state is reset for them. Default: every entry where
        `state` is None, none otherwise.
      deterministic: True acts greedily (the job's greedy_policy export), False samples
        as the job collected (its collect_policy export, exploration included). Either
        is the export loaded or the one beside it in the same policies directory.

    Returns:
      (action, state): the action as numpy (without a batch dimension for a single
      observation); the state to pass with the next observation, None for a policy
      without state.

    Raises:
      ValueError: an observation whose structure or shape is not the export's,
        naming both; `deterministic` asking for an export that is not beside this one.
    """
    acting = self._sibling(deterministic)
    if acting is not self:
      return acting.predict(observation, state, episode_start, deterministic)
    spec = self.time_step_spec.observation
    observation, batch_size, single = _batched_observation(observation, spec)
    if state is None:
      state = self.get_initial_state(batch_size)
      starts = np.ones([batch_size], bool) if episode_start is None else episode_start
    else:
      starts = np.zeros([batch_size], bool) if episode_start is None else episode_start
    starts = np.broadcast_to(np.asarray(starts, bool).reshape(-1), [batch_size])
    step_type = np.where(starts, ts.StepType.FIRST, ts.StepType.MID).astype(np.int32)
    time_step = ts.TimeStep(
        tf.constant(step_type), tf.zeros([batch_size], self.time_step_spec.reward.dtype),
        tf.ones([batch_size], self.time_step_spec.discount.dtype), observation)
    step = self.action(time_step, state)
    action = tf.nest.map_structure(lambda a: a.numpy()[0] if single else a.numpy(),
                                   step.action)
    has_state = bool(tf.nest.flatten(self.policy_state_spec))
    return action, (tf.nest.map_structure(lambda s: s.numpy(), step.state)
                    if has_state else None)

  def _sibling(self, deterministic: bool) -> 'ExportedPolicy':
    """The export that acts as `deterministic` asks: this one, or the other of the
    greedy/collect pair beside it (loaded once)."""
    greedy, collect = root_dir_layout.GREEDY_POLICY, root_dir_layout.COLLECT_POLICY
    name = os.path.basename(os.path.normpath(self.path))
    wanted = greedy if deterministic else collect
    if name == wanted:
      return self
    if name not in (greedy, collect):  # a lone export acts as it was exported
      if deterministic:
        return self
      raise ValueError(f'predict(deterministic=False) samples with a job\'s {collect} '
                       f'export; {self.path!r} is a lone export: load a {collect} '
                       'export, or predict with deterministic=True.')
    if wanted not in self._siblings:
      path = os.path.join(os.path.dirname(os.path.normpath(self.path)), wanted)
      if not tf.saved_model.contains_saved_model(path):
        raise ValueError(f'predict(deterministic={deterministic}) acts with the {wanted} '
                         f'export, and there is none beside {self.path!r} (a job exports '
                         f'{greedy} and {collect} side by side).')
      self._siblings[wanted] = ExportedPolicy(path)
    return self._siblings[wanted]

  def get_train_step(self) -> int:
    return int(self._module.get_train_step().numpy())

  def get_metadata(self) -> Dict[str, Any]:
    return {k: v.numpy() for k, v in self._module.get_metadata().items()}

  @property
  def model_variables(self):
    return self._module.model_variables

  def update_from_checkpoint(self, checkpoint_path: str) -> None:
    """Applies a variables-only policy checkpoint (from `write_policy_checkpoint`).

    Raises:
      ValueError: the checkpoint does not hold this policy's variables.
    """
    prefix = os.path.join(checkpoint_path, 'variables', 'variables')
    variables = tf.nest.flatten([self._module.model_variables, self._module.train_step,
                                 getattr(self._module, 'metadata', {})])
    backup = [v.read_value() for v in variables]
    try:
      self._checkpoint.read(prefix).assert_existing_objects_matched().expect_partial()
    except (AssertionError, ValueError) as e:
      for variable, value in zip(variables, backup):  # No half-applied update.
        variable.assign(value)
      raise ValueError(f'Checkpoint {checkpoint_path!r} does not match the policy '
                       f'exported at {self.path!r}: {e}') from e


def _batched_observation(observation: Any, spec: Any) -> Tuple[Any, int, bool]:
  """`observation` as tensors with a batch dimension, checked against `spec`.

  Returns:
    (the batched tensors, the batch size, whether `observation` was a single one).

  Raises:
    ValueError: a structure or shape that is neither one observation nor a batch.
  """
  try:
    # Lists become arrays where the spec has a tensor (gymnasium's spaces sample them);
    # anything else there (a dict for a flat spec) becomes an object array: refused.
    arrays = tree.map_structure_up_to(spec, np.asarray, observation)
    if any(a.dtype == object for a in tf.nest.flatten(arrays)):
      raise ValueError('an entry is not an array of numbers')
    tf.nest.assert_same_structure(arrays, spec)
    observation = arrays
  except (ValueError, TypeError) as e:
    raise ValueError(f'The observation must have the structure of the policy\'s '
                     f'observation spec {spec}, got {observation!r}: {e}') from None
  flat = [np.asarray(x) for x in tf.nest.flatten(observation)]
  flat_spec = tf.nest.flatten(spec)
  single = flat[0].ndim == flat_spec[0].shape.rank
  batched = []
  for x, s in zip(flat, flat_spec):
    x = x[None] if single else x
    if x.ndim != s.shape.rank + 1 or not s.shape.is_compatible_with(x.shape[1:]):
      raise ValueError(f'An observation entry of shape {np.shape(x[0] if single else x)}'
                       f' does not fit the policy\'s {s.shape.as_list()} (one '
                       'observation) or [batch] + that (a batch).')
    batched.append(tf.constant(x.astype(s.dtype.as_numpy_dtype)))
  if len({int(x.shape[0]) for x in batched}) > 1:
    raise ValueError('The observation\'s entries have different batch sizes: '
                     f'{[int(x.shape[0]) for x in batched]}.')
  return tf.nest.pack_sequence_as(spec, batched), int(batched[0].shape[0]), single


def load_policy(path: str) -> ExportedPolicy:
  """Loads an export made by `export_policy` (see `ExportedPolicy`).

  Args:
    path: the export's directory; or a job's root_dir or its policies directory, for
      the job's greedy policy (`predict(..., deterministic=False)` then samples from
      its collect policy).

  Returns:
    The loaded policy.

  Raises:
    FileNotFoundError: `path` holds no SavedModel (nor a job's greedy export).
    NotAPolicyError: it holds a SavedModel that is not an exported policy.
  """
  for candidate in (os.path.join(path, root_dir_layout.POLICY_DIR,
                                 root_dir_layout.GREEDY_POLICY),
                    os.path.join(path, root_dir_layout.GREEDY_POLICY)):
    if (not tf.saved_model.contains_saved_model(path) and
        tf.saved_model.contains_saved_model(candidate)):
      return ExportedPolicy(candidate)
  return ExportedPolicy(path)

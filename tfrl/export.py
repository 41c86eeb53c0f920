"""Policy SavedModels that serve without tfrl, tf-agents or TensorFlow Probability.

An export holds only the policy's variables, the train step, metadata variables and
four functions, so nothing in it needs a registered Python type to load:

  action(time_step, policy_state) -> PolicyStep   (what tf-agents' loader calls)
  get_initial_state(batch_size), get_train_step(), get_metadata()
  signatures 'action' (= 'serving_default'), 'get_initial_state', 'get_train_step',
  'get_metadata', with flat named tensors (step_type, reward, discount, observation...)
  policy_specs.pbtxt                                (tf-agents' spec file)

tf-agents' PolicySaver also saves the policy's `distribution` function, whose output
type (a tfp distribution spec) a plain-TensorFlow process cannot rebuild; this one does
not. A variables-only checkpoint (`write_policy_checkpoint`) refreshes a loaded export.
"""
import ctypes
import json
import os
import shutil
import tempfile
from typing import Any, Dict, Optional

import tensorflow as tf
import tree
from tf_agents.policies import tf_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import time_step as ts

POLICY_SPECS_PBTXT = 'policy_specs.pbtxt'  # the name tf-agents' loader looks for


def _flat_names(structure: Any, prefix: str = '') -> list:
  """Signature names for the leaves of `structure`: 'observation_pos', 'action', ..."""
  names = []
  for path, _ in tree.flatten_with_path(structure):
    parts = ([prefix] if prefix else []) + [str(p) for p in path]
    names.append('_'.join(parts) or prefix)
  return names


class PolicyModule(tf.Module):
  """What gets saved: the policy's variables, train step, metadata and functions."""

  def __init__(self, policy: tf_policy.TFPolicy, train_step: Optional[tf.Variable] = None,
               metadata: Optional[Dict[str, tf.Variable]] = None):
    """Args:
      policy: the tf-agents policy to export.
      train_step: the learner's step variable (a new one at 0 when None).
      metadata: name -> tf.Variable, returned by `get_metadata` and refreshed by
        variables-only checkpoints.
    """
    super().__init__(name='policy')
    self.model_variables = list(policy.variables())
    self.train_step = train_step if train_step is not None else tf.Variable(
        0, dtype=tf.int64, trainable=False, name='train_step')
    self.metadata = dict(metadata or {})
    # Specs only: a reference to the policy object itself would be saved too.
    self._policy_specs = {'collect_data_spec': policy.collect_data_spec,
                          'policy_state_spec': policy.policy_state_spec}
    time_step_spec = tensor_spec.add_outer_dims_nest(policy.time_step_spec, (None,))
    state_spec = tensor_spec.add_outer_dims_nest(policy.policy_state_spec, (None,))

    def action(time_step, policy_state):
      step = policy.action(time_step, policy_state)
      return policy_step_lib.PolicyStep(step.action, step.state, step.info)

    self.action = tf.function(action, input_signature=[time_step_spec, state_spec],
                              autograph=False)
    self.get_initial_state = tf.function(
        lambda batch_size: policy.get_initial_state(batch_size),
        input_signature=[tf.TensorSpec((), tf.int32, name='batch_size')], autograph=False)
    self.get_train_step = tf.function(lambda: self.train_step.read_value(),
                                      input_signature=[], autograph=False)
    self.get_metadata = tf.function(
        lambda: {k: v.read_value() for k, v in self.metadata.items()},
        input_signature=[], autograph=False)
    self._time_step_spec = time_step_spec
    self._state_spec = state_spec

  @property
  def policy_specs(self) -> Dict[str, Any]:
    """The specs tf-agents' loader reads from policy_specs.pbtxt."""
    return self._policy_specs

  def signatures(self) -> Dict[str, Any]:
    """Concrete functions with flat, named inputs and dict outputs, for serving.

    Inputs are named after their place in the nest with '_' for nesting
    (step_type, reward, discount, observation or observation_<key>, policy_state_...);
    outputs likewise (action, policy_state_..., info_...).
    """
    flat_ts = tf.nest.flatten(self._time_step_spec)
    flat_state = tf.nest.flatten(self._state_spec)
    names = _flat_names(self._time_step_spec) + _flat_names(self._state_spec,
                                                             'policy_state')
    specs = {n: tf.TensorSpec(s.shape, s.dtype, name=n)
             for s, n in zip(flat_ts + flat_state, names)}

    def flat_action(**inputs):
      flat = [inputs[n] for n in names]
      time_step = tf.nest.pack_sequence_as(self._time_step_spec, flat[:len(flat_ts)])
      state = tf.nest.pack_sequence_as(self._state_spec, flat[len(flat_ts):])
      step = self.action(time_step, state)
      outputs = {}
      for prefix, part in (('action', step.action), ('policy_state', step.state),
                           ('info', step.info)):
        outputs.update(zip(_flat_names(part, prefix), tf.nest.flatten(part)))
      return outputs

    def initial_state(batch_size):
      state = self.get_initial_state(batch_size)
      # A signature must return something: stateless policies return an empty tensor.
      return (dict(zip(_flat_names(state, 'policy_state'), tf.nest.flatten(state))) or
              {'policy_state': tf.zeros([batch_size, 0])})

    def compile_fn(fn, signature):
      return tf.function(fn, input_signature=signature,
                         autograph=False).get_concrete_function()

    action_fn = tf.function(flat_action, autograph=False).get_concrete_function(**specs)
    return {
        'action': action_fn,
        'serving_default': action_fn,
        'get_initial_state': compile_fn(
            initial_state, [tf.TensorSpec((), tf.int32, name='batch_size')]),
        'get_train_step': compile_fn(
            lambda: {'train_step': self.train_step.read_value()}, []),
        'get_metadata': compile_fn(
            lambda: dict({'train_step': self.train_step.read_value()},
                         **{k: v.read_value() for k, v in self.metadata.items()}), []),
    }


_RENAME_EXCHANGE = 2  # renameat2 flag (Linux >= 3.15): swap two paths atomically
_AT_FDCWD = -100
TEMPORARY_PREFIXES = ('.tmp-', '.old-')
EXPORT_INFO = 'tfrl_export.json'  # train step of an export, read without loading it


def _exchange(path_a: str, path_b: str) -> bool:
  """Atomically swaps two directories; False where the OS or filesystem cannot."""
  try:
    renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
  except (OSError, AttributeError):
    return False
  return renameat2(_AT_FDCWD, os.fsencode(path_a), _AT_FDCWD, os.fsencode(path_b),
                   _RENAME_EXCHANGE) == 0


def _write_atomically(path: str, write_fn) -> None:
  """Runs `write_fn(tmp_dir)` then puts tmp_dir in place of `path`.

  On Linux the swap is one `renameat2(RENAME_EXCHANGE)`: a reader polling `path` always
  finds a complete directory, the old one or the new one, never none. Elsewhere (or on a
  filesystem without it) the old directory is renamed away first, leaving a moment with
  no directory. A process killed mid-write leaves a '.tmp-*' directory beside `path`,
  which `remove_temporaries` deletes.
  """
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=TEMPORARY_PREFIXES[0] + os.path.basename(path) + '-',
                         dir=parent)
  try:
    write_fn(tmp)
    if not os.path.exists(path):
      os.rename(tmp, path)
    elif _exchange(tmp, path):
      shutil.rmtree(tmp, ignore_errors=True)  # it holds the old directory now
    else:
      old = tempfile.mkdtemp(prefix=TEMPORARY_PREFIXES[1] + os.path.basename(path) + '-',
                             dir=parent)
      os.rename(path, os.path.join(old, 'x'))
      os.rename(tmp, path)
      shutil.rmtree(old, ignore_errors=True)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def remove_temporaries(directory: str) -> list:
  """Deletes the '.tmp-*' / '.old-*' directories interrupted writes left in `directory`.

  Call it when no other process writes there (e.g. when a trainer starts).

  Returns:
    The paths removed.
  """
  if not os.path.isdir(directory):
    return []
  removed = [os.path.join(directory, name) for name in os.listdir(directory)
             if name.startswith(TEMPORARY_PREFIXES)]
  for path in removed:
    shutil.rmtree(path, ignore_errors=True)
  return removed


def exported_train_step(path: str) -> Optional[int]:
  """The train step recorded in the export at `path`; None without an export there."""
  try:
    with open(os.path.join(path, EXPORT_INFO)) as f:
      return int(json.load(f)['train_step'])
  except (OSError, ValueError, KeyError):
    return None


def exported_run_id(path: str) -> Optional[str]:
  """The run id recorded in the export at `path`; None without one (or an export)."""
  try:
    with open(os.path.join(path, EXPORT_INFO)) as f:
      return json.load(f).get('run_id')
  except (OSError, ValueError, AttributeError):
    return None


def save_module(module: PolicyModule, path: str, run_id: Optional[str] = None) -> str:
  """Writes `module` as a SavedModel at `path` (atomically) with its spec file; the
  export info records its train step and `run_id` (the lineage, see tfrl.run_dir)."""

  def write(tmp):
    tf.saved_model.save(module, tmp, signatures=module.signatures())
    tensor_spec.to_pbtxt_file(os.path.join(tmp, POLICY_SPECS_PBTXT), module.policy_specs)
    with open(os.path.join(tmp, EXPORT_INFO), 'w') as f:
      json.dump({'train_step': int(module.train_step.numpy()), 'run_id': run_id}, f)

  _write_atomically(path, write)
  return path


def export_policy(policy: tf_policy.TFPolicy, path: str,
                  train_step: Optional[tf.Variable] = None,
                  metadata: Optional[Dict[str, tf.Variable]] = None) -> str:
  """Exports `policy` as a SavedModel at `path`; returns `path`.

  The export loads with plain `tf.saved_model.load` (no tfrl, tf-agents or TFP in the
  serving process) and with tf-agents' `SavedModelPyTFEagerPolicy(path,
  load_specs_from_pbtxt=True)`.

  Args:
    policy: any tf-agents `TFPolicy`.
    path: the export directory (replaced atomically if it exists).
    train_step: the step variable to record (get_train_step).
    metadata: name -> tf.Variable to record (get_metadata).

  Returns:
    `path`.
  """
  return save_module(PolicyModule(policy, train_step, metadata), path)


def write_policy_checkpoint(module: PolicyModule, path: str) -> str:
  """Writes the variables of an exported policy to `path/variables/variables`.

  The layout is what `SavedModelPyTFEagerPolicy.update_from_checkpoint(path)` and
  `ExportedPolicy.update_from_checkpoint(path)` read; the write is atomic.
  """
  checkpoint = tf.train.Checkpoint(policy=module)
  _write_atomically(path, lambda tmp: checkpoint.write(
      os.path.join(tmp, 'variables', 'variables')))
  return path


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

  def action(self, time_step: ts.TimeStep, policy_state: Any = ()):
    """Returns the PolicyStep for a batched `time_step`."""
    return self._module.action(time_step, policy_state)

  def get_initial_state(self, batch_size: int):
    return self._module.get_initial_state(tf.constant(batch_size, tf.int32))

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


def load_policy(path: str) -> ExportedPolicy:
  """Loads an export made by `export_policy` (see `ExportedPolicy`)."""
  return ExportedPolicy(path)

"""Policy SavedModels that serve without tfrl, tf-agents or TensorFlow Probability.

An export holds only the policy's variables, the train step, metadata variables and
four functions, so nothing in it needs a registered Python type to load:

  action(time_step, policy_state) -> PolicyStep   (what tf-agents' loader calls)
  get_initial_state(batch_size), get_train_step(), get_metadata()
  signatures 'action', 'get_initial_state', 'get_train_step', 'get_metadata', with flat
  named tensors (step_type, reward, discount, observation...), and 'serving_default'
  (what TF Serving's REST API calls): the observation (and a recurrent policy's state)
  only
  policy_specs.pbtxt                                (tf-agents' spec file)

tf-agents' PolicySaver also saves the policy's `distribution` function, whose output
type (a tfp distribution spec) a plain-TensorFlow process cannot rebuild; this one does
not. A variables-only checkpoint (`write_policy_checkpoint`) refreshes a loaded export.
"""
import ctypes
import json
import os
import shutil
from typing import Any, Dict, Optional

import tensorflow as tf
import tree
from tf_agents.policies import tf_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import policy_step as policy_step_lib

from tfrl import files

# The loading side lives in tfrl/loaded_policy.py and is part of this module's API.
from tfrl.loaded_policy import (  # pylint: disable=unused-import
    ExportedPolicy, NotAPolicyError, POLICY_SPECS_PBTXT, load_policy)


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
    # The traced signatures, kept for the next export (a job exports the same module at
    # every saved-model interval and at its end). Set around tf.Module's attribute
    # tracking: the functions are saved as signatures, not as attributes of the module.
    object.__setattr__(self, '_traced_signatures', None)

  @property
  def policy_specs(self) -> Dict[str, Any]:
    """The specs tf-agents' loader reads from policy_specs.pbtxt."""
    return self._policy_specs

  def signatures(self) -> Dict[str, Any]:
    """Concrete functions with flat, named inputs and dict outputs, for serving.

    Inputs are named after their place in the nest with '_' for nesting
    (step_type, reward, discount, observation or observation_<key>, policy_state_...);
    outputs likewise (action, policy_state_..., info_...). Traced at the first call;
    later calls return the same functions.
    """
    if self._traced_signatures is None:
      object.__setattr__(self, '_traced_signatures', self._trace_signatures())
    return self._traced_signatures

  def _trace_signatures(self) -> Dict[str, Any]:
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
    # What TF Serving's REST API calls without a signature name: the observation (and a
    # recurrent policy's state) only. Step type MID: a feed-forward policy ignores it,
    # and a recurrent one carries the state given, which at an episode's start is
    # get_initial_state's (a FIRST step would reset it to that anyway).
    defaulted = ('step_type', 'reward', 'discount')
    observation_only = {n: spec for n, spec in specs.items() if n not in defaulted}

    def serve(**inputs):
      batch = [tf.shape(tf.nest.flatten(inputs)[0])[0]]
      mid = tf.constant(1, specs['step_type'].dtype)
      return flat_action(**inputs, step_type=tf.fill(batch, mid),
                         reward=tf.zeros(batch, specs['reward'].dtype),
                         discount=tf.ones(batch, specs['discount'].dtype))

    serving_fn = tf.function(serve, autograph=False).get_concrete_function(
        **observation_only)
    return {
        'action': action_fn,
        'serving_default': serving_fn,
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
  no directory. On an object store (gs://, ...) the old export is deleted and the new
  one copied in, `saved_model.pb` last (`tfrl.files`). A process killed mid-write leaves
  a '.tmp-*' directory beside `path`, which `remove_temporaries` deletes. The directory
  is readable by all (as the umask allows): a server may run as another user.
  """
  parent = os.path.dirname(os.path.abspath(path) if files.is_local(path) else path)
  tmp = files.make_temporary_dir(parent, TEMPORARY_PREFIXES[0] + os.path.basename(path) +
                                 '-')
  try:
    write_fn(tmp)
    if not files.is_local(path):
      files.remove_tree(path)
      files.move_into_place(tmp, path)
    elif not os.path.exists(path):
      os.rename(tmp, path)
    elif _exchange(tmp, path):
      shutil.rmtree(tmp, ignore_errors=True)  # it holds the old directory now
    else:
      old = files.make_temporary_dir(parent, TEMPORARY_PREFIXES[1] +
                                     os.path.basename(path) + '-')
      os.rename(path, os.path.join(old, 'x'))
      os.rename(tmp, path)
      shutil.rmtree(old, ignore_errors=True)
  except BaseException:
    files.remove_tree(tmp)
    raise


def remove_temporaries(directory: str) -> list:
  """Deletes the '.tmp-*' / '.old-*' directories interrupted writes left in `directory`.

  Call it when no other process writes there (e.g. when a trainer starts).

  Returns:
    The paths removed.
  """
  if not tf.io.gfile.isdir(directory):
    return []
  removed = [os.path.join(directory, name.rstrip('/'))
             for name in tf.io.gfile.listdir(directory)
             if name.startswith(TEMPORARY_PREFIXES)]
  for path in removed:
    files.remove_tree(path)
  return removed


def exported_train_step(path: str) -> Optional[int]:
  """The train step recorded in the export at `path`; None without an export there."""
  info = files.read_json(os.path.join(path, EXPORT_INFO))
  try:
    return int(info['train_step'])
  except (TypeError, KeyError, ValueError):
    return None


def exported_run_id(path: str) -> Optional[str]:
  """The run id recorded in the export at `path`; None without one (or an export)."""
  info = files.read_json(os.path.join(path, EXPORT_INFO))
  return info.get('run_id') if isinstance(info, dict) else None


def serving_versions(base_dir: str) -> list:
  """The version directories of a TF Serving model base `base_dir`, oldest first (TF
  Serving serves the highest number)."""
  if not tf.io.gfile.isdir(base_dir):
    return []
  numbers = [int(n.rstrip('/')) for n in tf.io.gfile.listdir(base_dir)
             if n.rstrip('/').isdigit()]
  return [os.path.join(base_dir, str(n)) for n in sorted(numbers)]


def publish_version(export_path: str, base_dir: str, keep: int = 3) -> Optional[str]:
  """Publishes the export at `export_path` for TF Serving as `base_dir/<train step>/`.

  The version appears whole (locally one rename of a '.tmp-*' directory, a name TF
  Serving ignores; its files are hard links to the export's where the filesystem
  allows, the export's files being never rewritten), then all but the newest `keep`
  versions are deleted. A version of the same step already there is kept.

  Args:
    export_path: an export (`save_module`), its train step in its export info.
    base_dir: TF Serving's `--model_base_path` for this policy.
    keep: versions kept (>= 1).

  Returns:
    The version's directory, or None where it existed already.
  """
  version = os.path.join(base_dir, str(exported_train_step(export_path)))
  if tf.io.gfile.exists(version):
    return None
  tmp = files.make_temporary_dir(base_dir, TEMPORARY_PREFIXES[0] + 'version-')
  try:
    if files.is_local(tmp):
      os.rmdir(tmp)
      try:
        shutil.copytree(export_path, tmp, copy_function=os.link)
      except OSError:  # another filesystem: no hard links
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(export_path, tmp)
      files.readable_by_all(tmp)
    else:
      files.copy_tree(export_path, tmp)
    files.move_into_place(tmp, version)
  except BaseException:
    files.remove_tree(tmp)
    raise
  for old in serving_versions(base_dir)[:-keep]:
    files.remove_tree(old)
  return version


def save_module(module: PolicyModule, path: str, run_id: Optional[str] = None) -> str:
  """Writes `module` as a SavedModel at `path` (atomically) with its spec file; the
  export info records its train step and `run_id` (the lineage, see tfrl.run_dir)."""

  def write(tmp):
    tf.saved_model.save(module, tmp, signatures=module.signatures())
    tensor_spec.to_pbtxt_file(os.path.join(tmp, POLICY_SPECS_PBTXT), module.policy_specs)
    with tf.io.gfile.GFile(os.path.join(tmp, EXPORT_INFO), 'w') as f:
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

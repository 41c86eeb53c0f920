"""Triggers: callables the Learner runs with the train step after every `run`."""
import concurrent.futures
import os
from typing import Callable, Dict, Optional

from absl import logging
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.policies import greedy_policy

from tfrl import export
from tfrl import metrics
from tfrl import run_dir

# The export directories' names (tfrl.root_dir_layout), where callers of the triggers
# look for them.
from tfrl.root_dir_layout import (  # pylint: disable=unused-import,g-bad-import-order
    COLLECT_POLICY, GREEDY_POLICY, POLICY_CHECKPOINTS, POLICY_DIR, RAW_POLICY, SERVING_DIR)


class IntervalTrigger:
  """Calls `fn` when the value has advanced `interval` past the last call."""

  def __init__(self, interval: int, fn: Callable[[], None], start: int = 0):
    """Args:
      interval: distance between calls; <= 0 means never (unless forced).
      fn: the callable, taking no arguments.
      start: the value of the notional last call.
    """
    self._interval = interval
    self._fn = fn
    self._start = start
    self._last = start

  def __call__(self, value: int, force_trigger: bool = False) -> None:
    if force_trigger or (self._interval > 0 and value - self._last >= self._interval):
      self._last = value
      self._fn()

  def reset(self) -> None:
    """Forgets past calls: the next one is due `interval` after `start`."""
    self._last = self._start

  def set_start(self, start: int) -> None:
    self._start = start
    self._last = start


def greedy(agent: tf_agent.TFAgent) -> greedy_policy.GreedyPolicy:
  """The agent's greedy policy: what the evaluators play and `greedy_policy` exports
  (tf-agents' SAC `policy` samples; its greedy form takes the mode)."""
  raw = agent.policy
  if isinstance(raw, greedy_policy.GreedyPolicy):
    raw = raw.wrapped_policy
  return greedy_policy.GreedyPolicy(raw)


def _policies(agent: tf_agent.TFAgent):
  """(greedy, collect, raw) policies of an agent."""
  greedy_one = greedy(agent)
  return greedy_one, agent.collect_policy, greedy_one.wrapped_policy


class PolicySavedModelTrigger(IntervalTrigger):
  """Exports the agent's policies as SavedModels and writes variables-only checkpoints.

  SavedModels of the greedy, collect and raw policies go to
  `root_dir/policies/{greedy_policy,collect_policy,policy}`, and each is published as a
  version for TF Serving, `root_dir/policies/serving/<name>/<train step>/` (TF Serving's
  model base path is `policies/serving/<name>`; it serves the highest step; the newest
  `serving_versions_to_keep` are kept). Every `interval` train steps a variables-only
  checkpoint goes to `root_dir/policies/checkpoints/policy_checkpoint_<step>`, which any
  of the three exports applies with `update_from_checkpoint` (the layout tf-agents'
  loader reads); every `saved_model_interval` train steps (0: never) the SavedModels are
  exported again, so a TF Serving that follows the job gets a new version.

  What a user keeps only moves forward:
  - Nothing is exported at creation: the Learner restores its checkpoint first and then
    calls `set_start(step)`, which exports a resumed job's policies at the restored step.
    A new job exports on the first interval (and at its end, `save_saved_models`), so no
    export ever holds weights the job did not train.
  - An export is never replaced by one at an older train step.
  - Every write is atomic (see `export._write_atomically`); leftovers of writes that a
    kill interrupted are deleted at creation.
  """

  def __init__(self, root_dir: str, agent: tf_agent.TFAgent, train_step: tf.Variable,
               interval: int, metadata: Optional[Dict[str, tf.Variable]] = None,
               async_saving: bool = False, start: int = 0,
               max_checkpoints_to_keep: int = 3, saved_model_interval: int = 0,
               serving_versions_to_keep: int = 3):
    """Args:
      root_dir: the job's root directory.
      agent: the agent whose policies are exported.
      train_step: the learner's step variable (recorded in every export).
      interval: train steps between variables-only checkpoints.
      metadata: name -> tf.Variable saved with the policy (e.g. env steps, returns).
      async_saving: write checkpoints in a background thread (values are copied
        first, so training may go on while the files are written).
      start: train step of the notional last checkpoint.
      max_checkpoints_to_keep: older policy checkpoints are deleted.
      saved_model_interval: train steps between SavedModel exports (<= 0: only at a
        resume, at the end, and when `save_saved_models` is called).
      serving_versions_to_keep: TF Serving versions kept per policy.
    """
    super().__init__(interval, self._save_checkpoint, start)
    self._dir = os.path.join(root_dir, POLICY_DIR)
    self._train_step = train_step
    self._run_id = run_dir.run_id(root_dir)
    metadata = dict(metadata or {})
    greedy, collect, raw = _policies(agent)
    self._modules = {name: export.PolicyModule(policy, train_step, metadata)
                     for name, policy in ((GREEDY_POLICY, greedy),
                                          (COLLECT_POLICY, collect), (RAW_POLICY, raw))}
    self._max_to_keep = max_checkpoints_to_keep
    self._serving_versions_to_keep = max(1, serving_versions_to_keep)
    self._saved_model_trigger = IntervalTrigger(saved_model_interval,
                                                self.save_saved_models, start)
    self._executor = (concurrent.futures.ThreadPoolExecutor(1) if async_saving else None)
    self._pending = None
    # A copy of the greedy module's variables: background writes read these, so the
    # live variables can keep training meanwhile.
    source = self._modules[GREEDY_POLICY]
    self._snapshot_module = _SnapshotModule(source) if async_saving else source
    for directory in (self._dir, os.path.join(self._dir, POLICY_CHECKPOINTS),
                      *(self.serving_path(name) for name in self._modules)):
      for path in export.remove_temporaries(directory):
        logging.info('Removed %s, left by an interrupted write.', path)

  def set_start(self, start: int) -> None:
    """Called by the Learner with the restored train step.

    A resumed job (start > 0) exports its restored policies unless the exports already
    hold that step or a later one, so exports carry the restored train step at once.
    """
    super().set_start(start)
    self._saved_model_trigger.set_start(start)
    if start > 0 and any((export.exported_train_step(self.path(name)) or -1) < start
                         for name in self._modules):
      self.save_saved_models()

  def __call__(self, value: int, force_trigger: bool = False) -> None:
    super().__call__(value, force_trigger)
    self._saved_model_trigger(value)

  def path(self, name: str = GREEDY_POLICY) -> str:
    """The export directory of policy `name`."""
    return os.path.join(self._dir, name)

  def serving_path(self, name: str = GREEDY_POLICY) -> str:
    """TF Serving's model base path for policy `name` (its versions are below it)."""
    return os.path.join(self._dir, SERVING_DIR, name)

  def save_saved_models(self) -> Dict[str, str]:
    """(Re)exports the three SavedModels with the current variables; returns name -> path.

    An export at a later train step than the current one is kept, with a warning (a
    job restarted from an older checkpoint must not overwrite newer policies).
    """
    self.wait()
    step = int(self._train_step.numpy())
    for name, module in self._modules.items():
      existing = export.exported_train_step(self.path(name))
      if existing is not None and existing > step:
        logging.warning('Keeping %s (train step %d): this job is at train step %d, older.',
                        self.path(name), existing, step)
        continue
      other_run = export.exported_run_id(self.path(name))
      if other_run not in (None, self._run_id):
        # Another run's policy: its step number says nothing about this run's.
        logging.warning('Keeping %s: it is from run %s, this job is run %s.',
                        self.path(name), other_run, self._run_id)
        continue
      export.save_module(module, self.path(name), self._run_id)
      export.publish_version(self.path(name), self.serving_path(name),
                             self._serving_versions_to_keep)
    return {name: self.path(name) for name in self._modules}

  def _save_checkpoint(self) -> None:
    if not all(tf.io.gfile.isdir(self.path(name)) for name in self._modules):
      self.save_saved_models()  # a new job's first export: checkpoints need a SavedModel
    step = int(self._train_step.numpy())
    path = os.path.join(self._dir, POLICY_CHECKPOINTS, f'policy_checkpoint_{step:010d}')
    if self._executor is None:
      self._write(path)
      return
    self.wait()
    self._snapshot_module.copy_from_source()
    self._pending = self._executor.submit(self._write, path)

  def _write(self, path: str) -> None:
    export.write_policy_checkpoint(self._snapshot_module, path)
    checkpoints = sorted(n.rstrip('/') for n in tf.io.gfile.listdir(os.path.dirname(path)))
    for old in checkpoints[:-self._max_to_keep]:
      if old.startswith('policy_checkpoint_'):
        tf.io.gfile.rmtree(os.path.join(os.path.dirname(path), old))

  def wait(self) -> None:
    """Blocks until a background checkpoint write has finished (re-raising its error)."""
    if self._pending is not None:
      self._pending.result()
      self._pending = None

  def latest_checkpoint(self) -> Optional[str]:
    """Path of the newest variables-only policy checkpoint, or None."""
    directory = os.path.join(self._dir, POLICY_CHECKPOINTS)
    if not tf.io.gfile.isdir(directory):
      return None
    names = sorted(n.rstrip('/') for n in tf.io.gfile.listdir(directory)
                   if n.startswith('policy_checkpoint_'))
    return os.path.join(directory, names[-1]) if names else None


class _SnapshotModule(tf.Module):
  """Same object graph as a PolicyModule's checkpoint, over copied variables."""

  def __init__(self, source: export.PolicyModule):
    super().__init__(name='policy')
    # Set untracked: a tracked `_source` would put the live variables in the checkpoint.
    object.__setattr__(self, '_source', source)
    copy = lambda v: tf.Variable(v, trainable=False)
    self.model_variables = [copy(v) for v in source.model_variables]
    self.train_step = copy(source.train_step)
    self.metadata = {k: copy(v) for k, v in source.metadata.items()}

  def copy_from_source(self) -> None:
    pairs = zip(tf.nest.flatten([self.model_variables, self.train_step, self.metadata]),
                tf.nest.flatten([self._source.model_variables, self._source.train_step,
                                 self._source.metadata]))
    for mine, theirs in pairs:
      mine.assign(theirs)


class StepsPerSecondLogTrigger(IntervalTrigger):
  """Logs (and summarizes, 'train_steps_per_sec') train steps per second each time
  `interval` steps have passed."""

  def __init__(self, train_step: tf.Variable, interval: int, log_to_terminal: bool = True):
    super().__init__(interval, self._log, start=int(train_step.numpy()))
    self._train_step = train_step
    self._log_to_terminal = log_to_terminal
    self._throughput = metrics.Throughput()
    self._throughput.rate(int(train_step.numpy()))
    self.last_rate = float('nan')

  def _log(self) -> None:
    step = int(self._train_step.numpy())
    self.last_rate = self._throughput.rate(step)
    if self._log_to_terminal:
      logging.info('train step %d: %.1f steps/sec', step, self.last_rate)
    # The learner records summaries only at multiples of its summary_interval; this
    # trigger fires after a run() call crosses its interval, rarely on such a multiple
    # (DQN's 128-step runs: only every 16,000 steps), so it records whenever it fires.
    with tf.summary.record_if(True):
      tf.summary.scalar('train_steps_per_sec', self.last_rate, step=step)

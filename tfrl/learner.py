"""`Learner`: trains any tf-agents `TFAgent` in compiled multi-step loops.

`Learner.run(iterations)` is one `tf.function` call that samples, trains and (optionally)
updates priorities `iterations` times inside the graph, under a `tf.distribute`
strategy; then the triggers (checkpoints, exports, logs) run in Python. Its constructor
and methods mirror tf-agents' Learner, so switching is a change of import.
"""
import contextlib
import os
from typing import Any, Callable, Dict, Optional, Sequence

from absl import logging
import tensorflow as tf
from tf_agents.agents import tf_agent

from tfrl import checkpoints
from tfrl import graph_options
from tfrl import learner_input
from tfrl import logs
from tfrl import metrics
from tfrl import root_dir_layout
from tfrl import triggers as triggers_lib
from tfrl.agents import hyperparameters as hyperparameters_lib

# Directory names of tf-agents' `tf_agents.train.learner` (its examples build paths from
# them), so code that switches its import finds the same layout (tfrl.root_dir_layout).
TRAIN_DIR = root_dir_layout.TRAIN_DIR
POLICY_SAVED_MODEL_DIR = root_dir_layout.POLICY_DIR
COLLECT_POLICY_SAVED_MODEL_DIR = root_dir_layout.COLLECT_POLICY
GREEDY_POLICY_SAVED_MODEL_DIR = root_dir_layout.GREEDY_POLICY
RAW_POLICY_SAVED_MODEL_DIR = root_dir_layout.RAW_POLICY
POLICY_CHECKPOINT_DIR = root_dir_layout.POLICY_CHECKPOINTS
REPLAY_BUFFER_CHECKPOINT_DIR = root_dir_layout.REPLAY_BUFFER_CHECKPOINT_DIR
# The Learner's own checkpoints: root_dir/train/checkpoints, as in tf-agents.
CHECKPOINT_DIR = root_dir_layout.CHECKPOINT_DIR


def new_train_step() -> tf.Variable:
  """An int64 train step variable that every replica may increment (create it under the
  strategy's scope)."""
  return tf.Variable(0, dtype=tf.int64, trainable=False, name='train_step',
                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def _after_its_inputs(method: Callable) -> Callable:
  """`method`, with every op it creates waiting for its tensor arguments."""

  def wrapped(*args, **kwargs):
    inputs = [x for x in tf.nest.flatten((args, kwargs)) if tf.is_tensor(x)]
    with tf.control_dependencies(inputs):
      return method(*args, **kwargs)

  return wrapped


class Learner(tf.Module):
  """Owns the training loop, checkpoints and summaries of one agent."""

  def __init__(self,
               root_dir: str,
               train_step: tf.Variable,
               agent: tf_agent.TFAgent,
               experience_dataset_fn: Optional[Callable[..., tf.data.Dataset]] = None,
               after_train_strategy_step_fn: Optional[Callable] = None,
               train_inputs_fn: Optional[Callable[[Any, Any], Dict[str, Any]]] = None,
               triggers: Optional[Sequence[Callable[[int], Any]]] = None,
               checkpoint_interval: int = 100000,
               summary_interval: Optional[int] = 1000,
               max_checkpoints_to_keep: int = 3,
               use_kwargs_in_agent_train: bool = False,
               strategy: Optional[tf.distribute.Strategy] = None,
               run_optimizer_variable_init: bool = True,
               direct_sampling: bool = False,
               experience_dataset_options: Optional[tf.distribute.InputOptions] = None,
               strategy_run_options: Optional[tf.distribute.RunOptions] = None,
               summary_root_dir: Optional[str] = None,
               checkpoint_extras: Optional[Dict[str, Any]] = None):
    """Builds the input pipeline, creates optimizer slots, restores a checkpoint.

    Args:
      root_dir: checkpoints go to `root_dir/train/checkpoints`, summaries to
        `root_dir/train` (or `summary_root_dir/train`).
      train_step: the int64 step variable the agent increments (its
        `train_step_counter`), created under the strategy's scope; under a multi-replica
        strategy create it with `aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA`
        (see `new_train_step`).
      agent: any `tf_agents.agents.TFAgent`.
      experience_dataset_fn: returns the per-replica `tf.data.Dataset` of samples
        (`(experience, info)`, or bare experience with `direct_sampling`); may take a
        `tf.distribute.InputContext`. None when every `run` gets an `iterator`.
      after_train_strategy_step_fn: called per replica after each train step with
        `((experience, info), loss_info)`, e.g. to update priorities.
      train_inputs_fn: maps a replica's `(experience, info)` to `agent.train`'s (and
        `agent.loss`'s) keyword arguments. It runs inside `strategy.run`, so it may
        reduce across replicas (e.g. normalize importance weights by the global
        batch's maximum). None passes the experience as it is (or, with
        `use_kwargs_in_agent_train`, as the kwargs dict it is).
      triggers: callables taking the train step, run after every `run`.
      checkpoint_interval: train steps between checkpoints; <= 0 disables them.
      summary_interval: summaries are recorded when train_step % interval == 0;
        when <= 0 or None none are, and no events file is written.
      max_checkpoints_to_keep: older checkpoints are deleted.
      use_kwargs_in_agent_train: experience is a dict of keyword arguments for
        `agent.train` (e.g. {'experience': ..., 'weights': ...}).
      strategy: a `tf.distribute.Strategy` (default: the current one).
      run_optimizer_variable_init: trace one train step before checkpointing so the
        optimizer's slot variables exist and are saved and restored.
      direct_sampling: samples are bare experience (e.g. an offline dataset).
      experience_dataset_options: `tf.distribute.InputOptions` for the dataset (kept,
        with `experience_dataset_fn`, for `reset_iterator`).
      strategy_run_options: `tf.distribute.RunOptions` for `strategy.run`.
      summary_root_dir: root for summaries if not `root_dir`.
      checkpoint_extras: more trackables (e.g. a program's env-step counter, a
        `tf.Variable`) saved in and restored from the checkpoint beside the agent and
        the train step, by name; one the checkpoint lacks keeps its value. The
        agent's `hyperparameters` (`tfrl.agents.hyperparameters`) join them.

    Raises:
      ValueError: a train_step that is not an int64 variable.
    """
    super().__init__(name='Learner')
    graph_options.keep_train_step_order()
    if not isinstance(train_step, tf.Variable) or train_step.dtype != tf.int64:
      raise ValueError('train_step must be an int64 tf.Variable (the agent\'s '
                       f'train_step_counter), got {train_step!r}.')
    self._root_dir = root_dir
    self._train_dir = os.path.join(root_dir, TRAIN_DIR)
    self.train_step = train_step
    self._agent = agent
    self._after_train_strategy_step_fn = after_train_strategy_step_fn
    self._train_inputs_fn = train_inputs_fn
    self._use_kwargs_in_agent_train = use_kwargs_in_agent_train
    self.strategy = strategy or tf.distribute.get_strategy()
    self._direct_sampling = direct_sampling
    self._strategy_run_options = strategy_run_options
    self.summary_interval = summary_interval
    if self._summaries_enabled:
      self.train_summary_writer = metrics.create_summary_writer(
          os.path.join(summary_root_dir or root_dir, TRAIN_DIR), flush_millis=10000)
    else:
      # No summaries asked for: no events file either (a file writer creates one).
      self.train_summary_writer = tf.summary.create_noop_writer()

    self._experience_dataset_fn = experience_dataset_fn
    self._experience_dataset_options = experience_dataset_options
    self._experience_iterator = None
    if experience_dataset_fn is not None:
      self._experience_iterator = self._make_iterator()

    self._compiled_train = tf.function(self._train_loop, autograph=False)
    self._compiled_loss = tf.function(self._loss, autograph=False)
    with self.strategy.scope():
      # As tf-agents' Learner does, unconditionally: agents set up state here (DQN and
      # SAC copy the online networks into their targets). When a checkpoint is restored
      # below, the restore overwrites every variable initialize() set, so calling it on
      # a resumed job changes nothing.
      agent.initialize()
      if run_optimizer_variable_init and self._experience_iterator is not None:
        # The train function itself, traced now, creates the optimizer's slots: one
        # trace of the agent's train step serves start-up and every `run` (a separate
        # trace for the slots cost as much again, ~0.4 s for a small PPO agent).
        self.compile()
      elif run_optimizer_variable_init:
        self._create_optimizer_variables()

      self._checkpoints = checkpoints.TrainCheckpoint(
          self.checkpoint_dir, agent, train_step,
          _with_hyperparameters(checkpoint_extras, agent), max_checkpoints_to_keep)
      # Scans ckpt-N files itself (state file or not) and falls back past unreadable
      # ones.
      latest = self._checkpoints.restore_newest()
      if latest:
        logs.progress('Restored %s at train step %d.', latest, self.train_step_numpy)
    self._set_up_triggers(triggers, checkpoint_interval)

  def _set_up_triggers(self, triggers: Optional[Sequence[Callable[[int], Any]]],
                       checkpoint_interval: int) -> None:
    """The user's triggers, started at the (restored) step, after the checkpoint's own.

    Args:
      triggers: see `__init__`.
      checkpoint_interval: see `__init__`.
    """
    # Interval triggers count from the (restored) step, as in tf-agents: otherwise a
    # resumed job would find every interval already passed and fire them all at once
    # after its first run. The Learner's own checkpoint trigger is made with its start.
    start = self.train_step_numpy
    self.triggers = list(triggers or [])
    for trigger in self.triggers:
      if hasattr(trigger, 'set_start'):
        trigger.set_start(start)
    if checkpoint_interval > 0:
      # First (tf-agents runs it last): a policy exported at a step always has the
      # checkpoint of that step behind it, even if the process dies in between.
      self.triggers.insert(0, triggers_lib.IntervalTrigger(
          checkpoint_interval, self.save_checkpoint, start=start))
    else:
      logging.warning('checkpoint_interval=%d: the Learner writes no checkpoints, so a '
                      'restarted job starts over.', checkpoint_interval)

  # -- Setup ----------------------------------------------------------------------

  @property
  def _summaries_enabled(self) -> bool:
    return bool(self.summary_interval) and self.summary_interval > 0

  def _make_iterator(self):
    """A new distributed iterator over `experience_dataset_fn`'s dataset."""
    return self.make_iterator(self._experience_dataset_fn)

  def make_iterator(self, dataset_fn: Callable[..., tf.data.Dataset]):
    """A distributed iterator over `dataset_fn`'s dataset (taking an InputContext or
    nothing), for `run(iterator=...)`: another source of batches of the same form.

    Its datasets run without tf.data's autotuning thread unless they set autotuning
    themselves (`tfrl.learner_input.without_autotune_thread` says why)."""
    return learner_input.distributed_iterator(self.strategy, dataset_fn,
                                              self._experience_dataset_options)

  def reset_iterator(self) -> None:
    """Replaces the Learner's iterator by a new one from `experience_dataset_fn`.

    For a dataset that ended: `run` raised `tf.errors.OutOfRangeError`, e.g. a Reverb
    dataset with a finite `rate_limiter_timeout_ms` that got no sample in time. The
    steps completed before the error count (the train step advanced by them); the next
    `run` samples from the new iterator. The element spec is the same, so the compiled
    train function is reused, not traced again.

    Raises:
      ValueError: the Learner was built without `experience_dataset_fn`.
    """
    if self._experience_dataset_fn is None:
      raise ValueError('Learner.reset_iterator needs the Learner to be built with '
                       'experience_dataset_fn.')
    self._experience_iterator = self._make_iterator()

  def _create_optimizer_variables(self) -> None:
    """Traces (without running) one train step so optimizer slots get created, for a
    Learner without a dataset (every `run` brings its iterator): the sample structure
    comes from the agent's training_data_spec with outer dims [1, train_sequence_length].
    """

    def trace(sample):
      self._run_agent(self._agent.train, *self._split_sample(sample))

    outer_dims = (1, self._agent.train_sequence_length or 2)
    experience = tf.nest.map_structure(
        lambda s: tf.zeros(outer_dims + tuple(s.shape), s.dtype),
        self._agent.training_data_spec)
    if self._use_kwargs_in_agent_train:
      experience = {'experience': experience}
    sample = experience if self._direct_sampling else (experience, ())
    tf.function(lambda: trace(sample), autograph=False).get_concrete_function()

  # -- Training -------------------------------------------------------------------

  def _split_sample(self, sample: Any):
    """Returns (experience, info) from any of the supported sample forms."""
    if self._direct_sampling:
      return sample, ()
    experience, info = sample
    return experience, info

  def _run_agent(self, method: Callable, experience: Any, info: Any):
    """Runs `agent.train` or `agent.loss` on every replica's share of a sample.

    Every op of the call waits for the sample: in a graph, stateful ops on different
    resources run in any order, and agents advance their train step with a bare
    `assign_add` (tf-agents' and tfrl's alike), which ran before a sample that then
    timed out, so a starved trainer counted train steps it never took.
    """
    method = _after_its_inputs(method)
    if self._train_inputs_fn is not None:
      return self.strategy.run(
          lambda experience, info: method(**self._train_inputs_fn(experience, info)),
          args=(experience, info), options=self._strategy_run_options)
    if self._use_kwargs_in_agent_train:
      return self.strategy.run(method, kwargs=experience,
                               options=self._strategy_run_options)
    return self.strategy.run(method, args=(experience,), options=self._strategy_run_options)

  def _reduce(self, loss_info: Any, reduce_op: tf.distribute.ReduceOp) -> Any:
    """Reduces loss info across replicas and, as tf-agents does, over every axis.

    A tensor of rank >= 1 (e.g. DQN's per-example `td_error`) becomes a scalar: its
    per-replica shapes hold the per-replica batch, so only its total is the same under
    any number of replicas.
    """

    def reduce(value):
      if isinstance(value, tf.distribute.DistributedValues):
        rank = value.values[0].shape.rank
      else:
        rank = value.shape.rank if tf.is_tensor(value) else None
      axis = tuple(range(rank)) if rank else None
      return self.strategy.reduce(reduce_op, value, axis=axis)

    return tf.nest.map_structure(reduce, loss_info)

  def single_train_step(self, iterator) -> Any:
    """One sample -> train -> after-step fn; returns the SUM-reduced loss info.

    The after-step fn gets each replica's unreduced loss info (e.g. per-example TD
    errors for priorities); the returned one is summed over replicas and all axes.
    """
    sample = next(iterator)
    experience, info = self._split_sample(sample)
    loss_info = self._run_agent(self._agent.train, experience, info)
    if self._after_train_strategy_step_fn is not None:
      self.strategy.run(self._after_train_strategy_step_fn,
                        args=((experience, info), loss_info),
                        options=self._strategy_run_options)
    return self._reduce(loss_info, tf.distribute.ReduceOp.SUM)

  def _train_loop(self, iterations: tf.Tensor, iterator, parallel_iterations: int):
    # The step is its own function, traced once (tracing an agent's train step is most
    # of a first call's cost) and called in the loop body. Its traced outputs give the
    # loop's initial loss info (zeros), so no step has to run before the loop and
    # `iterations` may be 0: `compile()` runs the function without training.
    train_step_fn = tf.function(self.single_train_step, autograph=False)
    outputs = train_step_fn.get_concrete_function(iterator).structured_outputs
    shapes = tf.nest.map_structure(lambda t: t.shape, outputs)
    zeros = tf.nest.map_structure(
        lambda t: tf.zeros([d if d is not None else 0 for d in t.shape.as_list()], t.dtype),
        outputs)

    def body(i, unused_loss):
      # The loop's "while/" name scope would prefix every summary tag written inside
      # it; reset it so summaries keep the same tags as outside the loop.
      with tf.compat.v1.name_scope(None):
        return i + 1, train_step_fn(iterator)

    _, loss_info = tf.while_loop(
        lambda i, _: i < iterations, body, (tf.constant(0), zeros),
        shape_invariants=(tf.TensorShape([]), shapes),
        parallel_iterations=parallel_iterations)
    return loss_info

  def compile(self, iterator=None, parallel_iterations: int = 10) -> None:
    """Builds the train function now (trace, graph optimization) without training.

    The first `run` otherwise pays this (about a second for a small agent on CPU).
    Calling it at start-up surfaces shape or spec errors in the train step before any
    experience is collected, and keeps the first `run` as fast as the others. No sample
    is taken and no variable changes.

    Args:
      iterator: as in `run` (default: the Learner's own).
      parallel_iterations: as in `run` (a different value builds another function).

    Raises:
      ValueError: no iterator given and no `experience_dataset_fn`.
    """
    iterator = self._iterator_or_raise(iterator)
    # The summary context must be run()'s: tracing bakes its record condition in.
    with self._summary_context():
      self._compiled_train(tf.constant(0, tf.int32), iterator, parallel_iterations)

  def _summary_context(self):
    """Summaries to the train writer, recorded every `summary_interval` steps, inside
    the strategy's scope (as tf-agents' Learner runs): the train function is traced
    and called in the same context, so it is traced once."""
    interval = self.summary_interval
    if self._summaries_enabled:
      record = lambda: tf.equal(self.train_step % interval, 0)
    else:
      record = False
    stack = contextlib.ExitStack()
    stack.enter_context(self.train_summary_writer.as_default())
    stack.enter_context(tf.summary.record_if(record))
    stack.enter_context(self.strategy.scope())
    return stack

  def _iterator_or_raise(self, iterator):
    iterator = iterator or self._experience_iterator
    if iterator is None:
      raise ValueError('Learner.run needs an iterator: pass one or build the Learner '
                       'with experience_dataset_fn.')
    return iterator

  def run(self, iterations: int = 1, iterator=None, parallel_iterations: int = 10) -> Any:
    """Runs `iterations` train steps in one compiled call, then the triggers.

    Args:
      iterations: train steps in this call (>= 1).
      iterator: a (distributed) iterator to sample from instead of the Learner's.
      parallel_iterations: passed to the in-graph `tf.while_loop`.

    Returns:
      The last step's loss info, SUM-reduced across replicas and over every axis of
      its tensors (as in tf-agents).

    Raises:
      ValueError: no iterator given and no `experience_dataset_fn`, or iterations < 1.
      tf.errors.OutOfRangeError: the dataset ended; the steps before it count. See
        `reset_iterator`.
    """
    if iterations < 1:
      raise ValueError(f'iterations must be >= 1, got {iterations}.')
    iterator = self._iterator_or_raise(iterator)
    with self._summary_context():
      loss_info = self._compiled_train(
          tf.constant(iterations, tf.int32), iterator, parallel_iterations)
      # Inside the summary context (as in tf-agents): triggers' summaries land here too.
      step = self.train_step_numpy
      for trigger in self.triggers:
        trigger(step)
    return loss_info

  def _loss(self, sample: Any, reduce_op: tf.distribute.ReduceOp):
    loss_info = self._run_agent(self._agent.loss, *self._split_sample(sample))
    return self._reduce(loss_info, reduce_op)

  def loss(self, experience_and_sample_info: Any = None,
           reduce_op: tf.distribute.ReduceOp = tf.distribute.ReduceOp.SUM) -> Any:
    """Computes the loss on a sample (the next one when None) without training.

    Args:
      experience_and_sample_info: a sample in the form the dataset yields; None takes
        the next one from the Learner's iterator.
      reduce_op: how values are combined across replicas and over the axes of
        tensors of rank >= 1.

    Returns:
      The loss info, each tensor reduced with `reduce_op` to a scalar.

    Raises:
      ValueError: no sample given and no `experience_dataset_fn`.
    """
    if experience_and_sample_info is None:
      if self._experience_iterator is None:
        raise ValueError('Learner.loss needs a sample or an experience_dataset_fn.')
      experience_and_sample_info = next(self._experience_iterator)
    return self._compiled_loss(experience_and_sample_info, reduce_op)

  # -- State ----------------------------------------------------------------------

  def save_checkpoint(self) -> str:
    """Writes a checkpoint (agent, optimizer state, train step) now; returns its path."""
    path = self._checkpoints.save()
    logging.info('Checkpoint %s written.', path)
    return path

  @property
  def train_step_numpy(self) -> int:
    """The current train step as a Python int."""
    return int(self.train_step.numpy())

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self._train_dir, CHECKPOINT_DIR)

  @property
  def agent(self) -> tf_agent.TFAgent:
    return self._agent


def _with_hyperparameters(extras: Optional[Dict[str, Any]], agent) -> Dict[str, Any]:
  """`extras` and the agent's own hyperparameters (a population may have changed them:
  a resumed job goes on with the changed values)."""
  extras = dict(extras or {})
  own = getattr(agent, 'hyperparameters', None)
  if isinstance(own, hyperparameters_lib.Hyperparameters):
    extras.setdefault('hyperparameters', own)
  return extras

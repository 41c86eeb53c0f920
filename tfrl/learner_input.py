"""The Learner's input side: a distributed iterator over a user's dataset function.

`distributed_iterator` is what `Learner.make_iterator` returns: the dataset function
(taking a `tf.distribute.InputContext` or nothing) runs once per input pipeline under
the strategy, and every dataset it returns trains without tf.data's autotuning thread
unless the dataset asks for it (`without_autotune_thread`, below, says why).
"""
import inspect
from typing import Callable, Optional

import tensorflow as tf

from tfrl import logs


def call_dataset_fn(dataset_fn: Callable[..., tf.data.Dataset],
                    context: tf.distribute.InputContext) -> tf.data.Dataset:
  """Calls `dataset_fn(context)` or `dataset_fn()`, whichever it takes.

  Args:
    dataset_fn: returns a `tf.data.Dataset`, with or without an input context.
    context: this input pipeline's `tf.distribute.InputContext`.

  Returns:
    The dataset `dataset_fn` returned.
  """
  try:
    positional = [p for p in inspect.signature(dataset_fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    takes_context = bool(positional)
  except (TypeError, ValueError):
    takes_context = False
  return dataset_fn(context) if takes_context else dataset_fn()


def without_autotune_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset` with tf.data's autotuning turned off, unless its options set autotuning.

  Why: an autotuned iterator runs a model thread that re-optimizes after a wait which
  doubles up to 60 s. Destroying the iterator cancels that wait, but in TensorFlow 2.15
  the cancellation callback wakes the thread before `CancellationManager::IsCancelled()`
  turns true, so a thread that re-checks in that window sleeps out the rest of its
  period, and the destructor waits with it. Learner iterators live for minutes, so
  their periods reach the 60 s; a finished job's iterator then blocks whichever Python
  line drops its last reference (a notebook cell, the next test, a garbage collection)
  for up to a minute. Seen in the suite under load (gdb: the destructor joined the
  thread in `Model::OptimizeLoop`'s timed wait) and reproduced with a bare Reverb
  pipeline after 150 s of sampling: 52 s to delete with autotuning, 0.01 s without
  (BUILD_NOTES.md, "The test suite").

  Without the model thread, `num_parallel_calls=tf.data.AUTOTUNE` maps run at a fixed
  parallelism (the core count, at most 16) and `prefetch(tf.data.AUTOTUNE)` grows its
  buffer with its own (thread-free) autotuner: the Learner's throughput is unchanged
  within the run's spread (docs/results/throughput.md, "Learner: tf.data's autotuning
  thread off (tfrl) and on (tfrl-autotune)").

  Args:
    dataset: any `tf.data.Dataset`.

  Returns:
    `dataset`, or a dataset with the same elements and autotuning off.
  """
  if dataset.options().autotune.enabled is not None:
    return dataset  # the dataset's author chose: keep it
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def distributed_iterator(strategy: tf.distribute.Strategy,
                         dataset_fn: Callable[..., tf.data.Dataset],
                         input_options: Optional[tf.distribute.InputOptions] = None):
  """An iterator over `dataset_fn`'s datasets, distributed by `strategy`.

  Args:
    strategy: the `tf.distribute.Strategy` the Learner trains under.
    dataset_fn: returns the per-replica dataset; may take a
      `tf.distribute.InputContext`.
    input_options: `tf.distribute.InputOptions` for the distribution (None: defaults).

  Returns:
    A distributed iterator (`next` gives per-replica batches).
  """
  # Reverb logs an INFO line from C++ when its sampler starts in the server's process.
  with strategy.scope(), logs.native_stderr_filtered():
    dataset = strategy.distribute_datasets_from_function(
        lambda context: without_autotune_thread(call_dataset_fn(dataset_fn, context)),
        options=input_options)
    return iter(dataset)

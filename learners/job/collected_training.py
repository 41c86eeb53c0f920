"""The one-process job's train calls on what it collected: how many steps the collected
items allow, and a sample stream that timed out while the job was busy elsewhere.

The Learner's dataset asks for its next batch as soon as it hands one over, so that
request waits through whatever the job does before its next train call: collecting,
an evaluation of long episodes, a checkpoint, an export. On a loaded machine that can
pass the sample timeout, which ends the stream. A replay table keeps its items, so a
new stream samples them as the old one would have. A queue does not: Reverb removes an
item from a queue when a stream takes it, so the unrolls the ended stream had taken
towards a batch it never completed (one iteration's unroll of a batch that spans
several collect iterations) are gone with it. Those are counted as lost, said once in a
progress line, and training goes on from what the queue still holds; on-policy data
that was lost costs one update's worth of experience, never the job. A lost batch can
not repeat forever: the new stream's own timeout ends nothing while no train call waits
on it, so the next batch it takes reaches the next train call.
"""
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import reverb
import tensorflow as tf

from tfrl import learner as learner_lib
from tfrl import logs
from tfrl import replay
from tfrl.layouts import base as layouts_base


class CollectedTraining:
  """Runs train steps on the experience one process collected (see the module
  docstring).

  Attributes:
    items_trained: items of the experience table the train steps took.
    items_lost: queue items an ended sample stream took with it.
  """

  def __init__(self, learner: learner_lib.Learner, layout: layouts_base.Layout,
               client: reverb.Client, address: str, sample_timeout_ms: int,
               hybrid_schedule, dataset_only_iterator=None):
    """
    Args:
      learner: the job's Learner, its dataset reading `layout`'s experience table.
      layout: the experiment's layout.
      client: a client of the job's Reverb server (table sizes).
      address: the server's address (for messages).
      sample_timeout_ms: the Learner's dataset's sample timeout (for messages).
      hybrid_schedule: `Experiment.hybrid_schedule` (it runs the steps).
      dataset_only_iterator: its iterator for dataset-only steps, or None.
    """
    self._learner, self._layout, self._client = learner, layout, client
    self._address, self._timeout_s = address, sample_timeout_ms / 1000
    self._schedule, self._dataset_only_iterator = hybrid_schedule, dataset_only_iterator
    self.items_trained = 0
    self.items_lost = 0

  def steps_available(self, items_created: int, limit: int) -> int:
    """The train steps the untrained ones of `items_created` written items allow, up
    to `limit`."""
    return self._layout.train_steps_available(
        items_created - self.items_trained - self.items_lost, limit)

  def run(self, iterations: int, items_created: int) -> int:
    """Runs up to `iterations` train steps; returns how many ran.

    After a sample stream ended (it timed out), a new one is opened once; on a queue,
    the steps left are first cut to what the queue still holds (see the module
    docstring).

    Args:
      iterations: train steps the collected items allow (`steps_available`).
      items_created: items the job's writer has written, all inserted.

    Returns:
      The train steps run (fewer than `iterations` only after a loss).

    Raises:
      RuntimeError: the new stream got no batch either within the timeout.
    """
    first_step = self._learner.train_step_numpy
    for attempt in range(2):
      done = self._learner.train_step_numpy - first_step  # steps before a timeout count
      try:
        if iterations > done:
          self._schedule.run(self._learner, iterations - done, self._dataset_only_iterator)
        break
      except tf.errors.OutOfRangeError as e:
        if attempt:
          raise RuntimeError(
              f'No batch from {self._layout.experience_table!r} at {self._address} '
              f'within {self._timeout_s:.0f} s although this process collected for it '
              f'({items_created} items written, {self.items_trained} trained on, '
              f'{self.items_lost} lost with ended sample streams).') from e
        logs.progress('The sample stream timed out while this process was not training '
                      '(collecting, an evaluation or a save of over %.0f s); opening a '
                      'new one.', self._timeout_s)
        done = self._learner.train_step_numpy - first_step
        iterations = done + self._steps_still_queued(iterations - done, done, items_created)
        self._learner.reset_iterator()
    done = self._learner.train_step_numpy - first_step
    self.items_trained += done * self._layout.items_per_train_step
    return done

  def _steps_still_queued(self, steps_left: int, done: int, items_created: int) -> int:
    """After a stream ended: the steps of `steps_left` the experience table can still
    feed. A queue's items the ended stream took are counted lost (read before a new
    stream opens: it would start taking items at once)."""
    if not self._layout.trains_on_collected_items:
      return steps_left  # a replay table keeps what it was sampled from
    queued = self._queue_size()
    untrained = (items_created - self.items_trained - self.items_lost -
                 done * self._layout.items_per_train_step)
    lost = max(0, untrained - queued)
    if not lost:
      return steps_left
    self.items_lost += lost
    steps = self._layout.train_steps_available(queued, steps_left)
    logs.progress('The ended sample stream had taken %d of the collected unrolls; they '
                  'are lost (a queue hands each unroll out once). Training on the %d '
                  'still queued: %d train step(s) now.', lost, queued, steps)
    return steps

  def _queue_size(self) -> int:
    info = replay.wait_for_server(self._address, client=self._client)
    return info[self._layout.experience_table].current_size

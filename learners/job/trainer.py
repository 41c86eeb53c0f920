"""The train program's body (`learners.train` parses its flags, then runs `main`): the
Learner fed from a Reverb server, pushing variables back, through lost servers."""
import atexit
import os
import sys
import threading
import time
from typing import Any, Optional

from absl import flags
from absl import logging
import numpy as np
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

from learners.configuration import config
from learners.configuration.experiment import Experiment
from learners.job import eval_barrier
from learners.job import trainer_member
from learners.population import ready_points
from learners.processes import heartbeat as heartbeat_lib
from learners.processes import process
from tfrl import distribute
from tfrl import logs
from tfrl import metrics
from tfrl import replay
from tfrl import run_dir
from tfrl import triggers
from tfrl.agents import interface


# A program's options are its flags' module's `Options` (`learners.train`), which this
# module does not import: it would define the flags a second time under `python -m`.
FLAGS = flags.FLAGS
_PROBE_INTERVAL_S = 5.0


class NoExperienceError(process.ProgramError):
  """No experience arrived for longer than --data_timeout_s."""


def _worker_role(strategy: tf.distribute.Strategy):
  """(is_chief, task_id) of this process in a multi-worker cluster."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True, 0
  task_type, task_id = resolver.task_type, resolver.task_id or 0
  return task_type == 'chief' or (task_type == 'worker' and task_id == 0 and
                                  'chief' not in resolver.cluster_spec().as_dict()), task_id


def _wait_for_lost_server(address: str, stop_event: threading.Event,
                          options: Any) -> None:
  """Returns once the lost server answers again; exits the process if it does not come
  back within --reconnect_timeout_s (status 4) or a stop comes first (status 3: the
  training thread may be stuck in a sample, so no final save is possible)."""
  try:
    back = process.wait_for_server_with_backoff(address, options.reconnect_timeout_s,
                                                stop_event)
  except replay.ReplayServerUnreachableError as e:
    logging.error('%s Exiting with status %d.', e, process.EXIT_SERVER_LOST)
    print(f'error: {e}', file=sys.stderr, flush=True)
    os._exit(process.EXIT_SERVER_LOST)  # pylint: disable=protected-access
  if not back:
    logging.error('Stopped while the Reverb server at %s was gone: no final save.', address)
    os._exit(process.EXIT_STOP_TIMEOUT)  # pylint: disable=protected-access


def _restart(address: str) -> None:
  """Re-executes this program (same pid, flags and log): it resumes from its latest
  checkpoint. Never returns."""
  argv = getattr(sys, 'orig_argv', None) or [sys.executable, '-m', 'learners.train',
                                             *sys.argv[1:]]
  logging.warning('The Reverb server at %s is back but training did not go on: '
                  'restarting the trainer from its latest checkpoint (%s).', address,
                  ' '.join(argv))
  sys.stdout.flush()
  sys.stderr.flush()
  os.execv(sys.executable, argv)


class _Heartbeat:
  """When the training loop last went round (so was not stuck in a sample)."""

  def __init__(self):
    self.last = time.monotonic()

  def beat(self) -> None:
    self.last = time.monotonic()


def _watch_server(address: str, stop_event: threading.Event, heartbeat: _Heartbeat,
                  checkpoint_dir: str, options: Any) -> None:
  """Runs in a thread: takes over when the server stops answering for long enough.

  The training thread cannot notice by itself: it is blocked in a sample. Once the
  server is back, Reverb's sample streams often resume on their own; if the training
  loop has not come back from `Learner.run` within --server_lost_after_s (plus one
  sample timeout) by then, the trainer restarts itself.
  """
  last_answer = time.monotonic()
  while not stop_event.wait(_PROBE_INTERVAL_S):
    try:
      replay.wait_for_server(address, timeout_s=_PROBE_INTERVAL_S)
      last_answer = time.monotonic()
      continue
    except replay.ReplayServerUnreachableError:
      if time.monotonic() - last_answer < options.server_lost_after_s:
        continue
    logging.error('Lost the Reverb server at %s (no answer for %.0f s); waiting for it. '
                  'Latest checkpoint: %s.', address, time.monotonic() - last_answer,
                  tf.train.latest_checkpoint(checkpoint_dir))
    _wait_for_lost_server(address, stop_event, options)
    back = last_answer = time.monotonic()
    deadline = back + options.server_lost_after_s + options.sample_timeout_s
    while heartbeat.last < back and time.monotonic() < deadline:
      if stop_event.wait(0.5):
        return
    if heartbeat.last < back:
      _restart(address)
    logs.progress('The Reverb server at %s is back and training goes on.', address)


def _held_by_evaluator(barrier: eval_barrier.TrainerSide, learner, variables,
                       stop_event: threading.Event) -> bool:
  """True while the evaluator asks the trainer to hold still (then waits a moment)."""
  if not barrier.requested():
    if barrier.paused_at is not None:
      logs.progress('Evaluator done with train step %d: training goes on.', barrier.paused_at)
      barrier.resume()
    return False
  if barrier.paused_at is None:
    logs.progress('Holding still at train step %d while the evaluator confirms it.',
                 learner.train_step_numpy)
  barrier.hold(learner.train_step_numpy, variables.push)
  stop_event.wait(0.1)
  return True


def train(experiment: Experiment, root_dir: str, address: str,
          strategy: tf.distribute.Strategy, stop_event: threading.Event,
          options: Any,
          member: Optional[ready_points.ReadyPoints] = None) -> int:
  """Trains until the step budget or a stop; returns the final train step.

  Every normal end (the budget, or a stop signal) writes the final checkpoint and, on
  the chief, exports the policies at the final train step.

  Args:
    experiment: the job's settings.
    root_dir: the job's directory.
    address: 'host:port' of the Reverb server.
    strategy: the `tf.distribute` strategy to train under.
    stop_event: set to stop (after the current run, with the final saves).
    options: see `learners.train.Options`.
    member: this job is a member of a population (`learners.job.trainer_member`).

  Returns:
    The final train step.

  Raises:
    NoExperienceError: no experience for --data_timeout_s (after the final save).
    ValueError: a member under --strategy=multi_worker, or with an agent a population
      cannot change.
    TimeoutError: a member's decision did not come (the population runner is gone).
  """
  trainer = _Trainer(experiment, root_dir, address, strategy, stop_event, options, member)
  if trainer.is_chief:
    trainer.variables.push()
  # The Learner's constructor built the train function (before the push above, which
  # releases the collectors), so the first run() is as fast as the others.
  error = None
  try:
    trainer.train_until_done()
  except NoExperienceError as e:
    error = e  # raised after the final saves
  trainer.final_save()
  if error is not None:
    raise error
  return trainer.learner.train_step_numpy


class _Trainer:
  """One trainer's parts and the phases of its run (`train` calls them in order)."""

  def __init__(self, experiment: Experiment, root_dir: str, address: str,
               strategy: tf.distribute.Strategy, stop_event: threading.Event,
               options: Any,
               member: Optional[ready_points.ReadyPoints] = None):
    """Claims root_dir (the chief), builds the agent and the Learner, and starts the
    server watchdog."""
    self.experiment, self.root_dir, self.address = experiment, root_dir, address
    self.stop_event, self.options = stop_event, options
    self.is_chief, self.task_id = _worker_role(strategy)
    if self.is_chief:
      # The trainer (not the launcher) owns root_dir: it writes the checkpoints and
      # exports, under tfrl-launch or started by hand alike. Released at exit.
      lock = run_dir.claim(root_dir, options.overwrite)
      atexit.register(lock.release)
    job_dir = (root_dir if self.is_chief else
               os.path.join(root_dir, f'worker_{self.task_id}'))
    train_step, agent = experiment.build_agent(strategy)
    self.agent = agent
    replay.wait_for_server(address)
    self.layout = layout = experiment.layout
    replay.check_table_signature(address, layout.experience_table,
                                 layout.item_signature(agent))
    self.variables = replay.VariableContainer(
        address, experiment.pushed_variables(agent, train_step))
    self.policy_trigger = None
    if self.is_chief:
      self.policy_trigger = triggers.PolicySavedModelTrigger(
          root_dir, agent, train_step, experiment.policy_checkpoint_interval,
          saved_model_interval=experiment.saved_model_interval or 0)
    self.multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    # Collectors act only on their turns, given by this trainer's pushes (pacing.py).
    self.paced = layout.trains_on_collected_items and interface.on_policy(agent)
    sample_timeout_ms = -1 if self.multi_worker else int(options.sample_timeout_s * 1000)
    self.learner = experiment.make_learner(
        job_dir, address, agent, train_step, strategy, sample_timeout_ms=sample_timeout_ms,
        triggers=[self.policy_trigger] if self.policy_trigger else [])
    self.dataset_only_iterator = experiment.dataset_only_iterator(
        self.learner, address, agent, sample_timeout_ms)
    self.loop_heartbeat = _Heartbeat()
    threading.Thread(target=_watch_server,
                     args=(address, stop_event, self.loop_heartbeat,
                           self.learner.checkpoint_dir, options),
                     name='server watchdog', daemon=True).start()
    self._starved_since = None
    # 'train or wait for data' is not a work activity: a trainer starved by a stalled
    # collector must not be the one named. A frozen trainer stops beating.
    self.beat = heartbeat_lib.Heartbeat(
        root_dir, 'train' if self.is_chief else f'train_worker_{self.task_id}')
    self.member = None
    if member is not None:
      if self.multi_worker:  # the workers would wait for the chief in a collective
        raise ValueError('a population member trains under one worker, not '
                         '--strategy=multi_worker')
      self.member = trainer_member.TrainerMember(member, root_dir, address, layout,
                                                 self.beat)

  def train_until_done(self) -> None:
    """Trains to the step budget, a stop, or the target the evaluator confirmed.

    Raises:
      NoExperienceError: no experience for --data_timeout_s.
    """
    learner, experiment, root_dir = self.learner, self.experiment, self.root_dir
    start_step, last_log = learner.train_step_numpy, 0.0
    throughput = metrics.Throughput()
    throughput.rate(start_step)
    logs.progress('Trainer (chief=%s) from train step %d to %d (start-up %.1f s).',
                 self.is_chief, start_step, experiment.num_train_steps,
                 process.seconds_since_start())
    # The chief holds still while the evaluator confirms a candidate policy, and ends
    # there once it is confirmed (see eval_barrier). Not under multi_worker: the other
    # workers would wait in a collective.
    barrier = (eval_barrier.TrainerSide(root_dir)
               if self.is_chief and not self.multi_worker else None)
    self.beat.start()
    self.beat.set_activity('train or wait for data')
    if self.member is not None:
      self.member.start(self.agent, learner, self.stop_event)
    while (learner.train_step_numpy < experiment.num_train_steps and
           not self.stop_event.is_set()):
      self.loop_heartbeat.beat()  # this thread is not stuck in a sample
      self.beat.progress(train_step=learner.train_step_numpy)
      if barrier is not None and _held_by_evaluator(barrier, learner, self.variables,
                                                    self.stop_event):
        if eval_barrier.confirmed_step(root_dir) == barrier.paused_at:
          logs.progress('The evaluator confirmed the target at train step %d: stopping '
                       'there.', barrier.paused_at)
          return
        continue
      loss_info = self._run_once()
      if loss_info is None:
        continue
      if self.member is not None:
        self.member.maybe_report(learner.train_step_numpy)  # may take others' weights
      if self.is_chief:
        self._push()
      if time.monotonic() - last_log >= self.options.log_interval_s:
        last_log = time.monotonic()
        step = learner.train_step_numpy
        logs.progress('train step %d | loss %.4f | %.0f train steps/s', step,
                     float(np.mean(loss_info.loss)), throughput.rate(step))

  def _run_once(self):
    """One `Learner.run`; its loss info, or None when no sample came in time.

    Raises:
      NoExperienceError: no experience for --data_timeout_s.
    """
    experiment, learner = self.experiment, self.learner
    iterations = min(experiment.train_steps_per_iteration,
                     experiment.num_train_steps - learner.train_step_numpy)
    try:
      loss_info = experiment.hybrid_schedule.run(learner, iterations,
                                                 self.dataset_only_iterator)
    except tf.errors.OutOfRangeError:
      # No sample within --sample_timeout_s: the dataset ended. Look at the stop signal
      # (the collectors may have stopped first), then wait on with a new dataset.
      now = time.monotonic()
      self._starved_since = self._starved_since or now - self.options.sample_timeout_s
      if now - self._starved_since > self.options.data_timeout_s:
        raise NoExperienceError(
            f'No experience from table {self.layout.experience_table!r} at {self.address} '
            f'for {now - self._starved_since:.0f} s: are the collectors running?'
        ) from None
      logs.progress('Waiting for experience from %s at %s (%.0f s so far).',
                   self.layout.experience_table, self.address, now - self._starved_since)
      learner.reset_iterator()
      if self.paced and self.is_chief:
        # The queue gives each item once, and a paced collector acts only on its turns:
        # items that never reached a batch (a stream that ended after taking them)
        # would be made by nobody, and this trainer and its collectors would wait on
        # each other. A push gives the collectors their next turn (one that consumes
        # nothing only moves turns earlier, which the queue's capacity bounds).
        self._push()
      return None
    self._starved_since = None
    return loss_info

  def _push(self) -> None:
    """Pushes the policy variables; waits out a server lost meanwhile."""
    try:
      self.variables.push()
    except replay.ReplayServerUnreachableError as e:
      logging.error('Lost the Reverb server at %s while pushing variables (%s); '
                    'waiting for it.', self.address, e)
      self.learner.save_checkpoint()  # the state is in hand here, unlike in the watchdog
      _wait_for_lost_server(self.address, self.stop_event, self.options)
      self.learner.reset_iterator()  # the old sample stream may be stuck on the lost server

  def final_save(self) -> None:
    """The final checkpoint and (chief) policy exports, at the last train step."""
    self.beat.set_activity('final save')
    self.learner.save_checkpoint()
    if self.policy_trigger is not None:
      self.policy_trigger.save_saved_models()
    self.beat.stop()
    logs.progress('Trainer stopped at train step %d (final checkpoint%s written).',
                 self.learner.train_step_numpy,
                 ' and policies' if self.policy_trigger else '')


def main(options: Any) -> None:
  """Trains as the parsed flags say, until the budget is spent or stopped.

  Args:
    options: how the trainer runs, from its flags.
  """
  # The strategy first: MultiWorkerMirroredStrategy must exist before any other op.
  strategy = distribute.get_strategy(FLAGS.strategy, tpu=FLAGS.tpu)
  experiment = config.parse_from_flags()
  member = None
  if FLAGS.pbt_dir:
    member = ready_points.ReadyPoints(FLAGS.pbt_dir, FLAGS.member, FLAGS.ready_interval,
                                      FLAGS.decision_timeout_s)
  process.run_program(
      lambda stop_event: train(experiment, FLAGS.root_dir, FLAGS.reverb_address, strategy,
                               stop_event, options, member),
      'trainer', server_address=FLAGS.reverb_address)

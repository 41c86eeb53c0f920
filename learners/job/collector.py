"""The collect program's body (`learners.collect` parses its flags, then runs `main`):
a batched actor writing experience into a Reverb server, pulling the policy from it."""
import os
import threading
import time
from typing import Any, Optional

from absl import flags
from absl import logging
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
from tf_agents.policies import random_tf_policy

from learners.configuration import config
from learners.configuration.experiment import Experiment
from learners.job import pacing
from learners.processes import heartbeat
from learners.processes import process
from learners.processes import stop_plan
from tfrl import actors
from tfrl import logs
from tfrl import metrics as tfrl_metrics
from tfrl import replay
from tfrl.agents import interface

# A program's options are its flags' module's `Options` (`learners.collect`), which this
# module does not import: it would define the flags a second time under `python -m`.
FLAGS = flags.FLAGS

_CLOSE_TIMEOUT_S = 5.0  # at most; less when the launcher's stop gives less (stop_plan)
# The share of the program's stop grace its env's worker processes get to exit.
_ENV_CLOSE_FRACTION = 0.25
# How long a server may leave a variables pull unanswered before it counts as lost:
# many of the pull's 2-s questions, so that a loaded host is not taken for an outage.
_PULL_LOST_AFTER_S = 10.0


def collect(experiment: Experiment, root_dir: str, address: str,
            stop_event: threading.Event, options: Any) -> int:
  """Runs a collector until stopped (or `options.max_env_steps`).

  Args:
    experiment: the job's settings.
    root_dir: the job's directory (collectors keep no files there).
    address: 'host:port' of the Reverb server.
    stop_event: set to stop.
    options: see `learners.collect.Options`.

  Returns:
    The env steps it took.

  Raises:
    replay.VariablesNotPushedError: no variables within `variables_timeout_s`.
    Exception: an error of the environment or the policy, unchanged.
  """
  replay.wait_for_server(address)
  collector = _Collector(experiment, root_dir, address, stop_event, options)
  if not collector.warm_up_and_wait_for_policy():
    return collector.random_actor.env_steps  # stopped while waiting: not an error
  collector.run()
  logs.progress('Collector %d stopped after %d env steps.', options.task_id,
               collector.env_steps)
  return collector.env_steps


class _Collector:
  """One collector's parts and the phases of its run (`collect` calls them in order)."""

  def __init__(self, experiment: Experiment, root_dir: str, address: str,
               stop_event: threading.Event, options: Any):
    """Builds the envs, the agent and its policy, the writer and the actors."""
    self.experiment, self.root_dir, self.address = experiment, root_dir, address
    self.stop_event, self.options, self.task_id = stop_event, options, options.task_id
    self.layout = layout = experiment.layout
    self.num_envs = options.num_envs or experiment.num_envs
    # Multi-task: each collector steps one task, --task_id modulo the list.
    task = (self.task_id % len(experiment.tasks) if experiment.multi_task else None)
    self.env = experiment.make_env(num_envs=self.num_envs,
                                   seed=experiment.collect_seed(self.task_id), task=task)
    if task is not None:
      logs.progress('Collector %d steps task %d of %d, %s.', self.task_id, task + 1,
                    len(experiment.tasks), experiment.task_names[task])
    self.train_step, self.agent = experiment.build_agent()
    replay.check_table_signature(address, layout.experience_table,
                                 layout.item_signature(self.agent))
    client = replay.ReplayServer.connect(address).client
    self.writer = layout.make_writer(
        client, flush_timeout_ms=int(options.write_timeout_s * 1000), stop_event=stop_event)
    self.variables = replay.VariableContainer(
        address, experiment.pushed_variables(self.agent, self.train_step))
    policy = interface.collect_policy(self.agent, self.task_id, options.num_collectors)
    self.pull_period = options.variable_update_period or layout.vector_steps_per_pull
    # Summaries after every run of pull_period vector steps.
    self.actor = actors.Actor(
        self.env, policy, [self.writer], policy_version=self.train_step,
        summary_dir=os.path.join(root_dir, 'collect', f'task_{self.task_id}'),
        summary_interval=1, stop_event=stop_event)
    self.random_actor = actors.Actor(self.env, random_tf_policy.RandomTFPolicy(
        self.env.time_step_spec(), self.env.action_spec()), [self.writer],
                                     policy_version=-1, stop_event=stop_event)

  @property
  def env_steps(self) -> int:
    """The env steps taken, random warm-up included."""
    return self.actor.env_steps + self.random_actor.env_steps

  def warm_up_and_wait_for_policy(self) -> bool:
    """The layout's warm-up around the wait for the trainer's first push.

    Returns:
      False if stopped before or while waiting for the push (a job may end while a
      collector's warm-up writes still wait on the rate limiter).
    """
    try:
      return self._warm_up_and_wait()
    except (replay.WriterStoppedError, replay.VariablesNotPushedError):
      if self.stop_event.is_set():  # a write or the pull that waited saw the stop
        return False
      raise

  def _warm_up_and_wait(self) -> bool:
    experiment, layout, task_id = self.experiment, self.layout, self.task_id
    # Replay's warm-up (task 0's random actions) needs no policy: it runs while the
    # trainer starts. A sequence layout's warm-up acts with the policy: after its push.
    replay_warm_up = task_id == 0 and not layout.trains_on_collected_items
    if replay_warm_up and experiment.initial_collect_steps:
      layout.warm_up(self.actor, self.random_actor, experiment.initial_collect_steps)
    logs.progress('Collector %d waiting for the trainer\'s first variables push '
                 '(up to %.0f s).', task_id, self.options.variables_timeout_s)
    while True:
      try:
        self._pull()
        break
      except replay.VariablesNotPushedError:
        raise  # a timeout, not a lost server: the caller decides (stopped or not)
      except Exception as e:  # pylint: disable=broad-except
        # A server lost while waiting is waited out as in the collect loop (`_reconnect`).
        if not replay.is_server_lost(e):
          raise
        if self.stop_event.is_set() or not self._reconnect(e):
          return False
    logs.progress('Collector %d acting with policy version %d.', task_id,
                 int(self.train_step))
    if layout.trains_on_collected_items:
      layout.warm_up(self.actor, self.random_actor, experiment.initial_collect_steps)
    return True

  def _pull(self) -> None:
    # A server that stops answering mid-pull is lost like one a write meets: the pull
    # raises and `_reconnect` says so, rather than waiting out the timeout silently.
    self.variables.update(timeout_s=self.options.variables_timeout_s,
                          stop_event=self.stop_event, lost_after_s=_PULL_LOST_AFTER_S)

  def _new_pacing(self) -> Optional[pacing.UnrollPacing]:
    """PPO's unrolls each wait for the push that trains on them (learners/job/pacing.py)."""
    layout = self.layout
    if not (layout.trains_on_collected_items and interface.on_policy(self.agent)):
      return None
    return pacing.UnrollPacing(
        self.task_id, self.options.num_collectors,
        items_per_unroll=self.num_envs // layout.envs_per_item,
        items_per_push=(self.experiment.train_steps_per_iteration *
                        layout.items_per_train_step))

  def run(self) -> None:
    """Collects until stopped or `max_env_steps`, through lost servers; then closes."""
    options, stop_event = self.options, self.stop_event
    paced = self._new_pacing()
    beat = heartbeat.Heartbeat(self.root_dir, f'collect_{self.task_id}').start()
    last_log = time.monotonic()
    while not stop_event.is_set():
      if options.max_env_steps and self.env_steps >= options.max_env_steps:
        break
      try:
        metrics = self._unroll(paced, beat)
        if metrics is None:  # stopped while waiting for its turn
          break
      except (replay.WriterStoppedError, replay.VariablesNotPushedError,
              pacing.PolicyVersionTimeoutError):
        if stop_event.is_set():  # a write or pull that waited saw the stop signal
          break
        raise
      except Exception as e:  # pylint: disable=broad-except
        # Only a lost server is worth a retry; an error from the environment or the
        # policy ends the collector with that error.
        if not replay.is_server_lost(e):
          raise
        if stop_event.is_set() or not self._reconnect(e):
          break
        paced = self._new_pacing()  # a restarted server counts pushes from 0
        continue
      if time.monotonic() - last_log >= options.log_interval_s:
        last_log = time.monotonic()
        logs.progress('collector %d | env steps %d | %.0f env steps/s | avg return %s | '
                     'policy version %d', self.task_id, self.env_steps,
                     metrics['EnvStepsPerSecond'],
                     tfrl_metrics.format_return(metrics['AverageReturn']),
                     int(self.train_step))
    self._close()
    beat.stop()
    # Worker processes still stepping games get a moment to exit, then are killed: a
    # stopping collector has seconds (joining two Atari workers on a loaded machine
    # outlasted its 3.6 s), and a simulator holds nothing to save.
    self.env.close(timeout_s=_ENV_CLOSE_FRACTION * stop_plan.program_grace_s())

  def _unroll(self, paced: Optional[pacing.UnrollPacing], beat: heartbeat.Heartbeat
              ) -> Optional[dict]:
    """One run of `pull_period` vector steps with its pull (before it when paced, after
    it otherwise). Returns the actor's metrics; None if stopped while paced."""
    if paced is not None:
      with beat.doing('wait for the policy'):
        if not paced.wait_for_turn(self.variables.pushes, self.stop_event,
                                   self.options.variables_timeout_s):
          return None
      self._pull()
    with beat.doing('env step'):
      metrics = self.actor.run(self.pull_period)
    beat.progress(env_steps=self.env_steps)
    if paced is None:
      self._pull()
    else:
      with beat.doing('wait for the queue'):  # the trainer's to empty, not a stall
        self.writer.send_all()  # the unroll the trainer waits for, before this one waits
    return metrics

  def _reconnect(self, error: Exception) -> bool:
    """Waits out a lost server (up to `reconnect_timeout_s`); False if stopped first."""
    logging.warning('Lost the Reverb server at %s (%s: %s); reconnecting.', self.address,
                    type(error).__name__, error)
    self.writer.abandon()
    self.actor.reset()
    if not process.wait_for_server_with_backoff(
        self.address, self.options.reconnect_timeout_s, self.stop_event):
      return False
    logs.progress('Reverb server %s is back; collecting again.', self.address)
    return True

  def _close(self) -> None:
    """Sends what the writer holds, briefly, and well inside this program's share of the
    stop: once the trainer has stopped (the launcher stops it before the collectors), a
    rate limiter may hold these for good, and the env's worker processes still have to
    close after it (a tenth of the share: 0.4 of it left an Atari collector's two
    workers too little on a loaded 2-core machine, and it exited without its final save)."""
    close_timeout_s = min(_CLOSE_TIMEOUT_S, 0.1 * stop_plan.program_grace_s())
    try:
      self.writer.close(timeout_ms=int(close_timeout_s * 1000))
    except Exception as e:  # pylint: disable=broad-except
      if not replay.is_server_lost(e):
        raise
      logging.warning('The last items were not accepted within %.1f s (%s); dropped.',
                      close_timeout_s, e)


def main(options: Any) -> None:
  """Runs a collector as the parsed flags say, until stopped.

  Args:
    options: the collector's options, from its flags.
  """
  experiment = config.parse_from_flags()
  process.run_program(lambda stop_event: collect(
      experiment, FLAGS.root_dir, FLAGS.reverb_address, stop_event, options),
                      f'collector {options.task_id}')

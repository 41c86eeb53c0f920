"""The phases of a one-process job (`learners.train_eval`): build every component,
warm up (or load a dataset), collect and train with evaluations, export. Each phase is a
method of `OneProcessJob`; `train_eval.train_eval` calls them in order, as Dopamine's
Runner does."""
import contextlib
import json
import math
import os
import shutil
import threading
import time
from typing import Any, Dict, List, Optional

import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf
from tf_agents.policies import random_tf_policy

from tfrl import actors
from tfrl import learner as learner_lib
from tfrl import logs
from tfrl import metrics
from tfrl import replay
from tfrl import triggers
from tfrl.datasets import feeder
from tfrl.datasets import reverb_checkpoint
from tfrl.datasets import rlds
from learners.configuration import tasks as tasks_lib
from learners.configuration.experiment import Experiment
from learners.job import callbacks as callbacks_lib
from learners.job import collected_training
from learners.job import confirmations
from learners.job import progress_bar as progress_bar_lib
from learners.processes import process

SAMPLE_TIMEOUT_MS = 60_000
# Where a Reverb checkpoint named as the dataset is rewritten for this job's tables
# (`tfrl.datasets.reverb_checkpoint`); removed when the job ends.
DATASET_CHECKPOINT_DIR = 'dataset_checkpoint'
# Several tasks' per-task returns (and a sequence's forgetting): `OneProcessJob.task_report`.
TASKS_FILE = 'tasks.json'

class OneProcessJob:
  """The phases of one process's job: build, warm up, collect-and-train (with
  evaluations), export. Each phase is a method; `train_eval` calls them in order."""

  def __init__(self, root_dir: str, exp: Experiment, strategy: tf.distribute.Strategy,
               cleanup: contextlib.ExitStack, hooks: callbacks_lib.Hooks,
               stop_event: Optional[threading.Event] = None):
    """Builds every component; `cleanup` gets what must be closed on any exit, `hooks`
    the progress rows and evaluations. Once `stop_event` is set, training stops after
    the current iteration (an evaluation under way at once) and the job saves as at
    its end."""
    self.exp, layout, self.root_dir = exp, exp.layout, root_dir
    self.stop_event = stop_event or threading.Event()
    self.task_envs = self._make_envs(cleanup)
    self.env = self.task_envs[0]
    with strategy.scope():
      self.train_step = learner_lib.new_train_step()
      self.agent = exp.make_agent(self.env, self.train_step)
    # One process alternates collection and training, so the table has no ratio limiter
    # (it could block the learner while the actor is idle): the ratio is fixed by
    # collect/train steps per iteration instead.
    # The dataset is read now: its table samples once it holds all of it.
    self.dataset = (feeder.plan_load(exp.dataset_dir, layout, self.env)
                    if exp.dataset_dir is not None else None)
    tables = layout.tables(
        self.agent, None, **(dict(dataset_items=self.dataset.items) if self.dataset else {}))
    self.server = self._start_server(root_dir, tables, cleanup)
    self._make_actors(cleanup)
    self.evaluator = exp.make_evaluator(triggers.greedy(self.agent),  # every task
                                        stop_event=self.stop_event)
    cleanup.callback(self.evaluator.close)
    self.confirmer = confirmations.Confirmer(exp, triggers.greedy(self.agent), self.stop_event)
    cleanup.callback(self.confirmer.close)
    # The job's env steps, checkpointed with the agent: a resumed job counts on from
    # where it stopped (progress lines, summaries against env steps, export metadata).
    self.env_steps_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    self.eval_return_var = tf.Variable(float('nan'), dtype=tf.float32, trainable=False)
    metadata = {'env_steps': self.env_steps_var, 'eval_return': self.eval_return_var}
    if exp.tasks is not None:  # each task's last eval return, by name
      metadata['task_names'] = tf.Variable(list(exp.task_names), trainable=False)
      metadata['task_returns'] = self.task_returns_var = tf.Variable(
          [float('nan')] * len(exp.tasks), dtype=tf.float32, trainable=False)
    self.policy_trigger = triggers.PolicySavedModelTrigger(
        root_dir, self.agent, self.train_step, exp.policy_checkpoint_interval,
        metadata=metadata,
        saved_model_interval=exp.saved_model_interval or 0)
    # A sample that waits this long means the loop's own bookkeeping went wrong (this
    # process is the only collector): fail with a message instead of hanging. The
    # Learner's constructor builds the train function (trace, graph optimization):
    # graph building belongs to start-up, as the actors' and the evaluator's does, so
    # a broken train step fails here, before any collection, and the first train call
    # is not a second-long stall in the collect/train rhythm.
    self.learner = exp.make_learner(root_dir, self.server.address, self.agent,
                                    self.train_step, strategy,
                                    sample_timeout_ms=SAMPLE_TIMEOUT_MS,
                                    triggers=[self.policy_trigger, *hooks.triggers()],
                                    checkpoint_extras={'env_steps': self.env_steps_var})
    self.dataset_only_iterator = exp.dataset_only_iterator(
        self.learner, self.server.address, self.agent, SAMPLE_TIMEOUT_MS)
    self.collected_training = collected_training.CollectedTraining(
        self.learner, exp.layout, self.server.client, self.server.address,
        SAMPLE_TIMEOUT_MS, exp.hybrid_schedule, self.dataset_only_iterator)
    self.env_steps_before = int(self.env_steps_var.numpy())  # restored, or 0
    self.task_index: Optional[int] = None
    self.switch_task_if_due()  # a resumed job trains on the task it was on
    self.eval_writer = metrics.create_summary_writer(os.path.join(root_dir, 'eval'))
    self.collect_throughput, self.train_throughput = metrics.Throughput(), metrics.Throughput()
    self.history: List[Dict[str, Any]] = []
    self.confirmation_seed: Optional[int] = None
    self.progress: List[Dict[str, Any]] = []
    self.hooks = hooks
    self.bar: Optional[progress_bar_lib.ProgressBar] = None
    self.last_return = float('nan')
    self.start_step = self.learner.train_step_numpy
    self.start_time = time.perf_counter()

  def _make_envs(self, cleanup: contextlib.ExitStack):
    """The collect envs: one set per task in a sequence (one at a time collecting),
    else one set, whose sub-envs a multi-task job splits over the tasks; every task's
    specs are checked to be the same first."""
    exp = self.exp
    if exp.tasks is not None:
      specs = {}
      for i, name in enumerate(exp.task_names):
        with contextlib.closing(exp.make_env(num_envs=1, collect=False, task=i)) as env:
          specs[name] = (env.time_step_spec(), env.action_spec())
      tasks_lib.check_same_specs(specs)
    sequence = exp.task_sequence
    collect_envs = ([exp.make_env(task=i) for i in range(len(sequence.names))]
                    if sequence is not None else [exp.make_env()])
    for env in collect_envs:
      cleanup.callback(env.close)
    return collect_envs

  def _make_actors(self, cleanup: contextlib.ExitStack) -> None:
    """The writer and a collect actor per set of collect envs (per task in a sequence);
    the random warm-up acts on the first set."""
    exp = self.exp
    self.writer = exp.layout.make_writer(self.server.client)
    cleanup.callback(self.writer.abandon)  # after a normal end's close(), nothing to do
    writers = [self.writer]
    if exp.record_dir is not None:
      writers.append(rlds.RldsRecorder(
          exp.record_dir, self.env.time_step_spec(), self.env.action_spec(),
          metadata={'env': exp.env_display_name, 'job': self.root_dir}))
      cleanup.callback(writers[-1].close)  # the episodes that ended are on disk
    sequence = exp.task_sequence
    self.collect_actors = [
        actors.Actor(env, self.agent.collect_policy, writers, policy_version=self.train_step,
                     summary_dir=os.path.join(self.root_dir, 'collect', *(
                         [sequence.names[i]] if sequence is not None else [])))
        for i, env in enumerate(self.task_envs)]
    self.collect_actor = self.collect_actors[0]  # the task trained now (sequence)
    self.random_actor = actors.Actor(self.env, random_tf_policy.RandomTFPolicy(
        self.env.time_step_spec(), self.env.action_spec()), writers)

  def _start_server(self, root_dir: str, tables: list,
                    cleanup: contextlib.ExitStack) -> replay.ReplayServer:
    """The job's embedded server; a Reverb checkpoint named as the dataset is restored
    into it, from a scratch checkpoint under root_dir removed on exit."""
    self.dataset_seconds = 0.0
    if not isinstance(self.dataset, reverb_checkpoint.CheckpointPlan):
      server = replay.ReplayServer(tables)
    else:
      start = time.perf_counter()
      scratch = os.path.join(root_dir, DATASET_CHECKPOINT_DIR)
      shutil.rmtree(scratch, ignore_errors=True)  # left by a killed run
      cleanup.callback(shutil.rmtree, scratch, True)
      reverb_checkpoint.seed_checkpoint_dir(self.dataset, tables, scratch,
                                            self.exp.layout.dataset_table)
      server = replay.ReplayServer(tables, checkpoint_dir=scratch)
      self.dataset_seconds = time.perf_counter() - start
    cleanup.callback(server.stop)
    return server

  @property
  def env_steps(self) -> int:
    """The job's env steps: those of earlier runs of it and this process's."""
    return (self.env_steps_before + self.random_actor.env_steps +
            sum(actor.env_steps for actor in self.collect_actors))

  def switch_task_if_due(self) -> None:
    """With a task sequence, collects on the task its schedule names at this env step
    (a switch starts fresh episodes on that task's envs)."""
    sequence = self.exp.task_sequence
    if sequence is None:
      return
    index = sequence.index_at(self.env_steps)
    if index == self.task_index:
      return
    if self.task_index is not None:
      self.collect_actors[index].reset()  # also drops the writers' partial old-task items
    self.collect_actor, self.task_index = self.collect_actors[index], index
    logs.progress('Training on task %d of %d, %s, from env step %d.', index + 1,
                  len(sequence.names), self.exp.task_names[index], self.env_steps)

  def warm_up(self) -> None:
    """The layout's collection before the first train step (random actions for replay),
    or an offline job's dataset, written into the replay table."""
    exp = self.exp
    if exp.dataset_dir is not None:
      self.load_dataset()
    if not exp.offline:
      exp.layout.warm_up(self.collect_actor, self.random_actor, exp.initial_collect_steps)

  def load_dataset(self) -> None:
    """Writes `Experiment.dataset_dir` into the layout's table for datasets (a Reverb
    checkpoint's items are in already: restored as the server started)."""
    exp, plan = self.exp, self.dataset
    if isinstance(plan, reverb_checkpoint.CheckpointPlan):
      logs.progress('%s', reverb_checkpoint.loaded_message(plan, exp.layout,
                                                           self.dataset_seconds))
      return
    start = time.perf_counter()
    feeder.load_into_replay(plan, exp.layout, self.server.client, self.agent,
                            on_progress=lambda done, total: logs.progress(
                                'Loading the dataset: %d of %d vector steps written.',
                                done, total))
    logs.progress('%s', feeder.loaded_message(plan, exp.layout,
                                              time.perf_counter() - start))

  def collect_and_train(self) -> bool:
    """Collects, trains and evaluates until the budget or a confirmed target.

    Returns:
      Whether a confirmed evaluation reached the target.
    """
    exp = self.exp
    budget = (f' or {exp.max_train_seconds:g} s' if exp.max_train_seconds is not None
              else '')
    logs.progress('Training %s on %s from train step %d to %d%s (start-up %.1f s).',
                  type(self.agent).__name__, exp.env_display_name,
                  self.start_step, exp.num_train_steps, budget,
                  process.seconds_since_start())
    self.start_time = time.perf_counter()
    # The evaluations' grid: train steps, or env steps (eval_every_env_steps), where an
    # evaluation comes at the first train step at or past each multiple.
    on_env_steps = exp.eval_every_env_steps is not None
    position = (lambda: self.env_steps) if on_env_steps else (
        lambda: self.learner.train_step_numpy)
    next_eval = _next_multiple(position(), exp.eval_every_env_steps or exp.eval_interval)
    # Without a log_interval, progress lines come with the evaluations only.
    next_log = (math.inf if exp.log_interval is None else
                _next_multiple(self.start_step, exp.log_interval))
    while (self.learner.train_step_numpy < exp.num_train_steps and
           not self.stop_event.is_set() and
           not self.hooks.stop_requested):
      self.collect()
      if not self.train():
        continue
      step = self.learner.train_step_numpy
      seconds = time.perf_counter() - self.start_time
      if self.bar is not None:
        self.bar.advance(step, seconds)
      out_of_time = exp.max_train_seconds is not None and seconds >= exp.max_train_seconds
      if out_of_time and exp.log_interval is not None:
        # The budget's own progress line, before the final evaluation adds its time.
        self.log_progress(eval_return=None)
      if position() >= next_eval or step >= exp.num_train_steps or out_of_time:
        next_eval = (_next_multiple(self.env_steps, exp.eval_every_env_steps) if on_env_steps
                     else step + exp.eval_interval)
        if exp.log_interval is not None:
          next_log = _next_multiple(step, exp.log_interval)
        if self.evaluate() and self.confirm():
          return True
      elif step >= next_log:
        next_log = _next_multiple(step, exp.log_interval)
        self.log_progress(eval_return=None)
      if out_of_time:
        logs.progress('Stopping at train step %d: the budget of %g s of training is spent.',
                     step, exp.max_train_seconds)
        break
    return False

  def collect(self) -> None:
    """One iteration's vector steps (none offline, nor before a hybrid schedule's
    dataset-only steps are done)."""
    if (self.exp.offline or
        not self.exp.hybrid_schedule.collects(self.learner.train_step_numpy)):
      return
    self.switch_task_if_due()
    with self.collect_throughput.timing():
      self.collect_actor.run(self.exp.collect_steps_per_iteration)
      if self.exp.layout.trains_on_collected_items:
        # Wait until the items just written are in the table: counting unrolls while
        # they are still in flight would skip this iteration's training, and the
        # backlog that leaves would make every later batch several updates stale.
        self.collect_actor.flush()

  def train(self) -> int:
    """Runs the train steps the collected data allows; returns how many ran."""
    training = self.collected_training
    iterations = training.steps_available(self.writer.items_created,
                                          self.exp.train_steps_per_iteration)
    if not iterations:
      return 0
    self.env_steps_var.assign(self.env_steps)  # for a checkpoint written by this run
    with self.train_throughput.timing():
      return training.run(iterations, self.writer.items_created)

  def evaluate(self) -> bool:
    """Evaluates the greedy policy, records and logs it; returns whether it reached
    the target."""
    step, exp = self.learner.train_step_numpy, self.exp
    try:
      result = self.evaluator.run()
    except actors.EvaluationStopped:  # told to stop: save without playing it out
      logs.progress('Stopped during an evaluation at train step %d (not recorded).', step)
      return False
    # With tasks, the job's return (its target, the export metadata) is their mean.
    self.last_return, task_returns = result['AverageReturn'], result['task_returns']
    self.env_steps_var.assign(self.env_steps)
    self.eval_return_var.assign(self.last_return)
    self.history.append({'train_step': step, 'env_steps': self.env_steps,
                         'eval_return': self.last_return,
                         'seconds': time.perf_counter() - self.start_time})
    if exp.tasks is not None:
      self.history[-1]['task_returns'] = task_returns
      self.task_returns_var.assign(list(task_returns.values()))
    self.hooks.evaluation(self.history[-1])
    with self.eval_writer.as_default():
      tf.summary.scalar('eval/AverageReturn', self.last_return, step=step)
      tf.summary.scalar('eval/AverageReturn_vs_env_steps', self.last_return,
                        step=self.env_steps)
      for name, value in task_returns.items() if exp.tasks is not None else ():
        tf.summary.scalar(f'eval/{name}/AverageReturn', value, step=step)
    self.log_progress(eval_return=self.last_return)
    if exp.tasks is not None:
      logs.progress('eval return per task | %s', ' | '.join(
          f'{name} {metrics.format_return(value)}' for name, value in task_returns.items()))
    return exp.target.reached(result)

  def log_progress(self, eval_return: Optional[float]) -> None:
    """One progress line; 'eval return' only on the line of an evaluation at this step."""
    step = self.learner.train_step_numpy
    row = {'train_step': step, 'env_steps': self.env_steps,
           'train_return': self.collect_actor.stats.average_return(),
           'eval_return': eval_return,
           'env_steps_per_s': self.collect_throughput.active_rate(
               sum(actor.env_steps for actor in self.collect_actors)),
           'train_steps_per_s': self.train_throughput.active_rate(step - self.start_step),
           'seconds': time.perf_counter() - self.start_time}
    self.progress.append(row)
    self.hooks.progress(row)
    if self.bar is not None:
      self.bar.update(row)
    # A figure that does not apply (no episode finished yet, no collection in an offline
    # job) is left out rather than printed as nan.
    fields = [f'train step {step:7d}', f'env steps {row["env_steps"]:9d}']
    if eval_return is not None:
      fields.append(f'eval return {metrics.format_return(eval_return):>7}')
    if math.isfinite(row['train_return']):
      fields.append(f'train return {metrics.format_return(row["train_return"]):>7}')
    if math.isfinite(row['env_steps_per_s']):
      fields.append(f'{row["env_steps_per_s"]:8.0f} env steps/s')
    if math.isfinite(row['train_steps_per_s']):
      fields.append(f'{row["train_steps_per_s"]:6.0f} train steps/s')
    fields.append(f'{row["seconds"]:5.1f} s')
    logs.progress('%s', ' | '.join(fields))

  def confirm(self) -> bool:
    """Evaluates num_confirm_episodes fresh episodes (`learners.job.confirmations`), so
    one lucky evaluation does not end training."""
    try:
      result = self.confirmer.run()
    except actors.EvaluationStopped:
      logs.progress('Stopped during the confirmation (not recorded).')
      return False
    confirmation = result['AverageReturn']
    self.confirmation_seed = self.confirmer.last_seed
    logs.progress('Confirmation evaluation: %s over %d episodes (seeded from %d)',
                  metrics.format_return(confirmation), result['NumberOfEpisodes'],
                  self.confirmation_seed)
    return self.exp.target.reached(result)

  def save(self) -> Dict[str, str]:
    """A checkpoint and the policy SavedModels at the current train step; returns the
    policies' directories by name."""
    self.env_steps_var.assign(self.env_steps)
    self.learner.save_checkpoint()
    return self.policy_trigger.save_saved_models()

  def export(self, reached: bool) -> Dict[str, Any]:
    """Final checkpoint, summaries and SavedModels; returns train_eval's result."""
    train_seconds = time.perf_counter() - self.start_time
    paths = self.save()
    self.learner.train_summary_writer.flush()  # readers (notebooks) see every summary now
    self.writer.close()
    return {
        'train_step': self.learner.train_step_numpy,
        'env_steps': self.env_steps,
        'eval_return': self.last_return,
        'reached_target': reached,
        'stopped_by': self.hooks.stopped_by,
        'confirmation_seed': self.confirmation_seed,
        'greedy_policy_dir': paths[triggers.GREEDY_POLICY],
        'train_seconds': train_seconds,
        'history': self.history,
        'progress': self.progress,
        **({'tasks': self.task_report()} if self.exp.tasks is not None else {}),
    }

  def task_report(self) -> Dict[str, Any]:
    """Each task's best, final and mean return, and in a sequence what it forgot
    (`tasks_lib`); also written to root_dir/tasks.json with the history."""
    sequence = self.exp.task_sequence
    report = (tasks_lib.forgetting_report(self.history, sequence) if sequence is not None
              else tasks_lib.returns_report(self.history, self.exp.task_names))
    with tf.io.gfile.GFile(os.path.join(self.root_dir, TASKS_FILE), 'w') as f:
      json.dump({**report, 'history': self.history}, f, indent=1)
    return report


def _next_multiple(step: int, interval: int) -> int:
  """The first multiple of `interval` above `step`."""
  return (step // interval + 1) * interval

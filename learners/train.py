r"""The train program: the Learner fed from a Reverb server, pushing variables back.

    python -m learners.train --root_dir=runs/job --reverb_address=host:8000 \
      --gin_file=dqn_cartpole.gin [--strategy=mirrored]

After every `Learner.run` (Experiment.train_steps_per_iteration steps) it pushes the
policy variables and train step to the server's variables table, where collectors and
the evaluator pick them up. Checkpoints (root_dir/train/checkpoints) and policy exports
(root_dir/policies) run from triggers; a restarted trainer resumes from the latest
checkpoint. Under --strategy=multi_worker each worker runs this program with its own
TF_CONFIG; the chief pushes variables and exports, the others checkpoint under
root_dir/worker_<i>.

SIGTERM/SIGINT stop it after the current run, with a final checkpoint and (chief)
policy exports at the final train step; a trainer waiting for experience notices within
--sample_timeout_s. If the Reverb server stops answering for --server_lost_after_s, the
trainer waits for it (up to --reconnect_timeout_s); once it is back, training goes on if
Reverb's sample stream resumes, and otherwise the trainer restarts itself from its latest
checkpoint (a sample blocked on a lost server cannot be cancelled in-process).
Exit statuses: see learners/process.py.
"""
import atexit
import dataclasses
import os
import sys
import threading
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from learners import config
from learners import eval_barrier
from learners import heartbeat as heartbeat_lib
from learners import process
from learners.experiment import Experiment
from tfrl import distribute
from tfrl import logs
from tfrl import metrics
from tfrl import replay
from tfrl import run_dir
from tfrl import triggers



@dataclasses.dataclass(frozen=True)
class Options:
  """How a trainer runs (the flags of the same names).

  Attributes:
    log_interval_s: seconds between progress lines.
    sample_timeout_s: how long one sample may wait before the trainer looks at its stop
      signal (not under multi_worker, where workers must stay in step).
    data_timeout_s: exit with an error after this long without any experience.
    server_lost_after_s: the server is taken as lost after this long without an answer.
    reconnect_timeout_s: how long to wait for a lost server to come back.
    overwrite: see `tfrl.run_dir.claim`.
  """
  log_interval_s: float = 10.0
  sample_timeout_s: float = 5.0
  data_timeout_s: float = 600.0
  server_lost_after_s: float = 30.0
  reconnect_timeout_s: float = 600.0
  overwrite: bool = False


config.define_common_flags()
flags.DEFINE_string('reverb_address', '127.0.0.1:8000', 'host:port of the Reverb server.')
flags.DEFINE_enum('strategy', 'default', list(distribute.STRATEGIES),
                  'default | mirrored (local GPUs) | multi_worker (TF_CONFIG) | tpu.')
flags.DEFINE_string('tpu', None, 'TPU name or address, for --strategy=tpu.')
flags.DEFINE_float('log_interval_s', Options.log_interval_s,
                   'Seconds between progress lines.')
flags.DEFINE_float('sample_timeout_s', Options.sample_timeout_s,
                   'How long one sample may wait for experience before the trainer looks '
                   'at its stop signal (the dataset is then rebuilt and training goes on). '
                   'Not used under --strategy=multi_worker, where workers must stay in '
                   'step.')
flags.DEFINE_float('data_timeout_s', Options.data_timeout_s,
                   'Exit with an error after this long without any experience (are the '
                   'collectors running?).')
flags.DEFINE_float('server_lost_after_s', Options.server_lost_after_s,
                   'The Reverb server is taken as lost after this long without an answer.')
flags.DEFINE_float('reconnect_timeout_s', Options.reconnect_timeout_s,
                   'How long to wait for a lost server to come back (the trainer then '
                   'restarts itself from its latest checkpoint) before exiting with status '
                   f'{process.EXIT_SERVER_LOST}.')
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
                          options: Options) -> None:
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
                  checkpoint_dir: str, options: Options) -> None:
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


def train(root_dir: str, address: str, strategy: tf.distribute.Strategy,
          stop_event: threading.Event, options: Options = Options()) -> int:
  """Trains until the step budget or a stop; returns the final train step.

  Every normal end (the budget, or a stop signal) writes the final checkpoint and, on
  the chief, exports the policies at the final train step.

  Args:
    root_dir: the job's directory.
    address: 'host:port' of the Reverb server.
    strategy: the `tf.distribute` strategy to train under.
    stop_event: set to stop (after the current run, with the final saves).
    options: see `Options`.

  Returns:
    The final train step.

  Raises:
    NoExperienceError: no experience for --data_timeout_s (after the final save).
  """
  experiment = Experiment()
  is_chief, task_id = _worker_role(strategy)
  if is_chief:
    # The trainer (not the launcher) owns root_dir: it writes the checkpoints and
    # exports, under tfrl-launch or started by hand alike. Released at exit.
    lock = run_dir.claim(root_dir, options.overwrite)
    atexit.register(lock.release)
  job_dir = root_dir if is_chief else os.path.join(root_dir, f'worker_{task_id}')
  train_step, agent = experiment.build_agent(strategy)
  replay.wait_for_server(address)
  layout = experiment.layout
  replay.check_table_signature(address, layout.experience_table,
                               layout.item_signature(agent))
  variables = replay.VariableContainer(address,
                                       experiment.pushed_variables(agent, train_step))
  learner_triggers, policy_trigger = [], None
  if is_chief:
    policy_trigger = triggers.PolicySavedModelTrigger(
        root_dir, agent, train_step, experiment.policy_checkpoint_interval)
    learner_triggers = [policy_trigger]
  multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
  sample_timeout_ms = -1 if multi_worker else int(options.sample_timeout_s * 1000)
  learner = experiment.make_learner(job_dir, address, agent, train_step, strategy,
                                    sample_timeout_ms=sample_timeout_ms,
                                    triggers=learner_triggers)
  heartbeat = _Heartbeat()
  threading.Thread(target=_watch_server,
                   args=(address, stop_event, heartbeat, learner.checkpoint_dir, options),
                   name='server watchdog', daemon=True).start()
  if is_chief:
    variables.push()
  # Build the train function while the collectors (now released by the push) fill the
  # table, rather than in the first run().
  learner.compile()
  start_step, last_log = learner.train_step_numpy, 0.0
  throughput = metrics.Throughput()
  throughput.rate(start_step)
  logs.progress('Trainer (chief=%s) from train step %d to %d (start-up %.1f s).', is_chief,
               start_step, experiment.num_train_steps, process.seconds_since_start())
  # The chief holds still while the evaluator confirms a candidate policy, and ends
  # there once it is confirmed (see eval_barrier). Not under multi_worker: the other
  # workers would wait in a collective.
  barrier = eval_barrier.TrainerSide(root_dir) if is_chief and not multi_worker else None
  starved_since, error = None, None
  # 'train or wait for data' is not a work activity: a trainer starved by a stalled
  # collector must not be the one named. A frozen trainer stops beating.
  beat = heartbeat_lib.Heartbeat(root_dir, 'train' if is_chief else f'train_worker_{task_id}').start()
  beat.set_activity('train or wait for data')
  while learner.train_step_numpy < experiment.num_train_steps and not stop_event.is_set():
    heartbeat.beat()  # this thread is not stuck in a sample
    beat.progress(train_step=learner.train_step_numpy)
    if barrier is not None and _held_by_evaluator(barrier, learner, variables, stop_event):
      if eval_barrier.confirmed_step(root_dir) == barrier.paused_at:
        logs.progress('The evaluator confirmed the target at train step %d: stopping there.',
                     barrier.paused_at)
        break
      continue
    iterations = min(experiment.train_steps_per_iteration,
                     experiment.num_train_steps - learner.train_step_numpy)
    try:
      loss_info = learner.run(iterations=iterations)
    except tf.errors.OutOfRangeError:
      # No sample within --sample_timeout_s: the dataset ended. Look at the stop signal
      # (the collectors may have stopped first), then wait on with a new dataset.
      now = time.monotonic()
      starved_since = starved_since or now - options.sample_timeout_s
      if now - starved_since > options.data_timeout_s:
        error = NoExperienceError(
            f'No experience from table {layout.experience_table!r} at {address} for '
            f'{now - starved_since:.0f} s: are the collectors running?')
        break
      logs.progress('Waiting for experience from %s at %s (%.0f s so far).',
                   layout.experience_table, address, now - starved_since)
      learner.reset_iterator()
      continue
    starved_since = None
    if is_chief:
      try:
        variables.push()
      except replay.ReplayServerUnreachableError as e:
        logging.error('Lost the Reverb server at %s while pushing variables (%s); '
                      'waiting for it.', address, e)
        learner.save_checkpoint()  # the state is in hand here, unlike in the watchdog
        _wait_for_lost_server(address, stop_event, options)
        learner.reset_iterator()  # the old sample stream may be stuck on the lost server
    if time.monotonic() - last_log >= options.log_interval_s:
      last_log = time.monotonic()
      step = learner.train_step_numpy
      logs.progress('train step %d | loss %.4f | %.0f train steps/s', step,
                   float(np.mean(loss_info.loss)), throughput.rate(step))
  beat.set_activity('final save')
  learner.save_checkpoint()
  if policy_trigger is not None:
    policy_trigger.save_saved_models()
  beat.stop()
  logs.progress('Trainer stopped at train step %d (final checkpoint%s written).',
               learner.train_step_numpy, ' and policies' if policy_trigger else '')
  if error is not None:
    raise error
  return learner.train_step_numpy


def main(argv):
  del argv
  logs.quiet_absl_unless_asked()
  # The strategy first: MultiWorkerMirroredStrategy must exist before any other op.
  strategy = distribute.get_strategy(FLAGS.strategy, tpu=FLAGS.tpu)
  config.parse_from_flags()
  process.run_program(
      lambda stop_event: train(FLAGS.root_dir, FLAGS.reverb_address, strategy, stop_event,
                              config.options_from_flags(Options, FLAGS)),
      'trainer')
  process.exit_now(0)


def run_main():
  flags.mark_flag_as_required('root_dir')
  app.run(main)


if __name__ == '__main__':
  run_main()

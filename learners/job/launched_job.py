"""The launch program's body (`learners.launch` parses its flags, then runs `main`): runs
a job's programs under a `Launcher` until it ends or a signal comes, then stops them in
order and reports how it ended."""
import os
import signal
import sys
from typing import Any

from absl import flags
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

from learners.configuration import config
from learners.configuration import validation
from learners.job import finished_job
from learners.job import trainer_member
from learners.population import ready_points
from learners.processes import heartbeat
from learners.processes import process
from learners.processes import ray_backend
from learners.processes.launcher import JobFailedError
from learners.processes.launcher import JobStalledError
from learners.processes.launcher import Launcher
from tfrl import checkpoints
from tfrl import export
from tfrl import learner as learner_lib
from tfrl import metrics
from tfrl import run_dir
from tfrl import triggers

# A program's options are its flags' module's `Options` (`learners.launch`), which this
# module does not import: it would define the flags a second time under `python -m`.
FLAGS = flags.FLAGS


def _stop_after_stall(launcher: Launcher, what: str) -> None:
  """Ends a stalled job through the ordered stop and exits with EXIT_STALLED."""
  print(f'error: {what}; stopping the job.', file=sys.stderr, flush=True)
  for child in launcher.processes.values():
    if child.poll() is None:  # a SIGSTOPped process could not handle the stop's SIGTERM
      child.send_signal(signal.SIGCONT)
  problems = launcher.stop()
  if problems:
    print('  ' + '\n  '.join(problems), file=sys.stderr)
  print(f'error: {what} (exit status {process.EXIT_STALLED}). '
        f'{_final_state(launcher.root_dir)}', file=sys.stderr, flush=True)
  sys.exit(process.EXIT_STALLED)


def _final_state(root_dir: str) -> str:
  """Where the trainer's final checkpoint and the greedy export stand."""
  latest = tf.train.latest_checkpoint(os.path.join(root_dir, learner_lib.TRAIN_DIR,
                                                   learner_lib.CHECKPOINT_DIR))
  greedy = os.path.join(root_dir, triggers.POLICY_DIR, triggers.GREEDY_POLICY)
  return (f'Final checkpoint {latest}; greedy policy (train step '
          f'{export.exported_train_step(greedy)}) in {greedy}.')


def _last_evaluation(last: dict) -> str:
  """The evaluator's last row in words; a job stopped before its first evaluation
  finished says so rather than printing an empty row."""
  if not last:
    return 'stopped before its first evaluation finished.'
  return (f'last eval return {metrics.format_return(last["return"])} at train step '
          f'{last["train_step"]}; reached target: {last.get("reached_target")}.')


def _raise_keyboard_interrupt(signum, unused_frame):
  """Signal handler: SIGTERM, SIGINT and SIGHUP take Ctrl-C's path (the ordered stop).
  Further signals are ignored from here: one arriving before the ordered stop begins
  would otherwise escape it (PR_SET_PDEATHSIG under a dying parent sends several)."""
  process.ignore_stop_signals()
  raise KeyboardInterrupt(f'signal {signum}')


def main(options: Any) -> None:
  """Runs the job the parsed flags describe until it ends or a signal stops it.

  Args:
    options: how the launcher runs the job, from its flags.
  """
  backend = ray_backend.from_flags(
      trainer_gpus=None if options.ray_trainer_gpus < 0 else options.ray_trainer_gpus)
  try:
    validation.check_flags(options, ('port', 'num_collectors', 'status_interval_s',
                                     'timeout_s', 'stall_timeout_s'))
  except validation.ValidationError as e:
    config.fail(e.message)
  try:
    launcher = Launcher(FLAGS.root_dir, FLAGS.gin_file, FLAGS.gin_bindings,
                        options.num_collectors, options.port, backend=backend,
                        stop_grace_s=options.stop_grace_s, overwrite=FLAGS.overwrite,
                        trainer_args=_member_args())
    # The trainer takes root_dir's lock; probing it here refuses a busy root_dir before
    # any program starts.
    run_dir.RootDirLock(launcher.root_dir).release()
  except (config.ConfigError, run_dir.RootDirBusy) as e:
    config.fail(str(e))
  except ValueError as e:  # --stop_grace_s
    config.fail(f'--stop_grace_s: {e}')
  # A population's member is the runner's to start and end: it keeps no record.
  finished = (None if FLAGS.overwrite or FLAGS.pbt_dir else
              finished_job.finished_result(launcher.root_dir, launcher.experiment))
  if finished is not None:
    finished_job.announce(launcher.root_dir, launcher.experiment, finished)
    print(f'Job already finished: last eval return '
          f'{metrics.format_return(finished["eval_return"])} at train step '
          f'{finished["train_step"]}. {_final_state(launcher.root_dir)}')
    return
  _run_job(launcher, options)


def _record_end(launcher: Launcher, last: dict) -> None:
  """Records the job's end where it reached its target or its train steps
  (`learners.job.finished_job`): the final checkpoint's step, the last evaluation."""
  prefixes = checkpoints.checkpoint_prefixes(os.path.join(
      launcher.root_dir, learner_lib.TRAIN_DIR, learner_lib.CHECKPOINT_DIR))
  if not last or not prefixes:
    return
  finished_job.record(launcher.root_dir, launcher.experiment, {
      'train_step': int(prefixes[0].rsplit('-', 1)[1]),
      'env_steps': last.get('env_steps', 0), 'eval_return': last['return'],
      'reached_target': bool(last.get('reached_target')),
      'confirmation_seed': last.get('confirmation_seed'), 'history': [last]})


def _member_args():
  """The trainer's flags that make this job a population's member, if it is one."""
  if not FLAGS.pbt_dir:
    return []
  if FLAGS.member is None:
    config.fail('--pbt_dir names a population: --member must say which member this is')
  return [f'--pbt_dir={os.path.abspath(FLAGS.pbt_dir)}', f'--member={FLAGS.member}',
          f'--ready_interval={FLAGS.ready_interval}',
          f'--decision_timeout_s={FLAGS.decision_timeout_s}']


def _run_job(launcher: Launcher, options: Any) -> None:
  """Starts the job, reports it until it ends or a signal comes, then stops it in order;
  ends the process with the job's exit status where it is not 0."""
  results = []
  # SIGTERM (timeout, Slurm, Kubernetes, systemd) and SIGHUP run Ctrl-C's ordered stop.
  process.on_stop_signals(_raise_keyboard_interrupt)
  try:
    launcher.start()
    results = launcher.wait(options.status_interval_s, options.timeout_s,
                            monitor=heartbeat.Monitor(launcher.root_dir,
                                                      options.stall_timeout_s))
  except JobStalledError as e:
    _stop_after_stall(launcher, str(e))
  except KeyboardInterrupt:
    print('Interrupted: stopping the job in order (evaluator, trainer, collectors, '
          'server); this takes a few seconds.', flush=True)
  except JobFailedError as e:
    print(f'error: {e}', file=sys.stderr)
    # A population member whose program refused its configuration (status 2): the
    # population's runner ends the population instead of restarting it.
    sys.exit(2 if FLAGS.pbt_dir and e.status == 2 else 1)
  process.ignore_stop_signals()  # a second signal must not cut the ordered stop
  problems = launcher.stop()
  if problems:
    print('error: the job did not stop cleanly:\n  ' + '\n  '.join(problems),
          file=sys.stderr)
    sys.exit(process.EXIT_STOP_TIMEOUT if launcher.killed else 1)
  if launcher.lost:
    print(f'Lost during the job (reported above): {", ".join(sorted(launcher.lost))}.')
  # After Ctrl-C/SIGTERM `wait` returned nothing: the evaluator's file has what it did.
  results = results or launcher.eval_results()
  last = results[-1] if results else {}
  if FLAGS.pbt_dir:  # the runner reads the member's end from its result
    trainer_member.write_result(ready_points.ReadyPoints(
        FLAGS.pbt_dir, FLAGS.member, FLAGS.ready_interval), launcher.root_dir, last)
  else:
    _record_end(launcher, last)
  print(f'Job finished: {_last_evaluation(last)} {_final_state(launcher.root_dir)}')

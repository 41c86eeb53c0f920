r"""Starts a whole job on this host: Reverb server, collectors, trainer, evaluator.

    python -m learners.launch --root_dir=runs/job --gin_file=dqn_cartpole.gin \
      --num_collectors=2

Each program runs as a subprocess logging to root_dir/logs/<name>.log. A status line
(alive/dead per process, env steps/s, train steps/s, last eval return) prints every
--status_interval_s. The job ends when the evaluator finishes (target return reached
and confirmed, or the train step budget evaluated); then, or on Ctrl-C, SIGTERM or
SIGHUP (within --stop_grace_s), every process is
stopped in an order that lets the trainer finish: the evaluator, then the trainer while
the collectors still feed it (it writes its final checkpoint and policies), then the
collectors, then the server (final Reverb checkpoint). Each gets SIGTERM, then SIGKILL
after a grace period. Children run in their own session, so a Ctrl-C reaches only the
launcher, which stops them in that order.

Exit status 0 means every process ended cleanly and the trainer wrote its final
checkpoint and exports. If a process dies on its own, the launcher says which, repeats
its 'error:' line and the tail of its log, stops the rest and exits 1; 3 when a process
had to be killed at the stop; 5 when a process stalled or stopped answering for
--stall_timeout_s (learners/heartbeat.py); 2 for bad flags or settings, before anything
starts. Children also get SIGTERM if the launcher itself is killed, so none are
orphaned. The programs reach each other on loopback addresses; the Reverb server
listens on every interface (docs/trust-model.md).

With --pbt_dir and --member the job is a member of a population (`tfrl-pbt
--member_program=launch`): the trainer reports at the ready points
(learners/trainer_member.py) and the launcher writes the member's result at the end.

This module is the command line; the `Launcher` it drives (also the notebooks' API,
importable from here) is in learners/launcher.py, its status line in
learners/job_status.py.
"""
import dataclasses
import os
import signal
import sys
from typing import Optional

from absl import flags
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

from learners import config
from learners import finished_job
from learners import heartbeat
from learners import launcher as launcher_lib
from learners import process
from learners import program
from learners import ready_points
from learners import stop_plan
from learners import trainer_member
from learners import validation
from tfrl import checkpoints
from tfrl import export
from tfrl import learner as learner_lib
from tfrl import metrics
from tfrl import run_dir
from tfrl import triggers

# The launcher's API, where notebooks and tests have always imported it from.
JobFailedError = launcher_lib.JobFailedError
JobStalledError = launcher_lib.JobStalledError
Launcher = launcher_lib.Launcher
LOG_DIR = launcher_lib.LOG_DIR
REVERB_DIR = launcher_lib.REVERB_DIR


@dataclasses.dataclass(frozen=True)
class Options:
  """How the launcher runs a job: each field is also the flag of its name, and its
  metadata's help text says what it does (see `config.option`)."""
  num_collectors: int = config.option(2, 'Collector processes.')
  port: int = config.option(0, 'Reverb port (0: pick a free one).')
  status_interval_s: float = config.option(10.0, 'Seconds between status lines.')
  stop_grace_s: float = config.option(
      stop_plan.DEFAULT_STOP_GRACE_S, 'Seconds the ordered stop (Ctrl-C, SIGTERM, SIGHUP, '
      "the end) may take in all, split between its stages; match the scheduler's grace "
      'period.')
  timeout_s: float = config.option(0.0, 'Stop with an error after this long (0: never).')
  stall_timeout_s: float = config.option(
      120.0, 'End the job (exit status 5) when a process makes no progress while '
      'working, or does not answer, for this long (0: never).')
  ray_trainer_gpus: float = config.option(
      -1.0, 'GPUs the trainer asks Ray for (-1: one if the cluster has any).')


config.define_common_flags()
config.define_flags(Options)
config.define_ray_flags()
# A population's member (`learners.pbt --member_program=launch`): passed to the trainer.
ready_points.define_member_flags()
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


def _main() -> None:
  options = config.options_from_flags(Options, FLAGS)
  backend = config.ray_backend_from_flags(
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
  (`learners.finished_job`): the final checkpoint's step, the last evaluation."""
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


def _run_job(launcher: Launcher, options: Options) -> None:
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


def run_main():
  """Console-script entry point (tfrl-launch)."""
  program.run_main(_main)


if __name__ == '__main__':
  run_main()

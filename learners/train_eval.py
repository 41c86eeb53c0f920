r"""Trains an agent in one process: embedded Reverb server, batched actor, Learner.

    python -m learners.train_eval --root_dir=runs/dqn \
      --gin_file=learners/configs/dqn_cartpole.gin --gin_bindings='Experiment.seed=1'

Each iteration collects `collect_steps_per_iteration` vector steps (num_envs env steps
each) and then runs `train_steps_per_iteration` train steps in one compiled call, so the
ratio of training to collection is fixed by configuration, not by process speeds. Every
`eval_interval` train steps the greedy policy plays `num_eval_episodes` episodes and a
progress line is logged (and every `log_interval` train steps when that is set, with the
training episodes' return). Training ends at `num_train_steps`, at a confirmed
`target_return`, or past `max_train_seconds` of wall clock. Re-running with the same root_dir resumes from the latest
checkpoint. The greedy policy's SavedModel ends up in root_dir/policies/greedy_policy.
"""
import contextlib
import dataclasses
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

from absl import flags

# Only what parsing the command line needs: the rest (TensorFlow with it) is imported
# where it is used, so `--help` and a bad command line import no TensorFlow.
from learners.configuration import config
from learners.configuration import validation
from learners.processes import program

if TYPE_CHECKING:  # annotations only
  from learners.configuration.experiment import Experiment
  from learners.job import callbacks as callbacks_lib
  from learners.job import training_result

OnEvaluation = Callable[[Dict[str, Any]], None]
OnProgress = Callable[[Dict[str, Any]], None]


def train_eval(root_dir: str, strategy: str = 'default',
               experiment: Optional['Experiment'] = None,
               on_evaluation: Optional[OnEvaluation] = None,
               on_progress: Optional[OnProgress] = None,
               progress_bar: bool = False, overwrite: bool = False,
               stop_event: Optional[threading.Event] = None,
               callbacks: Sequence['callbacks_lib.Callback'] = ()
               ) -> 'training_result.TrainingResult':
  """Trains, evaluates and exports in one process; returns the final figures.

  Args:
    root_dir: where checkpoints, summaries and policies go.
    strategy: 'default' | 'mirrored' | 'multi_worker' | 'tpu' (see tfrl.distribute).
    experiment: the settings (default: `Experiment()` as bound in gin).
    on_evaluation: called after each evaluation with its history row (train_step,
      env_steps, eval_return, seconds), e.g. to drive a notebook's progress bar.
    on_progress: called with the row of each progress line (train_step, env_steps,
      train_return: the training episodes' mean over the last 100, eval_return: this
      line's evaluation or None, env_steps_per_s, train_steps_per_s, seconds), e.g. to
      draw a learning curve from the training episodes.
    progress_bar: show a tqdm bar (a widget in a notebook) while training: ETA, env
      steps/s, the last eval return; the progress lines print above it.
    stop_event: once set, training stops after the current iteration (an evaluation
      under way at once, unrecorded) and the job ends as at its budget: final
      checkpoint and exports at the last train step.
    overwrite: start from scratch, deleting root_dir's checkpoints and exports, instead
      of resuming or refusing (see `tfrl.run_dir.claim`).
    callbacks: `learners.job.callbacks.Callback`s: they see progress lines and evaluations
      and may stop training (which then ends as at its budget), save, or add triggers.

  Returns:
    A `learners.job.training_result.TrainingResult`: `predict` acts with the trained
    policy, `policy_dir` is its export; as a dict, train_step, env_steps, eval_return
    (last evaluation), reached_target, stopped_by (the name of the callback that
    stopped training, or None), confirmation_seed (the seed that replays the confirming evaluation's episodes, see
    `tfrl.actors.Evaluator`; None without one), greedy_policy_dir, train_seconds (from
    the first train step), history (evals), progress (the rows of every progress line);
    for a job that had already ended where these settings end it (its target reached or
    its train steps spent, `learners.job.finished_job`), that end, with already_finished
    True, and nothing is trained.

  Raises:
    learners.configuration.config.ConfigError: the agent cannot act in the env's
      action space.
    tfrl.run_dir.RootDirBusy: another job holds root_dir.
    tfrl.run_dir.RootDirNotResumable: exports but no checkpoint, without `overwrite`.
    tfrl.checkpoints.NoReadableCheckpoint (a RootDirNotResumable): checkpoints, none
      readable.
    RuntimeError: the loop's own data did not reach its train step in time.
    ValueError: the agent does not fit the data layout.
    TypeError: a callback that is not a `learners.job.callbacks.Callback`.
  """
  # pylint: disable=g-import-not-at-top (see the module's imports)
  from tfrl import distribute  # first: tfrl imports TensorFlow without its noise
  from tfrl import layouts
  from tfrl import logs
  from tfrl import run_dir
  import tensorflow as tf
  from learners.configuration.experiment import Experiment
  from learners.job import callbacks as callbacks_lib
  from learners.job import finished_job
  from learners.job import one_process_job
  from learners.job import progress_bar as progress_bar_lib
  from learners.job import training_result
  # pylint: enable=g-import-not-at-top
  exp = experiment or Experiment()
  config.check_agent_fits_env(exp)
  hooks = callbacks_lib.Hooks(callbacks, on_evaluation, on_progress)
  # Python's, NumPy's and TensorFlow's generators: Keras' unseeded initializers draw
  # their seeds from Python's, so TensorFlow's global seed alone left a network's first
  # weights to chance.
  tf.keras.utils.set_random_seed(exp.seed)
  if exp.deterministic:
    tf.config.experimental.enable_op_determinism()
    if not isinstance(exp.layout, layouts.SequenceQueue) or isinstance(
        exp.layout, layouts.SequenceQueueAndReplay):
      logs.progress('Experiment.deterministic: ops are deterministic, but replay samples '
                    'are not (Reverb seeds no selector): runs of one seed still differ.')
  with contextlib.ExitStack() as cleanup:  # on any exit, errors included
    cleanup.enter_context(run_dir.claim(root_dir, overwrite))  # held to the end
    finished = None if overwrite else finished_job.finished_result(root_dir, exp)
    if finished is not None:
      finished_job.announce(root_dir, exp, finished)
      return training_result.TrainingResult(finished)
    job = one_process_job.OneProcessJob(root_dir, exp, distribute.get_strategy(strategy),
                                        cleanup, hooks, stop_event)
    job.warm_up()
    if progress_bar:
      job.bar = cleanup.enter_context(progress_bar_lib.ProgressBar(
          exp.num_train_steps, job.learner.train_step_numpy, exp.max_train_seconds,
          desc=f'{type(job.agent).__name__} on {exp.env_display_name}'))
    hooks.train_start(callbacks_lib.JobContext(root_dir, exp, job.agent, job.learner,
                                               save=job.save, stop_event=job.stop_event,
                                               env_steps=lambda: job.env_steps))
    reached = job.collect_and_train()
    if job.bar is not None:
      job.bar.close()  # before the export's lines
    result = training_result.TrainingResult(job.export(reached))
    finished_job.record(root_dir, exp, result)
  hooks.train_end(result)
  return result


def run(root_dir: str, gin_files: Sequence[str] = (), gin_bindings: Sequence[str] = (),
        on_evaluation: Optional[OnEvaluation] = None,
        on_progress: Optional[OnProgress] = None, progress_bar: bool = False,
        overwrite: bool = False, stop_event: Optional[threading.Event] = None,
        callbacks: Sequence['callbacks_lib.Callback'] = (), **overrides
        ) -> 'training_result.TrainingResult':
  """The Python entry point (notebooks, tests): parse gin, then `train_eval`.

  Args:
    root_dir: the job's directory.
    gin_files: .gin paths (or names of files in learners/configs).
    gin_bindings: extra 'configurable.param = value' lines.
    on_evaluation, on_progress, progress_bar, overwrite, stop_event, callbacks: see
      `train_eval`.
    **overrides: `Experiment` fields, applied over gin.

  Returns:
    What `train_eval` returns: the figures, and `predict` with the trained policy.

  Raises:
    learners.configuration.config.ConfigError: a missing gin file, a bad binding, or a
      root_dir that is a file.
  """
  try:
    validation.check_root_dir(root_dir, 'root_dir')
  except validation.ValidationError as e:
    raise config.ConfigError(e.message) from e
  parsed = config.parse(gin_files, gin_bindings)
  try:
    experiment = dataclasses.replace(parsed, **overrides)
  except validation.ValidationError as e:  # one line naming the field already
    raise config.ConfigError(e.message) from e
  except (ValueError, TypeError) as e:
    raise config.ConfigError(f'Invalid Experiment settings {overrides}: {e}') from e
  return train_eval(root_dir, experiment=experiment, on_evaluation=on_evaluation,
                    on_progress=on_progress, progress_bar=progress_bar,
                    overwrite=overwrite, stop_event=stop_event, callbacks=callbacks)


FLAGS = flags.FLAGS
config.define_common_flags()
flags.DEFINE_enum('progress_bar', 'auto', ['auto', 'on', 'off'],
                  'A tqdm progress bar while training: auto shows it when stderr is a '
                  'terminal (not in logs or pipes).')


def _show_progress_bar(choice: str) -> bool:
  return choice == 'on' or (choice == 'auto' and sys.stderr.isatty())


def main(callbacks: Sequence['callbacks_lib.Callback'] = ()) -> None:
  """The program's body, also that of programs that add callbacks (`learners.pbt_member`)."""
  # pylint: disable=g-import-not-at-top (see the module's imports)
  from tfrl import envs  # first: tfrl imports TensorFlow without its noise
  from tfrl import metrics
  from tfrl import run_dir
  from tfrl.datasets import rlds
  from learners.processes import disk_full
  from learners.processes import process
  # pylint: enable=g-import-not-at-top
  experiment = config.parse_from_flags(one_process=True)
  stopped = threading.Event()

  def work(stop_event: threading.Event) -> Dict[str, Any]:
    result = train_eval(FLAGS.root_dir, experiment=experiment,
                        progress_bar=_show_progress_bar(FLAGS.progress_bar),
                        overwrite=FLAGS.overwrite, stop_event=stop_event,
                        callbacks=callbacks)
    if stop_event.is_set():
      stopped.set()
    return result

  try:
    # SIGTERM/SIGHUP/SIGINT: stop after the current iteration, with the final saves.
    result = process.run_until_signal(work, 'train_eval')
  except run_dir.START_ERRORS as e:
    config.fail(str(e))
  except rlds.DatasetError as e:
    config.fail(f'Experiment.dataset_dir: {e}')
  except FileExistsError as e:  # a recording's directory holds files already
    config.fail(f'Experiment.record_dir: {e}')
  except envs.EnvStepTimeoutError as e:  # a hung simulator in an env worker
    print(f'error: {e}', file=sys.stderr, flush=True)
    process.exit_now(process.EXIT_STALLED)
  except Exception as e:  # pylint: disable=broad-except
    disk_full.exit_if_disk_full(e)
    raise
  target = experiment.target
  if result.get('already_finished'):
    print(f'Already finished at step {result["train_step"]} ({result["env_steps"]} env '
          f'steps); last eval return {metrics.format_return(result["eval_return"])}.')
  else:
    print(f'Trained to step {result["train_step"]} ({result["env_steps"]} env steps) in '
          f'{result["train_seconds"]:.1f} s; last eval return '
          f'{metrics.format_return(result["eval_return"])}.')
  print(f'Greedy policy exported to: {os.path.abspath(result["greedy_policy_dir"])}')
  if stopped.is_set():
    print(f'Stopped by a signal at train step {result["train_step"]}; final checkpoint '
          'and exports saved.')
  elif target.is_set and not result['reached_target']:
    print(f'error: the eval return never reached the target {target} within '
          f'{result["train_step"]} train steps.', file=sys.stderr)
    process.exit_now(1)


def run_main():
  """Console-script entry point (tfrl-train-eval)."""
  program.run_main(main, extra_arguments_ok=False)


if __name__ == '__main__':
  run_main()

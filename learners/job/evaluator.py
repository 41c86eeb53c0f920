"""The eval program's body (`learners.eval` parses its flags, then runs `main`): follows
a trainer and evaluates its policy when due, or evaluates one exported policy."""
import csv
import dataclasses
import io
import os
import threading
import time
from typing import Any, Dict, Optional

from absl import flags
from absl import logging
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

from learners.configuration import config
from learners.configuration import tasks as tasks_lib
from learners.configuration.experiment import Experiment
from learners.job import confirmations
from learners.job import eval_barrier
from learners.processes import heartbeat
from learners.processes import process
from tfrl import actors
from tfrl import export
from tfrl import files
from tfrl import logs
from tfrl import metrics
from tfrl import replay
from tfrl import seeding
from tfrl import triggers
from tfrl.datasets import behaviour
from tfrl.datasets import rlds
from tfrl.envs import sources
from tfrl.envs import video

# A program's options are its flags' module's `Options` (`learners.eval`), which this
# module does not import: it would define the flags a second time under `python -m`.
FLAGS = flags.FLAGS
PAUSE_TIMEOUT_S = 60.0  # for the trainer to hold still for a candidate policy
EVAL_DIR = eval_barrier.EVAL_DIR
RESULTS_CSV = 'results.csv'
RESULTS_JSON = eval_barrier.RESULTS_JSON


class ResultsLog:
  """Appends evaluations to results.csv / results.json and TensorBoard summaries."""

  def __init__(self, root_dir: str):
    self.directory = os.path.join(root_dir, EVAL_DIR)
    tf.io.gfile.makedirs(self.directory)  # any TensorFlow filesystem (tfrl.files)
    self._json_path = os.path.join(self.directory, RESULTS_JSON)
    self.rows = files.read_json(self._json_path) or []
    self._writer = metrics.create_summary_writer(self.directory)

  def add(self, row: Dict[str, Any]) -> None:
    self.rows.append(row)
    files.write_json(self._json_path, self.rows)  # readers never see half a file
    # Rewritten whole (an object store cannot append), through a rename as the JSON.
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=sorted({k for r in self.rows for k in r}))
    writer.writeheader()
    writer.writerows(self.rows)
    files.write_text(os.path.join(self.directory, RESULTS_CSV), text.getvalue())
    with self._writer.as_default():
      tf.summary.scalar('eval/AverageReturn', row['return'], step=row['train_step'])
      tf.summary.scalar('eval/AverageReturn_vs_env_steps', row['return'],
                        step=row['env_steps'])
      for name, value in row.get('task_returns', {}).items():  # with Experiment.tasks
        tf.summary.scalar(f'eval/{name}/AverageReturn', value, step=row['train_step'])


def evaluate_saved_model(experiment: Experiment, path: str,
                         video_dir: Optional[str] = None, record_dir: Optional[str] = None,
                         record_noise: float = 0.0, num_episodes: Optional[int] = None
                         ) -> Dict[str, Any]:
  """Evaluates an exported policy once on the Experiment's eval env.

  Args:
    experiment: the job's settings (its eval env, episodes and seed).
    path: the policy's SavedModel directory.
    video_dir: record the evaluation's episodes there as MP4s.
    record_dir: record the episodes as an RLDS dataset there (`tfrl.datasets.rlds`).
    record_noise: exploration added to the policy (`tfrl.datasets.behaviour`).
    num_episodes: episodes to play (default: experiment.num_eval_episodes).

  Returns:
    The evaluator's result (AverageReturn, NumberOfEpisodes, ...).

  Raises:
    FileNotFoundError, tfrl.export.NotAPolicyError: no exported policy at `path`.
    FileExistsError: `record_dir` already holds files.
    ValueError: recording the lives of Atari games (terminal_on_life_loss), or a bad
      `record_noise`.
  """
  loaded = export.load_policy(path)
  policy = (behaviour.NoisyPolicy(loaded, record_noise, seed=experiment.seed)
            if record_noise else loaded)
  episodes = num_episodes or experiment.num_eval_episodes
  experiment = dataclasses.replace(experiment, num_eval_episodes=episodes)
  if experiment.tasks is not None and not record_dir:
    return _evaluate_every_task(experiment, policy, path, loaded.get_train_step(),
                                video_dir)
  env = experiment.make_eval_env(video_dir)
  recorder = None
  try:
    if record_dir:
      recorder = _recorder(experiment, env, record_dir, path, record_noise)
    result = actors.Evaluator(env, policy, episodes,
                              seed=_saved_model_seed(experiment, record_dir),
                              recorder=recorder).run()
  finally:
    if recorder is not None:
      recorder.close()
    env.close()  # a video's last file is written here
  logs.progress('SavedModel %s (train step %d): average return %s over %d episodes.',
               path, loaded.get_train_step(), metrics.format_return(result['AverageReturn']),
               result['NumberOfEpisodes'])
  if video_dir:
    logs.progress('Videos of its episodes in %s.', video_dir)
  if recorder is not None:
    logs.progress('Recorded %d episodes (%d transitions) as an RLDS dataset in %s.',
                  recorder.episodes, recorder.steps, record_dir)
  return result


def _evaluate_every_task(experiment: Experiment, policy, path: str, step: int,
                         video_dir: Optional[str]) -> Dict[str, Any]:
  """`evaluate_saved_model` with Experiment.tasks: every task, their mean as the
  return (a recording takes the first task's envs only)."""
  evaluator = experiment.make_evaluator(policy, video_dir)
  try:
    result = evaluator.run()
  finally:
    evaluator.close()
  logs.progress('SavedModel %s (train step %d): average return %s over %d episodes | %s',
               path, step, metrics.format_return(result['AverageReturn']),
               result['NumberOfEpisodes'], ' | '.join(
                   f'{name} {metrics.format_return(value)}'
                   for name, value in result['task_returns'].items()))
  return result


def _recorder(experiment: Experiment, env, record_dir: str, path: str, noise: float
              ) -> rlds.RldsRecorder:
  if experiment.terminal_on_life_loss:
    raise ValueError('Recording with terminal_on_life_loss would store lives, not games: '
                     'record with Experiment.terminal_on_life_loss = False.')
  return rlds.RldsRecorder(record_dir, env.time_step_spec(), env.action_spec(), metadata={
      'env': sources.display_name(experiment.env_name), 'policy': path,
      'noise': noise, 'seed': _saved_model_seed(experiment, record_dir)})


def _saved_model_seed(experiment: Experiment, record_dir: Optional[str]) -> int:
  """The first env seed of an exported policy's evaluation: the job's own first
  evaluation's episodes, or for a recording a stream of its own."""
  return (seeding.derive(experiment.seed, seeding.RECORD) if record_dir
          else experiment.eval_seed)


def follow(experiment: Experiment, root_dir: str, address: str,
           stop_event: threading.Event, options: Any,
           video_dir: Optional[str] = None) -> Dict[str, Any]:
  """Evaluates the trainer's policy as it trains; returns the last result row.

  Args:
    experiment: the job's settings.
    root_dir: the job's directory (results go to root_dir/eval).
    address: 'host:port' of the Reverb server.
    stop_event: set to stop.
    options: see `learners.eval.Options`.
    video_dir: record every evaluation's episodes there as MP4s.

  Returns:
    The last row of the results log ({} if none).
  """
  interval = options.eval_interval or experiment.eval_interval
  train_step, agent = experiment.build_agent()
  replay.wait_for_server(address)
  variables = replay.VariableContainer(address,
                                       experiment.pushed_variables(agent, train_step))
  # Every task; a stop (SIGTERM) ends an evaluation under way.
  evaluator = experiment.make_evaluator(triggers.greedy(agent), video_dir, stop_event)
  confirmer = confirmations.Confirmer(experiment, triggers.greedy(agent), stop_event)
  log = ResultsLog(root_dir)
  barrier = eval_barrier.EvaluatorSide(root_dir)
  row = {}
  # Not a work activity (an evaluation may wait on the trainer); a frozen evaluator
  # stops beating and reads as 'not answering'.
  beat = heartbeat.Heartbeat(root_dir, 'eval').start()
  beat.set_activity('evaluate or wait for a policy')
  while not stop_event.is_set():
    beat.progress(train_step=row.get('train_step', -1))
    try:
      row = _evaluate_when_due(experiment, address, variables, train_step, evaluator,
                               confirmer, log, interval, barrier, stop_event, options) or row
    except actors.EvaluationStopped:
      barrier.release()  # a trainer held for a confirmation goes on to its own stop
      logs.progress('Stopped during an evaluation (not recorded).')
      break
    except Exception as e:  # pylint: disable=broad-except
      if not replay.is_server_lost(e):  # only a lost server is worth a retry
        raise
      logging.warning('Lost the Reverb server at %s (%s: %s); waiting for it.', address,
                      type(e).__name__, e)
      process.wait_for_server_with_backoff(address, options.reconnect_timeout_s, stop_event)
      continue
    if row.get('reached_target') or row.get('train_step', -1) >= experiment.num_train_steps:
      return row
  return row


def _due(experiment: Experiment, address: str, step: int, last: Optional[Dict[str, Any]],
         interval: int) -> bool:
  """Whether an evaluation is due: `interval` train steps since the last, or with
  eval_every_env_steps a multiple of it crossed since the last."""
  grid = experiment.eval_every_env_steps
  if grid is None:
    return step - (last['train_step'] if last else -interval) >= interval
  env_steps = (replay.inserted_items(address, experiment.layout.experience_table) *
               experiment.layout.env_steps_per_item)
  return env_steps // grid > (last['env_steps'] // grid if last else 0)


def _evaluate_when_due(experiment: Experiment, address: str,
                       variables: replay.VariableContainer, train_step: tf.Variable,
                       evaluator: tasks_lib.TaskEvaluators,
                       confirmer: confirmations.Confirmer, log: ResultsLog, interval: int,
                       barrier: eval_barrier.EvaluatorSide, stop_event: threading.Event,
                       options: Any) -> Optional[Dict[str, Any]]:
  """Pulls the variables; evaluates if the train step advanced `interval` since the
  last evaluation (or reached the budget). Returns the new result row, or None."""
  try:
    variables.update(timeout_s=options.variables_timeout_s, stop_event=stop_event)
  except replay.VariablesNotPushedError:
    if stop_event.is_set():
      return None
    raise
  step = int(train_step.numpy())
  final = step >= experiment.num_train_steps
  if not (final or _due(experiment, address, step, log.rows[-1] if log.rows else None,
                        interval)):
    stop_event.wait(options.poll_interval_s)
    return None
  result = evaluator.run()
  target, confirmation, confirmation_seed = experiment.target, float('nan'), None
  reached = False
  if target.reached(result):
    # A candidate. Have the trainer hold still (see eval_barrier) and judge the policy
    # it holds, which is what it will export if confirmed: an evaluation, then a
    # confirmation on fresh episodes. (No trainer answering, e.g. one that finished
    # its budget: confirm the policy just evaluated.)
    barrier.request()
    paused_at = barrier.wait_until_paused(PAUSE_TIMEOUT_S, stop_event)
    if paused_at is not None:
      variables.update(timeout_s=options.variables_timeout_s, stop_event=stop_event)
      step = int(train_step.numpy())
      result = evaluator.run()
    if target.reached(result):
      confirmed = confirmer.run()  # num_confirm_episodes fresh episodes
      confirmation, confirmation_seed = confirmed['AverageReturn'], confirmer.last_seed
      reached = target.reached(confirmed)
  if not reached:
    barrier.release()
  env_steps = (replay.inserted_items(address, experiment.layout.experience_table) *
               experiment.layout.env_steps_per_item)
  row = {'train_step': step, 'env_steps': env_steps, 'return': result['AverageReturn'],
         'confirmation': confirmation, 'reached_target': reached, 'time': time.time(),
         # Replays the confirmation's episodes (e.g. to check an exported policy): see
         # Confirmer.last_seed.
         'confirmation_seed': confirmation_seed}
  tasks = ''
  if experiment.tasks is not None:  # the return is their mean
    row['task_returns'] = result['task_returns']
    tasks = ' | ' + ' | '.join(f'{name} {metrics.format_return(value)}'
                               for name, value in result['task_returns'].items())
  log.add(row)
  logs.progress('eval | train step %d | env steps %d | return %s%s', step, env_steps,
               metrics.format_return(result['AverageReturn']), tasks)
  if reached:
    logs.progress('Target return %s reached and confirmed (%s) at train step %d.',
                 target, metrics.format_return(confirmation), step)
  return row


def main(options: Any) -> None:
  """Evaluates as the parsed flags say: one exported policy, or a trainer followed.

  Args:
    options: how to follow a trainer, from the flags.
  """
  # An exported policy of a task sequence evaluates here too (on every task).
  experiment = config.parse_from_flags(one_process=bool(FLAGS.saved_model_dir))
  if FLAGS.saved_model_dir:
    try:
      evaluate_saved_model(experiment, FLAGS.saved_model_dir, FLAGS.video_dir,
                           FLAGS.record_dir, FLAGS.record_noise, FLAGS.num_episodes)
    except (FileNotFoundError, export.NotAPolicyError) as e:
      config.fail(f'--saved_model_dir: {e}')
    except video.VideoUnsupportedError as e:
      config.fail(f'--video_dir: {e}')
    except (FileExistsError, ValueError) as e:
      config.fail(f'--record_dir: {e}')
    except ImportError as e:  # the video or offline extra
      config.fail(f'--video_dir / --record_dir: {e}')
    return
  if FLAGS.record_dir:
    config.fail('--record_dir records an exported policy: give --saved_model_dir too.')
  process.run_program(
      lambda stop_event: follow(experiment, FLAGS.root_dir, FLAGS.reverb_address,
                                stop_event, options, FLAGS.video_dir),
      'evaluator')

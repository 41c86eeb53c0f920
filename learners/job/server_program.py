"""The Reverb server program's body (`learners.reverb_server` parses its flags, then
runs `main`): serves a job's tables, checkpoints them, and publishes its port."""
import os
import threading
import time
from typing import Any

from absl import flags
import tfrl  # pylint: disable=unused-import (first: TensorFlow without its start-up noise)
import tensorflow as tf

from learners.configuration import config
from learners.configuration import validation
from learners.configuration.experiment import Experiment
from learners.processes import disk_full
from learners.processes import heartbeat
from learners.processes import process
from tfrl import logs
from tfrl import metrics
from tfrl import replay
from tfrl.datasets import feeder
from tfrl.datasets import reverb_checkpoint
from tfrl.datasets import rlds

# A program's options are its flags' module's `Options` (`learners.reverb_server`),
# which this module does not import: it would define the flags a second time under
# `python -m`.
FLAGS = flags.FLAGS
REVERB_DIR = 'reverb'
PORT_FILE = 'reverb_server.port'  # read by learners/processes/launcher.py
REPLAY_SUMMARY_DIR = 'replay'


def serve(experiment: Experiment, root_dir: str, stop_event: threading.Event,
          options: Any) -> None:
  """Serves the experiment's tables until `stop_event` is set.

  It checkpoints every `options.checkpoint_interval_s` and at the end, and summarizes
  each table's size ('replay/<table>/size', x: seconds served) to root_dir/replay every
  `options.summary_interval_s`.

  Args:
    experiment: the job's settings (its tables).
    root_dir: the job's directory (checkpoints in root_dir/reverb).
    stop_event: set to stop (after a final checkpoint).
    options: see `learners.reverb_server.Options`.

  Raises:
    tfrl.replay.CheckpointMismatchError: the tables differ from the checkpoint's.
    tfrl.replay.PortInUseError: the port is taken.
  """
  port, checkpoint_interval_s = options.port, options.checkpoint_interval_s
  train_step, agent = experiment.build_agent()
  checkpoint_dir = os.path.join(root_dir, REVERB_DIR)
  plan = None
  if experiment.dataset_dir is not None:
    env = experiment.make_env(num_envs=1, collect=False)  # for its specs
    plan = feeder.plan_load(experiment.dataset_dir, experiment.layout, env)
    env.close()
  tables = experiment.tables(agent, train_step, dataset_items=plan.items if plan else 0)
  start = time.monotonic()
  # A Reverb checkpoint named as the dataset becomes this server's first checkpoint.
  seeded = (isinstance(plan, reverb_checkpoint.CheckpointPlan) and
            reverb_checkpoint.seed_checkpoint_dir(plan, tables, checkpoint_dir,
                                                  experiment.layout.dataset_table))
  server = replay.ReplayServer(tables, port=port, checkpoint_dir=checkpoint_dir)
  _publish_port(root_dir, server.port)
  info = server.table_info()
  logs.progress('Serving tables %s on port %d (sizes after restore: %s).', sorted(info),
               server.port, {name: t.current_size for name, t in info.items()})
  if seeded:
    logs.progress('%s', reverb_checkpoint.loaded_message(plan, experiment.layout,
                                                         time.monotonic() - start))
  elif (isinstance(plan, feeder.LoadPlan) and
        not info[experiment.layout.dataset_table].current_size):
    # Its table samples once it holds every item, so the trainer waits for all of it.
    start = time.monotonic()
    feeder.load_into_replay(plan, experiment.layout, server.client, agent)
    logs.progress('%s', feeder.loaded_message(plan, experiment.layout,
                                              time.monotonic() - start))
  writer = metrics.create_summary_writer(os.path.join(root_dir, REPLAY_SUMMARY_DIR))
  # Not a work activity: a server has no progress of its own to stall on, but a frozen
  # one stops beating and reads as 'not answering'.
  beat = heartbeat.Heartbeat(root_dir, 'reverb_server').start()
  beat.set_activity('serve')
  start = next_checkpoint = time.monotonic()
  next_checkpoint += checkpoint_interval_s if checkpoint_interval_s > 0 else float('inf')

  def summarize():
    with writer.as_default():
      for name, table in server.table_info().items():
        tf.summary.scalar(f'replay/{name}/size', table.current_size,
                          step=int(time.monotonic() - start))
    writer.flush()

  try:
    while not stop_event.wait(max(0.0, min(options.summary_interval_s,
                                           next_checkpoint - time.monotonic()))):
      summarize()
      if time.monotonic() >= next_checkpoint:
        next_checkpoint += checkpoint_interval_s
        logs.progress('Reverb checkpoint: %s', server.checkpoint())
  finally:
    summarize()  # the sizes at the end, also of a job shorter than one interval
    logs.progress('Stopping: final Reverb checkpoint %s', server.checkpoint())
    server.stop()
    beat.stop()


def _publish_port(root_dir: str, port: int) -> None:
  """Writes the port the server listens on to root_dir/PORT_FILE, whole or not at all
  (the launcher reads it: with --port=0 the server picks the port as it binds it)."""
  path = os.path.join(root_dir, PORT_FILE)
  with open(path + '.tmp', 'w') as f:
    f.write(str(port))
  os.replace(path + '.tmp', path)


def main(options: Any) -> None:
  """Serves the job's tables as the parsed flags say, until stopped.

  Args:
    options: how the server runs, from its flags.
  """
  try:
    validation.check_flags(FLAGS, ('port', 'summary_interval_s'))
  except validation.ValidationError as e:
    config.fail(e.message)
  experiment = config.parse_from_flags()
  stop_event = threading.Event()
  process.set_on_stop_signals(stop_event)
  try:
    serve(experiment, FLAGS.root_dir, stop_event, options)
  except (replay.CheckpointMismatchError,  # tables differ from the checkpoint's
          replay.PortInUseError) as e:
    config.fail(str(e))
  except rlds.DatasetError as e:
    config.fail(f'Experiment.dataset_dir: {e}')
  except Exception as e:  # pylint: disable=broad-except
    disk_full.exit_if_disk_full(e)
    raise
  process.ignore_stop_signals()  # stopped and saved

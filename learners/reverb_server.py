r"""The Reverb server program: experience and variables tables for one job.

    python -m learners.reverb_server --root_dir=runs/job --port=8000 \
      --gin_file=dqn_cartpole.gin

Tables come from the job's `Experiment` (the same .gin the other programs read), so
collectors, trainer and server agree on item signatures. Contents are checkpointed to
root_dir/reverb every --checkpoint_interval_s seconds and on SIGTERM/SIGINT; a restarted
server loads the latest checkpoint (falling back to the previous one, kept in
root_dir/reverb_previous, when the latest cannot be read: see tfrl.replay.fallback), and
refuses to start (status 2, naming the difference) when its tables differ from the
checkpoint's, or when --port is in use. A full disk ends it with one 'error: disk full
writing ...' line, status 6. Reverb 0.14 listens on all interfaces without
authentication (logged at start): keep it on a private network.
"""
import os
import threading
import time

from absl import app
from absl import flags
import tensorflow as tf

from learners import config
from learners import disk_full
from learners import heartbeat
from learners import process
from learners import validation
from learners.experiment import Experiment
from tfrl import logs
from tfrl import metrics
from tfrl import replay

config.define_common_flags()
flags.DEFINE_integer('port', 8000, 'Port to serve on (all interfaces).')
flags.DEFINE_float('checkpoint_interval_s', 300.0,
                   'Seconds between Reverb checkpoints (<= 0: only at shutdown).')
flags.DEFINE_float('summary_interval_s', 10.0,
                   "Seconds between the tables' size summaries (root_dir/replay).")
FLAGS = flags.FLAGS
REVERB_DIR = 'reverb'
REPLAY_SUMMARY_DIR = 'replay'


def serve(root_dir: str, port: int, checkpoint_interval_s: float,
          stop_event: threading.Event, summary_interval_s: float = 10.0) -> None:
  """Serves until `stop_event` is set, checkpointing periodically and at the end, and
  summarizing each table's size ('replay/<table>/size', x: seconds served) to
  root_dir/replay every `summary_interval_s`."""
  experiment = Experiment()
  train_step, agent = experiment.build_agent()
  checkpoint_dir = os.path.join(root_dir, REVERB_DIR)
  server = replay.ReplayServer(experiment.tables(agent, train_step), port=port,
                               checkpoint_dir=checkpoint_dir)
  info = server.table_info()
  logs.progress('Serving tables %s on port %d (sizes after restore: %s).', sorted(info),
               port, {name: t.current_size for name, t in info.items()})
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
    while not stop_event.wait(max(0.0, min(summary_interval_s,
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


def main(argv):
  del argv
  logs.quiet_absl_unless_asked()
  try:
    validation.check_flags(FLAGS, ('port', 'summary_interval_s'))
  except validation.ValidationError as e:
    config.fail(e.message)
  config.parse_from_flags()
  stop_event = threading.Event()
  process.set_on_stop_signals(stop_event)
  try:
    serve(FLAGS.root_dir, FLAGS.port, FLAGS.checkpoint_interval_s, stop_event,
          FLAGS.summary_interval_s)
  except (replay.CheckpointMismatchError,  # tables differ from the checkpoint's
          replay.PortInUseError) as e:
    config.fail(str(e))
  except Exception as e:  # pylint: disable=broad-except
    disk_full.exit_if_disk_full(e)
    raise
  process.ignore_stop_signals()  # stopped and saved
  process.exit_now(0)


def run_main():
  flags.mark_flag_as_required('root_dir')
  app.run(main)


if __name__ == '__main__':
  run_main()

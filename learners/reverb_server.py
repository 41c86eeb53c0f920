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
import dataclasses

from absl import flags

# Only what parsing the command line needs: the server (learners/job/server_program.py,
# which imports TensorFlow and Reverb) is imported in `_main`, so --help imports neither.
from learners.configuration import config
from learners.processes import program


@dataclasses.dataclass(frozen=True)
class Options:
  """How the server runs: each field is also the flag of its name, and its metadata's
  help text says what it does (see `config.option`)."""
  port: int = config.option(8000, 'Port to serve on (all interfaces).')
  checkpoint_interval_s: float = config.option(
      300.0, 'Seconds between Reverb checkpoints (<= 0: only at shutdown).')
  summary_interval_s: float = config.option(
      10.0, "Seconds between the tables' size summaries (root_dir/replay).")


config.define_common_flags()
config.define_flags(Options)
FLAGS = flags.FLAGS


def _main() -> None:
  from learners.job import server_program  # pylint: disable=g-import-not-at-top (see the imports)
  server_program.main(config.options_from_flags(Options, FLAGS))


def run_main():
  """Console-script entry point (tfrl-reverb-server)."""
  program.run_main(_main)


if __name__ == '__main__':
  run_main()

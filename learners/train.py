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
Exit statuses: see learners/processes/process.py.
"""
import dataclasses

from absl import flags

# Only what parsing the command line needs: the trainer (learners/job/trainer.py, which
# imports TensorFlow) is imported in `_main`, so --help imports no TensorFlow.
from learners.configuration import config
from learners.population import population
from learners.processes import program

# `tfrl.distribute.STRATEGIES`, repeated: importing tfrl imports TensorFlow, which
# --help must not (`distribute.get_strategy` refuses a name it does not know).
STRATEGIES = ('default', 'mirrored', 'multi_worker', 'tpu')


@dataclasses.dataclass(frozen=True)
class Options:
  """How a trainer runs: each field is also the flag of its name, and its metadata's
  help text says what it does (see `config.option`)."""
  log_interval_s: float = config.option(10.0, 'Seconds between progress lines.')
  sample_timeout_s: float = config.option(
      5.0, 'How long one sample may wait for experience before the trainer looks at its '
      'stop signal (the dataset is then rebuilt and training goes on). Not used under '
      '--strategy=multi_worker, where workers must stay in step.')
  data_timeout_s: float = config.option(
      600.0, 'Exit with an error after this long without any experience (are the '
      'collectors running?).')
  server_lost_after_s: float = config.option(
      30.0, 'The Reverb server is taken as lost after this long without an answer.')
  reconnect_timeout_s: float = config.option(
      600.0, 'How long to wait for a lost server to come back (the trainer then restarts '
      'itself from its latest checkpoint) before exiting with status EXIT_SERVER_LOST '
      '(tfrl.exit_statuses).')
  overwrite: bool = config.shared_option('overwrite')  # see `tfrl.run_dir.claim`


config.define_common_flags()
config.define_reverb_address_flag()
flags.DEFINE_enum('strategy', 'default', list(STRATEGIES),
                  'default | mirrored (local GPUs) | multi_worker (TF_CONFIG) | tpu.')
flags.DEFINE_string('tpu', None, 'TPU name or address, for --strategy=tpu.')
config.define_flags(Options)
population.define_member_flags()  # a population's member (learners/job/trainer_member.py)
FLAGS = flags.FLAGS


def _main() -> None:
  from learners.job import trainer  # pylint: disable=g-import-not-at-top (see the imports)
  trainer.main(config.options_from_flags(Options, FLAGS))


def run_main():
  """Console-script entry point (tfrl-train)."""
  program.run_main(_main)


if __name__ == '__main__':
  run_main()

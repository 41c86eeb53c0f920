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
--stall_timeout_s (learners/processes/heartbeat.py); 2 for bad flags or settings, before
anything starts. Children also get SIGTERM if the launcher itself is killed, so none are
orphaned. The programs reach each other on loopback addresses; the Reverb server listens
on every interface (docs/trust-model.md).

With --pbt_dir and --member the job is a member of a population (`tfrl-pbt
--member_program=launch`): the trainer reports at the ready points
(learners/job/trainer_member.py) and the launcher writes the member's result at the end.

This module is the command line; the job it runs is in learners/job/launched_job.py, the
`Launcher` that drives it (also the notebooks' API) in learners/processes/launcher.py,
its status line in learners/processes/job_status.py.
"""
import dataclasses

from absl import flags

# Only what parsing the command line needs: the job (learners/job/launched_job.py, which
# imports TensorFlow) is imported in `_main`, so --help imports no TensorFlow.
from learners.configuration import config
from learners.population import population
from learners.processes import program
from learners.processes import stop_plan


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
population.define_member_flags()
FLAGS = flags.FLAGS


def _main() -> None:
  from learners.job import launched_job  # pylint: disable=g-import-not-at-top (see the imports)
  launched_job.main(config.options_from_flags(Options, FLAGS))


def run_main():
  """Console-script entry point (tfrl-launch)."""
  program.run_main(_main)


if __name__ == '__main__':
  run_main()

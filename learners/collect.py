r"""The collect program: a batched actor writing experience into a Reverb server.

    python -m learners.collect --root_dir=runs/job --reverb_address=host:8000 \
      --gin_file=dqn_cartpole.gin --task_id=0

It pulls the newest policy variables (and train step, which tags each item as its
policy version) from the server's variables table before every unroll of the sequence
layouts and every 50 vector steps of the replay layouts (--variable_update_period
overrides both). It waits for the trainer's first push (logging that it does, up to
--variables_timeout_s) rather than act with untrained weights. It warms up as the layout
says (`Layout.warm_up`): task 0 of a replay layout collects
Experiment.initial_collect_steps random env steps first, while the trainer starts; each
collector of a sequence layout acts one step after the push, which aligns its unrolls
with its pulls. A collector of an on-policy agent (PPO) starts each unroll only once
the trainer has pushed the version that will train on it (learners/job/pacing.py). If the
server goes away it logs, retries with backoff for up to --reconnect_timeout_s, and
carries on when it returns; any other error (from the environment or the policy) ends
it with that error and a non-zero status. SIGTERM/SIGINT stop it cleanly, also while a rate limiter holds its
writes (what is still unsent after 5 s is dropped and logged).
"""
import dataclasses
from typing import Optional

from absl import flags

# Only what parsing the command line needs: the collector (learners/job/collector.py, which
# imports TensorFlow) is imported in `_main`, so --help imports no TensorFlow.
from learners.configuration import config
from learners.processes import program


@dataclasses.dataclass(frozen=True)
class Options:
  """How a collector runs: each field is also the flag of its name, and its metadata's
  help text says what it does (see `config.option`)."""
  task_id: int = config.option(
      0, "This collector's index: seeds its envs (a seed stream per task_id) and sets its "
      'exploration (see --num_collectors).')
  num_collectors: int = config.option(
      1, 'How many collectors the job runs; with DQN, collector i explores with '
      'epsilon_end ** (1 + i / (num_collectors - 1)) (Ape-X style spread).')
  num_envs: Optional[int] = config.option(
      None, 'Envs in this collector (default: Experiment.num_envs); a multiple of the '
      'envs per item.')
  variable_update_period: Optional[int] = config.option(
      None, 'Vector steps between pulls of the policy variables (default: before every '
      'unroll of a sequence layout, every 50 vector steps of a replay layout).')
  variables_timeout_s: float = config.option(
      600.0, 'How long to wait for the trainer to push variables.')
  write_timeout_s: float = config.option(
      600.0, 'How long a write may wait for the server to take items (a server that is '
      'gone, or a rate limiter holding inserts) before the collector treats the server '
      'as lost and reconnects (at least 10 s).')
  reconnect_timeout_s: float = config.option(
      600.0, 'How long to keep retrying an unreachable server before giving up.')
  max_env_steps: int = config.option(
      0, 'Stop after this many env steps (0: never).')
  log_interval_s: float = config.option(10.0, 'Seconds between progress lines.')


config.define_common_flags()
config.define_reverb_address_flag()
config.define_flags(Options)
FLAGS = flags.FLAGS


def _main() -> None:
  from learners.job import collector  # pylint: disable=g-import-not-at-top (see the imports)
  collector.main(config.options_from_flags(Options, FLAGS))


def run_main():
  """Console-script entry point (tfrl-collect)."""
  program.run_main(_main, root_dir_required=False)


if __name__ == '__main__':
  run_main()

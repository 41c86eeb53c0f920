r"""The eval program: follows a trainer and plays greedy episodes every K train steps.

    python -m learners.eval --root_dir=runs/job --reverb_address=host:8000 \
      --gin_file=dqn_cartpole.gin
    python -m learners.eval --root_dir=runs/job --gin_file=dqn_cartpole.gin \
      --saved_model_dir=runs/job/policies/greedy_policy      # one exported policy, once

Following a trainer, it pulls the policy variables from the server's variables table and
evaluates whenever the train step has advanced --eval_interval (default
Experiment.eval_interval) since the last evaluation. Each evaluation is appended to
root_dir/eval/results.csv and results.json as (train_step, env_steps, return) and written
as TensorBoard summaries to root_dir/eval. It exits 0 once the train step budget is
evaluated, or once Experiment.target_return is reached and confirmed by a second
evaluation (what `launch` stops on). Before it confirms a candidate it has the trainer
hold still, and judges the policy held there (see learners/job/eval_barrier.py), so a job
that ends on its target exports exactly the confirmed policy.
"""
import dataclasses
from typing import Optional

from absl import flags

# Only what parsing the command line needs: the evaluator (learners/job/evaluator.py, which
# imports TensorFlow) is imported in `_main`, so --help imports no TensorFlow.
from learners.configuration import config
from learners.processes import program


@dataclasses.dataclass(frozen=True)
class Options:
  """How an evaluator follows a trainer: each field is also the flag of its name, and its
  metadata's help text says what it does (see `config.option`)."""
  eval_interval: Optional[int] = config.option(
      None, 'Train steps between evaluations (default: Experiment.eval_interval).')
  poll_interval_s: float = config.option(1.0, 'Seconds between looks at the train step.')
  variables_timeout_s: float = config.option(
      600.0, "How long to wait for the trainer's variables before giving up.")
  reconnect_timeout_s: float = config.option(
      600.0, 'How long to wait for a lost Reverb server to come back before giving up '
      '(exit status EXIT_SERVER_LOST of tfrl.exit_statuses).')


config.define_common_flags()
config.define_reverb_address_flag()
flags.DEFINE_string('saved_model_dir', None,
                    'Evaluate this exported policy once instead of following a trainer.')
flags.DEFINE_string('video_dir', None,
                    "Record every evaluation episode as an MP4 here (needs tfrl's 'video' "
                    "extra and an env that renders 'rgb_array' frames).")
flags.DEFINE_string('record_dir', None,
                    'With --saved_model_dir: also record the evaluated episodes as an RLDS '
                    "dataset in this new directory (tfrl.datasets; needs tfrl's 'offline' "
                    'extra), e.g. for Experiment.dataset_dir. --num_episodes sets how many.')
flags.DEFINE_float('record_noise', 0.0,
                   'With --record_dir: the recorded policy explores: epsilon for discrete '
                   'actions, Gaussian noise (x the half range) for continuous ones.')
flags.DEFINE_integer('num_episodes', None,
                     'With --saved_model_dir: episodes to play (default: '
                     'Experiment.num_eval_episodes).')
config.define_flags(Options)
FLAGS = flags.FLAGS


def _main() -> None:
  from learners.job import evaluator  # pylint: disable=g-import-not-at-top (see the imports)
  evaluator.main(config.options_from_flags(Options, FLAGS))


def run_main():
  """Console-script entry point (tfrl-eval)."""
  program.run_main(_main)


if __name__ == '__main__':
  run_main()

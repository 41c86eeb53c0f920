"""One member of a population (`learners.pbt`): a one-process job that stops at each
ready point to report and to apply the population's decision.

The member is `train_eval` with a `PopulationMember` callback: at the first evaluation at
or past each multiple of `--ready_interval` env steps it reports that evaluation and
applies the decision (`learners.population.ready_points`, which a launched member's
trainer shares).

Run by the population runner, or alone for a look:

    python -m learners.pbt_member --root_dir=/tmp/pbt/member_0 --pbt_dir=/tmp/pbt/pbt \
        --member=0 --ready_interval=20000 --gin_file=ppo_lunarlander.gin
"""
from typing import Any, Dict, Optional

from absl import flags

from learners import train_eval
from learners.configuration import config
from learners.job import callbacks as callbacks_lib
from learners.population import population
from learners.population import ready_points
from learners.processes import program
from tfrl.agents import hyperparameters as hyperparameters_lib

# Where the tests and notebooks have imported it from.
copy_agent = ready_points.copy_agent


class PopulationMember(callbacks_lib.Callback):
  """Reports at ready points and applies the population's decisions (module doc)."""

  def __init__(self, pbt_dir: str, member: int, ready_interval: int,
               decision_timeout_s: float = 3600.0):
    """Args: see `ready_points.ReadyPoints`.

    Raises:
      ValueError: ready_interval < 1.
    """
    self.points = ready_points.ReadyPoints(pbt_dir, member, ready_interval,
                                           decision_timeout_s)

  def on_train_start(self, context: callbacks_lib.JobContext) -> None:
    super().on_train_start(context)
    self.points.start(context.agent, context.learner, context.env_steps(),
                      context.stop_event)

  def on_evaluation(self, row: callbacks_lib.Row) -> Optional[bool]:
    if self.points.due(row['env_steps']):
      self.points.report(row['env_steps'], row['train_step'], row['eval_return'])
    return None

  def on_train_end(self, result: Dict[str, Any]) -> None:
    """The job's end, for the runner: `member_<i>/result.json`."""
    self.points.write_result(result)


population.define_member_flags()
FLAGS = flags.FLAGS


def _main() -> None:
  try:
    train_eval.main([PopulationMember(FLAGS.pbt_dir, FLAGS.member, FLAGS.ready_interval,
                                      FLAGS.decision_timeout_s)])
  except hyperparameters_lib.NotTunable as e:
    # Bad configuration (exit status 2): the runner ends the population rather than
    # restart a member that would fail the same way.
    config.fail(str(e))


def run_main():
  """Entry point: `train_eval` with the member's callback."""
  for name in ('pbt_dir', 'member'):
    flags.mark_flag_as_required(name)
  program.run_main(_main, extra_arguments_ok=False)


if __name__ == '__main__':
  run_main()

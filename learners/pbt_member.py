"""One member of a population (`learners.pbt`): a one-process job that stops at each
ready point to report and to apply the population's decision.

The member is `train_eval` with a `PopulationMember` callback. At the first evaluation
at or past each multiple of `--ready_interval` env steps it writes a checkpoint, reports
(`member_<i>/report_<k>.json` in the population's directory: env steps, train step, the
evaluation's return, the checkpoint, its hyperparameters) and waits for
`decision_<k>.json`: carry on, or take another member's checkpoint (weights, optimizer
state, normalizer statistics; its own train step and env steps stay) and the
hyperparameters given, which the train step reads from variables from the next step on
(`tfrl.agents.hyperparameters`). It checkpoints again after a copy, so a member killed
then resumes as the decision left it. A fresh member (train step 0) starts from
`member_<i>/start.json`'s hyperparameters; a resumed one from its checkpoint's, then
takes a `replacement_<n>.json` it has not applied (the runner's copy of a top member
after this member failed with an error).

Run by the population runner, or alone for a look:

    python -m learners.pbt_member --root_dir=/tmp/pbt/member_0 --pbt_dir=/tmp/pbt/pbt \
        --member=0 --ready_interval=20000 --gin_file=ppo_lunarlander.gin
"""
import os
import time
from typing import Any, Dict, Optional

from absl import flags
import tensorflow as tf

from learners import callbacks as callbacks_lib
from learners import population
from learners import program
from learners import train_eval
from tfrl import logs
from tfrl.agents import hyperparameters as hyperparameters_lib

_POLL_S = 0.2


def copy_agent(agent: tf.Module, train_step: tf.Variable, prefix: str) -> None:
  """Exploit: takes the agent (weights, optimizer state, normalizer statistics) of the
  checkpoint at `prefix`, another member's, keeping this job's train step.

  Raises:
    AssertionError: the checkpoint holds a different agent (another config).
  """
  own_step = int(train_step.numpy())
  status = tf.train.Checkpoint(agent=agent).restore(prefix)
  status.assert_existing_objects_matched().expect_partial()
  train_step.assign(own_step)  # the agent's counter is this job's, not the source's


class PopulationMember(callbacks_lib.Callback):
  """Reports at ready points and applies the population's decisions (module doc)."""

  def __init__(self, pbt_dir: str, member: int, ready_interval: int,
               decision_timeout_s: float = 3600.0):
    """Args:
      pbt_dir: the population's directory (`learners.pbt`).
      member: this member's index.
      ready_interval: env steps between ready points.
      decision_timeout_s: how long to wait for a decision before failing.

    Raises:
      ValueError: ready_interval < 1.
    """
    if ready_interval < 1:
      raise ValueError(f'ready_interval must be >= 1 env step, got {ready_interval}')
    self.directory = population.member_dir(pbt_dir, member)
    self.member, self.ready_interval = member, ready_interval
    self.decision_timeout_s = decision_timeout_s
    self.hyperparameters: Optional[hyperparameters_lib.Hyperparameters] = None
    self.next_round: Optional[int] = None

  def on_train_start(self, context: callbacks_lib.JobContext) -> None:
    super().on_train_start(context)
    self.hyperparameters = hyperparameters_lib.of(context.agent)
    if self.hyperparameters is None:
      raise ValueError(f'{type(context.agent).__name__} has no hyperparameters a '
                       'population can change (see tfrl.agents.hyperparameters)')
    start = population.read_json(os.path.join(self.directory, 'start.json'))
    if context.learner.train_step_numpy == 0 and start is not None:
      self.hyperparameters.assign(start['hyperparameters'])
    # Ready point k: the first evaluation at or past k * ready_interval env steps, in
    # order (a member that falls behind reports one round per evaluation, never skips
    # one: the runner waits for each). A resumed member goes on after its last report,
    # first taking that round's decision if it was killed before it had.
    last = population.last_round(self.directory, 'report')
    if last > self._applied().get('round', 0):
      self._decide(last, context.env_steps())
    # A member restarted after an error takes the copy the runner chose for it.
    replacement = population.last_round(self.directory, 'replacement')
    if replacement > self._applied().get('replacement', 0):
      self._apply(population.read_json(os.path.join(
          self.directory, f'replacement_{replacement}.json')), context.env_steps(),
                  {'replacement': replacement})
    self.next_round = last + 1
    logs.progress('Population member %d: hyperparameters %s; next ready point at %d env '
                  'steps.', self.member, _format(self.hyperparameters.values()),
                  self.next_round * self.ready_interval)

  def on_evaluation(self, row: callbacks_lib.Row) -> Optional[bool]:
    if row['env_steps'] < self.next_round * self.ready_interval:
      return None
    round_ = self.next_round
    checkpoint = self.context.learner.save_checkpoint()
    population.write_json(os.path.join(self.directory, f'report_{round_}.json'), {
        'round': round_, 'env_steps': int(row['env_steps']),
        'train_step': int(row['train_step']), 'score': float(row['eval_return']),
        'checkpoint': checkpoint, 'hyperparameters': self.hyperparameters.values()})
    self._decide(round_, int(row['env_steps']))
    self.next_round += 1
    return None

  def _applied(self) -> Dict[str, int]:
    """The last round's decision and the last replacement this member applied."""
    return population.read_json(os.path.join(self.directory, 'applied.json')) or {}

  def _decide(self, round_: int, env_steps: int) -> None:
    """Waits for round `round_`'s decision and applies it (`_apply`)."""
    decision = self._wait_for(os.path.join(self.directory, f'decision_{round_}.json'))
    if decision is None:  # told to stop while waiting: the job saves and ends
      return
    self._apply(decision, env_steps, {'round': round_})

  def _apply(self, decision: Dict[str, Any], env_steps: int, done: Dict[str, int]) -> None:
    """Takes a decision ('exploit': the source's checkpoint, when it names one, and the
    hyperparameters given), checkpoints, and notes it applied (`applied.json` updated
    with `done`), so a member killed after this does not apply it twice."""
    learner = self.context.learner
    if decision['action'] == 'exploit':
      if decision['checkpoint'] is not None:
        try:
          copy_agent(self.context.agent, learner.train_step, decision['checkpoint'])
        except tf.errors.NotFoundError:  # pruned since (a member resumed late): keep own
          logs.progress('Population member %d: member %d\'s checkpoint %s is gone; '
                        'keeping its own weights.', self.member, decision['source'],
                        decision['checkpoint'])
      self.hyperparameters.assign(decision['hyperparameters'])
      learner.save_checkpoint()
      logs.progress('Population member %d took %s at %d env steps; hyperparameters now %s.',
                    self.member, 'fresh hyperparameters' if decision['source'] is None
                    else f'member {decision["source"]}\'s weights', env_steps,
                    _format(self.hyperparameters.values()))
    population.write_json(os.path.join(self.directory, 'applied.json'),
                          {**self._applied(), **done})

  def on_train_end(self, result: Dict[str, Any]) -> None:
    """The job's end, for the runner: `member_<i>/result.json`."""
    population.write_json(os.path.join(self.directory, 'result.json'), {
        key: result[key] for key in ('train_step', 'env_steps', 'eval_return',
                                     'reached_target', 'greedy_policy_dir')})

  def _wait_for(self, path: str) -> Optional[Dict[str, Any]]:
    """The decision at `path`; None if the job is told to stop first.

    Raises:
      TimeoutError: none came within decision_timeout_s (the runner is gone).
    """
    deadline = time.monotonic() + self.decision_timeout_s
    stop_event = self.context.stop_event
    while time.monotonic() < deadline:
      decision = population.read_json(path)
      if decision is not None:
        return decision
      if stop_event is not None and stop_event.wait(_POLL_S):
        return None
      if stop_event is None:
        time.sleep(_POLL_S)
    raise TimeoutError(f'population member {self.member} waited {self.decision_timeout_s:.0f}'
                       f' s for its decision {path}: is the population runner running?')


def _format(values: Dict[str, Any]) -> str:
  return ', '.join(f'{name} {value:.4g}' for name, value in values.items())


flags.DEFINE_string('pbt_dir', None, "The population's directory.")
flags.DEFINE_integer('member', None, "This member's index.")
population.define_ready_interval_flag()
flags.DEFINE_float('decision_timeout_s', 3600.0, 'Seconds to wait for a decision.')
FLAGS = flags.FLAGS


def run_main():
  """Entry point: `train_eval` with the member's callback."""
  for name in ('pbt_dir', 'member'):
    flags.mark_flag_as_required(name)
  program.run_main(lambda: train_eval.main([PopulationMember(
      FLAGS.pbt_dir, FLAGS.member, FLAGS.ready_interval, FLAGS.decision_timeout_s)]),
                   extra_arguments_ok=False)


if __name__ == '__main__':
  run_main()

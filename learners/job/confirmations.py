"""The confirmation that ends a job at its target, in one process and in the launched
evaluator alike.

An evaluation at the target makes the policy a candidate; the job ends only if the
candidate's mean return over `Experiment.num_confirm_episodes` (100, as gymnasium's
thresholds are defined) fresh episodes reaches it too. Evaluations of 10 episodes decide
when to look, not whether the task is solved: a policy at 475 on 10 CartPole episodes
has played a mean of 442 over 100. The episodes come from the confirmation seed stream
(`Experiment.confirm_seed`), which no evaluation draws from, and each confirmation's
are fresh (`tfrl.actors.Evaluator`).
"""
import threading
from typing import Any, Dict, Optional

from learners.configuration import tasks as tasks_lib


class Confirmer:
  """Runs confirmations of a policy; builds its envs at the first, so a job that never
  reaches its target neither makes them nor traces its policy for them."""

  def __init__(self, experiment: Any, policy: Any,
               stop_event: Optional[threading.Event] = None):
    """Args:
      experiment: the job's `learners.configuration.experiment.Experiment`.
      policy: the greedy policy the job evaluates (its variables are read at each run).
      stop_event: once set, a confirmation under way ends (`tfrl.actors.EvaluationStopped`).
    """
    self._experiment, self._policy, self._stop_event = experiment, policy, stop_event
    self._evaluators: Optional[tasks_lib.TaskEvaluators] = None

  def run(self) -> Dict[str, Any]:
    """One confirmation: `TaskEvaluators.run`'s result over num_confirm_episodes per task.

    Raises:
      tfrl.actors.EvaluationStopped: the stop event was set during it.
    """
    if self._evaluators is None:
      self._evaluators = self._experiment.make_evaluator(
          self._policy, stop_event=self._stop_event, confirm=True)
    return self._evaluators.run()

  @property
  def last_seed(self) -> Optional[int]:
    """The seed that replays the last confirmation's episodes: an `Evaluator` of
    num_confirm_episodes on `Experiment.make_eval_env(num_episodes=num_confirm_episodes,
    seed=it)` with seed=it."""
    return None if self._evaluators is None else self._evaluators.last_seed

  def close(self) -> None:
    if self._evaluators is not None:
      self._evaluators.close()

"""ALF's hybrid schedule: when a hybrid job's train steps take online rows.

ALF's trainer (the seed's `rl_train_after_update_steps` and
`rl_train_every_update_steps`) trains on the offline buffer at every update, starts
unrolling the env and training on fresh experience only after so many updates, and
then trains on fresh experience every N updates. In tfrl a hybrid job's batch is a set
share of dataset rows and online ones (`TransitionReplay.dataset_fraction`); the
schedule says which train steps take such a mixed batch. The others take a whole batch
of dataset rows, from an iterator of their own, and until `dataset_only_steps` the job
collects nothing (one process; separate collectors wait at the replay table's rate
limiter, which no one samples yet).

The schedule is read in Python from the train step before each compiled call
(`run`), so a resumed job picks it up where it stopped.
"""
import dataclasses
from typing import Any, List, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class HybridSchedule:
  """Which train steps mix online rows into their batch.

  Attributes:
    dataset_only_steps: ALF's rl_train_after_update_steps: train steps 0 to this - 1
      take dataset rows only, and a one-process job collects from this step on.
    online_every: ALF's rl_train_every_update_steps: from then on, one step in this
      many mixes online rows (the first of each group); the rest take dataset rows only.

  Raises:
    ValueError: a negative dataset_only_steps or an online_every below 1.
  """
  dataset_only_steps: int = 0
  online_every: int = 1

  def __post_init__(self):
    if self.dataset_only_steps < 0 or self.online_every < 1:
      raise ValueError(f'A hybrid schedule needs dataset_only_steps >= 0 and online_every '
                       f'>= 1, got {self.dataset_only_steps} and {self.online_every}.')

  @property
  def active(self) -> bool:
    """Whether some steps take dataset rows only (else every step mixes)."""
    return self.dataset_only_steps > 0 or self.online_every > 1

  def mixes_online(self, step: int) -> bool:
    """Whether train step `step` (the step count before it runs) takes online rows."""
    after = step - self.dataset_only_steps
    return after >= 0 and after % self.online_every == 0

  def collects(self, step: int) -> bool:
    """Whether a one-process job collects before train step `step`."""
    return step >= self.dataset_only_steps

  def segments(self, start: int, steps: int) -> List[Tuple[bool, int]]:
    """Train steps start .. start + steps - 1 as runs of (mixes online, how many)."""
    runs: List[Tuple[bool, int]] = []
    for step in range(start, start + steps):
      mixes = self.mixes_online(step)
      if runs and runs[-1][0] == mixes:
        runs[-1] = (mixes, runs[-1][1] + 1)
      else:
        runs.append((mixes, 1))
    return runs

  def run(self, learner: Any, iterations: int, dataset_only_iterator: Optional[Any]) -> Any:
    """Runs `iterations` train steps of `learner` (a `tfrl.learner.Learner`), each run
    of mixed steps on its own iterator and each run of the others on
    `dataset_only_iterator`; returns the last call's loss info."""
    if not self.active:
      return learner.run(iterations=iterations)
    loss_info = None
    for mixes, count in self.segments(learner.train_step_numpy, iterations):
      loss_info = learner.run(iterations=count,
                              iterator=None if mixes else dataset_only_iterator)
    return loss_info

"""Continual-learning transfer on a task sequence: the accuracy matrix, backward and
forward transfer.

The definitions are those of Lopez-Paz & Ranzato 2017 ("Gradient Episodic Memory for
Continual Learning", GEM), with returns in place of test accuracies: R[i][j] is task j's
return at the end of phase i; backward transfer (BWT) is how much the phases after a
task's own moved its return (negative: forgetting), forward transfer (FWT) how much
the phases before a task raised its return above the start's before it was trained at
all. Díaz-Rodríguez et al. 2018 ("Don't forget, there is more than forgetting") build
on the same matrix and average over every pair of phases rather than one row; GEM's
form is the one here, BWT on the last row, so that it reads beside the forgetting
figure (a task's best return less its final one).

Everything is computed from a job's evaluations and the sequence's switches alone, the
two things a run's tasks.json holds, so that a run recorded before these figures
existed gives them too (benchmarks/task_sequence.py, benchmarks/results_pages.py).
"""
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np


def phase_of(env_steps: int, starts: Sequence[int]) -> int:
  """The phase an evaluation after `env_steps` env steps closes: the one that trained
  its last env step. An evaluation exactly at a switch has seen nothing of the next
  phase, so it is the end of the one before; one past the sequence's end belongs to the
  last phase (whose task goes on).

  Args:
    env_steps: the evaluation's env steps.
    starts: each phase's first env step, in order, the first 0.

  Returns:
    The phase's index (0 for an evaluation at 0 env steps).
  """
  return max(int(np.searchsorted(starts, env_steps, side='left')) - 1, 0)


def _mean(terms: Sequence[float]) -> float:
  """The mean of the terms that are not NaN; NaN when none is."""
  present = [term for term in terms if not np.isnan(term)]
  return float(np.mean(present)) if present else float('nan')


def transfer_report(history: Sequence[Mapping[str, Any]],
                    switches: Sequence[Tuple[int, str]]) -> Dict[str, Any]:
  """The accuracy matrix of a task sequence's run, and its backward and forward transfer.

  The matrix has one row per phase of the sequence (a task trained once per cycle has a
  phase per cycle) and one column per task, the tasks in the order they are first
  trained. Row i is every task's return at the last evaluation that closes phase i
  (`phase_of`): the last at or before the env step where phase i ends and past the one
  where it starts; for the last phase, the run's last evaluation. A row is NaN where no
  evaluation closes its phase (a phase the run did not reach, or too short to hold an
  evaluation). The baseline b[j] is task j's return at the run's first evaluation: the
  untrained agent's where the job evaluates at 0 env steps, else the nearest to the
  start there is.

  With f(j) the first phase that trains task j and L the phase of the run's last
  evaluation (the sequence's last, T - 1, for a run that went through it):

    BWT = mean over the tasks j with f(j) < L, other than phase L's task, of
          R[L][j] - R[f(j)][j]
    FWT = mean over the tasks j with f(j) > 0 whose phase f(j) - 1 the run finished
          (its last evaluation at or past phase f(j)'s start), of R[f(j) - 1][j] - b[j]

  With one cycle (every task one phase, j = f(j)) and a run through the sequence these
  are GEM's: BWT the mean over j < T - 1 of R[T-1][j] - R[j][j], FWT the mean over
  j > 0 of R[j-1][j] - b[j]. With several cycles BWT measures each task from the end of
  its first phase, so re-training it counts as backward transfer. A run stopped early
  has them so far: BWT at its last evaluation, FWT over the tasks it reached. A term
  whose entries are NaN is left out; with no term left, the figure is NaN (a run still
  in its first phase has neither).

  Args:
    history: evaluations in env-step order, each with 'env_steps' and 'task_returns'
      (task name -> average return).
    switches: (env step, task name) of each phase's start, in order, the first at 0: a
      `TaskSequence`'s, or the 'switches' of a run's tasks.json.

  Returns:
    'phases': the task trained in each phase (the matrix's rows); 'accuracy_matrix':
    the rows, each a list of the tasks' returns (floats, NaN where missing);
    'baseline_returns': b, in the columns' order; 'backward_transfer' and
    'forward_transfer': BWT and FWT (floats, possibly NaN).

  Raises:
    ValueError: an empty history, or no switches.
  """
  if not history or not switches:
    raise ValueError('Transfer needs at least one evaluation and one phase.')
  starts = [int(step) for step, _ in switches]
  phases = [name for _, name in switches]
  names = list(dict.fromkeys(phases))
  first_phase = {name: phases.index(name) for name in names}
  matrix = np.full((len(phases), len(names)), np.nan)
  for row in history:  # in order, so each phase's row ends as its last evaluation's
    matrix[phase_of(row['env_steps'], starts)] = [row['task_returns'][n] for n in names]
  baseline = [float(history[0]['task_returns'][n]) for n in names]
  last_step = history[-1]['env_steps']
  last = phase_of(last_step, starts)
  backward = [matrix[last, j] - matrix[first_phase[n], j] for j, n in enumerate(names)
              if first_phase[n] < last and n != phases[last]]
  forward = [matrix[first_phase[n] - 1, j] - baseline[j] for j, n in enumerate(names)
             if first_phase[n] > 0 and last_step >= starts[first_phase[n]]]
  rows: List[List[float]] = [[float(value) for value in row] for row in matrix]
  return {'phases': phases, 'accuracy_matrix': rows, 'baseline_returns': baseline,
          'backward_transfer': _mean(backward), 'forward_transfer': _mean(forward)}

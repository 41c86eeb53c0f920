"""An RLDS dataset as the arrays d3rlpy's `MDPDataset` takes (for the offline peer).

d3rlpy (in its own venv, benchmarks/peers/d3rlpy_requirements.txt) reads flat step
arrays: `observations`, `actions`, `rewards` (what followed each action), and per step a
`terminals` or `timeouts` flag on the step that ends an episode. It makes transitions
within an episode: from each step to the next, and from a terminal step to a zero
observation with no bootstrap. A timeout step has no next step, so d3rlpy makes no
transition from it.

RLDS (tfrl's `tfrl.datasets.rlds`) ends each episode with a step that holds only the
final observation (zero action and reward). So the conversion, exact for both kinds of
ending:

  * a terminated episode: its final-observation step is dropped and its last action's
    step is marked `terminals` (d3rlpy never reads the observation after a terminal);
  * a truncated one: the final-observation step stays, marked `timeouts`, so the last
    real transition still bootstraps from the observation it reached.

Either way d3rlpy makes exactly the dataset's `num_transitions` transitions, each the one
tfrl's replay makes of the same steps (with n_step 1).

    .venv/bin/python benchmarks/d3rlpy_data.py --dataset_dir=DATA --out=DATA.npz
"""
import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags
import numpy as np

flags.DEFINE_string('dataset_dir', None, 'The RLDS dataset to convert.')
flags.DEFINE_string('out', None, 'The .npz file to write.')
FLAGS = flags.FLAGS


def d3rlpy_arrays(arrays) -> dict:
  """d3rlpy's step arrays for a dataset.

  Args:
    arrays: a `tfrl.datasets.rlds.EpisodeArrays` (what `rlds.read` returns).

  Returns:
    {'observations', 'actions', 'rewards', 'terminals', 'timeouts'}: float32 arrays
    (int64 actions for a discrete action space), one row per kept step.

  Raises:
    ValueError: observations or actions that are nests (a Dict observation): d3rlpy's
      MDPDataset takes one array each.
  """
  if isinstance(arrays.observation, dict) or isinstance(arrays.action, dict):
    raise ValueError('d3rlpy_arrays converts array observations and actions only, not '
                     f'dicts ({arrays.specs}).')
  ends_terminal = arrays.is_last & arrays.is_terminal
  terminals = np.zeros(arrays.num_steps, np.float32)
  terminals[np.flatnonzero(ends_terminal) - 1] = 1.0
  keep = ~ends_terminal
  action = np.asarray(arrays.action)
  discrete = np.issubdtype(action.dtype, np.integer)
  return {
      'observations': np.asarray(arrays.observation, np.float32)[keep],
      'actions': action[keep].astype(np.int64 if discrete else np.float32),
      'rewards': np.asarray(arrays.reward, np.float32)[keep],
      'terminals': terminals[keep],
      'timeouts': (arrays.is_last & ~arrays.is_terminal).astype(np.float32)[keep],
  }


def main(argv):
  del argv
  from tfrl.datasets import rlds  # pylint: disable=g-import-not-at-top
  arrays = rlds.read(FLAGS.dataset_dir)
  converted = d3rlpy_arrays(arrays)
  np.savez(FLAGS.out, **converted)
  print(f'{FLAGS.out}: {arrays.num_episodes} episodes, {arrays.num_transitions} '
        f'transitions ({int(converted["terminals"].sum())} terminated episodes, '
        f'{int(converted["timeouts"].sum())} truncated), mean return '
        f'{float(np.mean(arrays.episode_returns())):.1f}.')


if __name__ == '__main__':
  flags.mark_flags_as_required(['dataset_dir', 'out'])
  app.run(main)

"""Feeds a dataset's episodes through a replay writer, as a vector env's collector would.

The writers (`tfrl.replay.NStepTransitionWriter`, ...) turn a stream of batched steps
into items: n-step folding, the truncation bootstrap, boundary rows. A dataset enters
replay through the same writer, so an offline row is built by exactly the code that
builds an online one. Episodes are dealt to `num_slots` slots (the writer's "envs"),
longest first to the slot with the fewest steps, and each slot plays its episodes back
to back: at an episode's end the slot's next step is a LAST -> FIRST boundary row, as
after gymnasium's autoreset. A slot that runs out of episodes repeats its final (LAST)
step, so its padding rows start at LAST and are masked like every boundary row.
"""
import dataclasses
import heapq
from typing import Any, Callable, List, Optional

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import policy_step as policy_step_lib

from tfrl.datasets import dataset_table
from tfrl.datasets import formats
from tfrl.datasets import reverb_checkpoint
from tfrl.datasets import rlds

# The policy version tagged on dataset rows (random warm-up rows carry -1 too).
DATASET_POLICY_VERSION = -1


def slot_streams(arrays: rlds.EpisodeArrays, num_slots: int) -> List[np.ndarray]:
  """Each slot's step indices: whole episodes, balanced by steps (longest first)."""
  starts = arrays.episode_starts()
  ends = np.append(starts[1:], arrays.num_steps)
  order = np.argsort(-(ends - starts), kind='stable')
  slots = [(0, slot, []) for slot in range(num_slots)]  # (steps, slot, episodes)
  heapq.heapify(slots)
  for episode in order:
    steps, slot, episodes = heapq.heappop(slots)
    episodes.append(episode)
    heapq.heappush(slots, (steps + ends[episode] - starts[episode], slot, episodes))
  streams = [None] * num_slots
  for _, slot, episodes in slots:
    episodes.sort()  # the dataset's order within a slot
    streams[slot] = (np.concatenate([np.arange(starts[e], ends[e]) for e in episodes])
                     if episodes else np.zeros(0, np.int64))
  return streams


def padded_indices(arrays: rlds.EpisodeArrays, num_slots: int, flush_steps: int = 0
                   ) -> np.ndarray:
  """[L, num_slots] step indices: each slot's stream (`slot_streams`), then its final
  (LAST) step repeated, to the longest stream's length plus `flush_steps`.

  Raises:
    rlds.DatasetError: fewer episodes than slots.
  """
  if arrays.num_episodes < num_slots:
    raise rlds.DatasetError(
        f'The dataset has {arrays.num_episodes} episodes, fewer than the {num_slots} envs '
        f'it is written as: use Experiment.num_envs <= {arrays.num_episodes}.')
  streams = slot_streams(arrays, num_slots)
  length = max(len(s) for s in streams) + flush_steps
  return np.stack([np.concatenate([s, np.full(length - len(s), s[-1])]) for s in streams],
                  axis=1)


def feed(arrays: rlds.EpisodeArrays, writer: Any, indices: np.ndarray,
         policy_info_spec: Any = (),
         on_progress: Optional[Callable[[int, int], None]] = None) -> int:
  """Writes every transition of `arrays` through `writer`, slot by slot.

  Args:
    arrays: the dataset (`rlds.read`).
    writer: a batched writer for as many envs as `indices` has slots.
    indices: `padded_indices(arrays, num_slots, flush_steps)`; flush_steps is n - 1 for
      n-step transitions (a row is written n - 1 steps after it starts).
    policy_info_spec: the agent's collect-time policy info; a dataset holds none, so
      only agents without one (DQN, SAC, BC, CQL) train on datasets.
    on_progress: called with (vector steps written, vector steps in all) each tenth of
      the way (and at least 1,000 steps apart).

  Returns:
    The vector steps written (each writes a row per slot).

  Raises:
    ValueError: an agent whose collected data holds policy info.
  """
  if tf.nest.flatten(policy_info_spec):
    raise ValueError('The agent keeps policy info with its experience (e.g. logits for '
                     'an off-policy correction), which a dataset does not hold: train '
                     'from datasets with DQN, SAC, BC or CQL agents.')
  steps = indices.shape[0] - 1
  every = max(1000, steps // 10)
  next_step = arrays.time_steps(indices[0])
  for t in range(steps):
    time_step, next_step = next_step, arrays.time_steps(indices[t + 1])
    action = arrays.actions(indices[t])
    writer.write(time_step, policy_step_lib.PolicyStep(action, (), ()), next_step,
                 DATASET_POLICY_VERSION)
    if on_progress is not None and (t + 1) % every == 0:
      on_progress(t + 1, steps)
  writer.flush()
  return steps


@dataclasses.dataclass
class LoadPlan:
  """A dataset read and laid out for a transition layout's table (`plan_load`).

  Attributes:
    directory: where it was read from.
    arrays: its steps.
    indices: the slots' step streams (`padded_indices`).
    rows: the rows it makes (boundary and padding rows included).
    items: the Reverb items those rows fill: the dataset table's minimum size to
      sample, so no batch is drawn before the whole dataset is in.
  """
  directory: str
  arrays: rlds.EpisodeArrays
  indices: np.ndarray
  rows: int
  items: int


def plan_load(directory: str, layout: Any, env: Any) -> Any:
  """Reads the dataset at `directory` (`formats.read`: RLDS, D4RL HDF5 or Minari; with
  `layout.cast_dataset_dtypes`, cast to the env's dtypes) and lays it out for `layout`'s table for
  datasets (`layout.make_dataset_writer`: the replay table offline, a table of its own
  for hybrid jobs) as `layout.num_envs` envs' streams; or, when `directory` holds a
  finished job's Reverb checkpoint, finds and counts its items.

  Returns:
    A `LoadPlan` (RLDS: `load_into_replay` writes it), or a
    `reverb_checkpoint.CheckpointPlan` (the server restores it:
    `reverb_checkpoint.seed_checkpoint_dir`).

  Raises:
    rlds.DatasetError: no dataset there, observations or actions unlike `env`'s
      (DatasetSpecError: another dtype without cast_dataset_dtypes), fewer episodes than envs, or a table too small for it.
    ValueError: a layout other than transition replay.
  """
  # Imported here: tfrl.layouts imports the agents' modules, which need not import
  # this.
  from tfrl import layouts  # pylint: disable=g-import-not-at-top
  if not isinstance(layout, layouts.TransitionReplay):
    raise ValueError(f'Datasets train agents of the TransitionReplay layout (DQN, SAC, '
                     f'BC, CQL); this agent trains from {type(layout).__name__}.')
  if reverb_checkpoint.find_checkpoint(directory) is not None:
    return reverb_checkpoint.plan(directory, layout)
  arrays = formats.fit(formats.read(directory), env.time_step_spec().observation,
                       env.action_spec(), directory,
                       cast=layout.cast_dataset_dtypes)
  indices = padded_indices(arrays, layout.num_envs, flush_steps=layout.n_step - 1)
  # The writer's items: a row is written n - 1 steps after it starts, an item holds
  # steps_per_item steps of envs_per_item envs (a last, partial one is not written).
  rows_written = indices.shape[0] - 1 - (layout.n_step - 1)
  items = ((rows_written // layout.steps_per_item) *
           (layout.num_envs // layout.envs_per_item))
  rows = items * layout.rows_per_item
  dataset_table.check_fits(f'The dataset at {directory} makes {rows} rows', rows, layout)
  return LoadPlan(directory, arrays, indices, rows, items)


def load_into_replay(plan: LoadPlan, layout: Any, client: Any, agent: Any,
                     on_progress: Optional[Callable[[int, int], None]] = None) -> None:
  """Writes a planned dataset into `layout`'s table for datasets through `client`.

  Raises:
    ValueError: an agent whose collected data holds policy info.
  """
  writer = layout.make_dataset_writer(client)
  try:
    feed(plan.arrays, writer, plan.indices, agent.collect_data_spec.policy_info,
         on_progress)
  finally:
    writer.close()


def loaded_message(plan: LoadPlan, layout: Any, seconds: float) -> str:
  """The progress line of a dataset written into `layout`'s table for it."""
  data = plan.arrays
  how = dataset_table.how_it_trains(layout)
  mean_return = float(np.mean(data.episode_returns()))
  return (f'Loaded {data.num_transitions} transitions ({data.num_episodes} episodes, mean '
          f'return {mean_return:.1f}) from {plan.directory} in {seconds:.1f} s; {how}.')

"""A dataset's place in a transition layout's table for datasets (the replay table
offline, a table of its own in a hybrid job), whichever form it comes in: an RLDS
dataset (`tfrl.datasets.feeder`) or a finished job's Reverb checkpoint
(`tfrl.datasets.reverb_checkpoint`)."""
from typing import Any

from tfrl.datasets import rlds


def check_fits(what: str, rows: int, layout: Any) -> None:
  """Raises rlds.DatasetError ('<what>, more than its table holds ...') unless `rows`
  fit the layout's table for datasets."""
  capacity = layout.dataset_capacity_rows
  if rows > capacity:
    setting = 'dataset_capacity' if layout.hybrid else 'capacity'
    raise rlds.DatasetError(f'{what}, more than its table holds '
                            f'(TransitionReplay.{setting} = {capacity}): raise it.')


def how_it_trains(layout: Any) -> str:
  """How a job uses its dataset, for the progress line that says it is loaded."""
  return (f"{layout.dataset_rows} of each batch's {layout.batch_size} rows come from it"
          if layout.hybrid else 'training offline')

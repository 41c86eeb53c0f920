"""When the launched evaluator evaluates: every eval_interval train steps, or on an
env-step grid (Experiment.eval_every_env_steps), from the server's item count."""
import pytest

from learners.configuration.experiment import Experiment
from learners.job import evaluator
from tfrl import replay


# In items of the layout's env steps, on a grid of 10 items' env steps.
@pytest.mark.parametrize('inserted_items,last_items,due', [
    (9, None, False), (10, None, True),       # the first multiple
    (19, 10, False), (20, 10, True),          # the next
    (23, 19, True), (25, 21, False),          # crossed since the last, or not
])
def test_an_env_step_grid_is_due_once_a_multiple_is_crossed(monkeypatch, inserted_items,
                                                          last_items, due):
  per_item = Experiment(env_name='CartPole-v1').layout.env_steps_per_item
  experiment = Experiment(env_name='CartPole-v1', eval_every_env_steps=10 * per_item)
  monkeypatch.setattr(replay, 'inserted_items', lambda address, table: inserted_items)
  last = None if last_items is None else {'train_step': 1, 'env_steps': last_items * per_item}
  assert evaluator._due(experiment, 'address', 5, last, interval=1000) == due  # pylint: disable=protected-access


def test_without_a_grid_it_counts_train_steps():
  experiment = Experiment(env_name='CartPole-v1')
  assert evaluator._due(experiment, 'unused', 10, None, interval=10)  # pylint: disable=protected-access
  assert not evaluator._due(experiment, 'unused', 19, {'train_step': 10}, interval=10)  # pylint: disable=protected-access
  assert evaluator._due(experiment, 'unused', 20, {'train_step': 10}, interval=10)  # pylint: disable=protected-access

"""Runs a script that trains under two `tf.distribute` strategies, in a subprocess.

A process holds one strategy's logical devices and collectives, so each comparison of
strategies (Mirrored on two CPU devices against the default one) runs apart from the
test process, and prints its result as `RESULT <json>`. The comparisons need runs that
repeat exactly: see `tfrl/graph_options.py` for the race that once broke that.
"""
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_result_script(script: str, timeout: int) -> dict:
  """Runs `script` with `python -c` on CPU only and returns the JSON it printed.

  Raises:
    AssertionError: the script failed (its stderr's tail in the message).
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='',
             PYTHONPATH=REPO)
  # Here, not at the top: the scripts import test modules that import this one, in a
  # child where tests/ is not on the path.
  import python_runs  # pylint: disable=g-import-not-at-top  # tests/python_runs.py
  result = python_runs.run(['-c', script], timeout=timeout, env=env)
  assert result.returncode == 0, result.stderr[-5000:]
  return json.loads(result.stdout.split('RESULT ', 1)[1])


def train_weighted_rows(agent, strategy, data, weights, batch_size: int, steps: int
                        ) -> dict:
  """Trains `agent` (built under `strategy`'s scope) with tfrl's Learner on `steps`
  batches of `batch_size` transition rows and their row weights, in order.

  Args:
    agent: an agent whose train takes `experience` and `weights`.
    strategy: the strategy the agent was built under.
    data: the rows (a nest of arrays, batch_size * steps rows).
    weights: [rows] their weights.
    batch_size: the global batch (each replica takes its share).
    steps: train steps, one per Learner.run.

  Returns:
    {'losses': each step's loss, 'variables': every agent variable after, as lists}.
  """
  import tempfile  # pylint: disable=g-import-not-at-top (the scripts' imports only)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfrl.learner import Learner  # pylint: disable=g-import-not-at-top

  def dataset_fn(context):
    per_replica = context.get_per_replica_batch_size(batch_size)
    dataset = tf.data.Dataset.from_tensor_slices((data, weights))
    return dataset.batch(per_replica, drop_remainder=True).map(
        lambda e, w: (e, dict(weights=w)))

  learner = Learner(tempfile.mkdtemp(), agent.train_step_counter, agent,
                    experience_dataset_fn=dataset_fn, strategy=strategy,
                    train_inputs_fn=lambda e, i: dict(experience=e, weights=i['weights']),
                    checkpoint_interval=0)
  losses = [float(learner.run().loss) for _ in range(steps)]
  return dict(losses=losses, variables=[v.numpy().tolist() for v in agent.variables])

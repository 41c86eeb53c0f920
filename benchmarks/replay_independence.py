"""Replay independence: how many vector steps and envs a batch draws from, and at what cost.

A transition item holds every env of one vector step. This benchmark writes the same
experience (--num_envs envs, --steps vector steps, one writer call per vector step)
into Reverb tables and drains `tfrl.replay.make_dataset` batches of --batch_size rows in
a `tf.while_loop` inside one `tf.function` (as a Learner pulls them), for:

  whole          today: uniform table, items of all envs of one step, batches of whole
                 items (batch_size / num_envs vector steps per batch).
  mixed-S        (a) the same items, their rows spread over batches by a shuffle buffer
                 of S rows (`make_dataset(shuffle_rows=S)`: tfrl's vectorized buffer,
                 items fetched S/4 rows at a time), for each S in --buffers.
  tfdata-S       (a, first try) whole-item batches, then tf.data's own
                 `unbatch().shuffle(S).batch(batch_size)`: per-row tf.data costs.
  per-env        (b) per-env items from one append (`envs_per_item=1`): one item per
                 transition, batches of batch_size items.
  prio-whole     prioritized table, whole-step items (priority: the item's max).
  prio-per-env   prioritized table, one item per transition (priority per transition):
                 what the prioritized layout uses.

It compares item and sampling mechanisms, most of which no layout uses (that is what it
chose between), so it builds its tables, writers and datasets itself rather than from
`tfrl.layouts`; the throughput benchmarks measure the layouts' own path.

Per path it prints input batches/s (best round, spread over --rounds), the ratio to
`whole`, and, over --sample_batches batches, the mean distinct vector steps and envs per
batch (a row's observation holds its env and step). Uniform sampling of single
transitions from the table would give the `reference` line. It also times the writer:
vector steps/s writing whole-step items vs per-env items.

Run (from the repository root):

    .venv/bin/python benchmarks/replay_independence.py
    .venv/bin/python benchmarks/replay_independence.py --seconds=2 --buffers=1024,2048
"""
import time

# First: benchmarks/common.py puts the repository on sys.path and quiets TF's C++ logs.
import common  # pylint: disable=g-bad-import-order
import tfrl  # TensorFlow, tf-agents and Reverb without their start-up noise
from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory as trajectory_lib

import tfrl.replay

CHUNK = 200  # batches drawn per in-graph call

FLAGS = flags.FLAGS
flags.DEFINE_integer('num_envs', 16, 'Envs per vector step.')
flags.DEFINE_integer('batch_size', 64, 'Rows per batch.')
flags.DEFINE_integer('steps', 200, 'Vector steps stored in each table.')
flags.DEFINE_list('buffers', ['1024', '2048'], 'Shuffle-buffer rows to try.')
flags.DEFINE_float('seconds', 3.0, 'Timed budget per path in each round.')
flags.DEFINE_integer('rounds', 3, 'Rounds over all paths; each path reports its best.')
flags.DEFINE_integer('sample_batches', 200, 'Batches inspected for distinct steps/envs.')
flags.DEFINE_integer('obs_size', 4, 'Observation floats per step (CartPole: 4).')


def specs():
  """A CartPole-shaped collect_data_spec (float observation, discrete action)."""
  observation = tensor_spec.TensorSpec([FLAGS.obs_size], tf.float32)
  action = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 1)
  time_step_spec = ts.time_step_spec(observation)
  return trajectory_lib.from_transition(
      time_step_spec, policy_step_lib.PolicyStep(action, (), ()), time_step_spec)


def vector_step(step: int):
  """(time_step, policy_step, next_time_step) of `step`; observation[:2] = (env, step)."""
  n = FLAGS.num_envs
  observation = np.zeros((n, FLAGS.obs_size), np.float32)
  observation[:, 0] = np.arange(n)
  observation[:, 1] = step
  time_step = ts.TimeStep(np.full(n, ts.StepType.MID, np.int32), np.zeros(n, np.float32),
                          np.ones(n, np.float32), observation)
  next_time_step = time_step._replace(observation=observation + 0.5)
  return time_step, policy_step_lib.PolicyStep(np.zeros(n, np.int64), (), ()), next_time_step


def fill(server, table, envs_per_item, steps) -> float:
  """Writes `steps` vector steps into `table`; returns vector steps/s of the writer."""
  writer = tfrl.replay.NStepTransitionWriter(server.client, table, n=1,
                                             envs_per_item=envs_per_item)
  data = [vector_step(s) for s in range(steps)]
  start = time.perf_counter()
  for time_step, policy_step, next_time_step in data:
    writer.write(time_step, policy_step, next_time_step)
  writer.close()
  return steps / (time.perf_counter() - start)


def drain_call(dataset):
  return common.drain_call(dataset, CHUNK)


def tf_data_shuffle(dataset, buffer_rows):
  """tf.data's row-by-row shuffle buffer (no-op for buffer_rows 0)."""
  if not buffer_rows:
    return dataset
  return dataset.unbatch().shuffle(buffer_rows).batch(FLAGS.batch_size, drop_remainder=True)


def independence(dataset):
  """Mean distinct vector steps and envs per batch, over --sample_batches batches."""
  steps, envs = [], []
  for experience, _ in dataset.take(FLAGS.sample_batches):
    first = experience.observation[:, 0].numpy()  # [rows, obs]
    envs.append(len(np.unique(first[:, 0])))
    steps.append(len(np.unique(first[:, 1])))
    if (experience.observation[:, 1] - experience.observation[:, 0]).numpy().min() != 0.5:
      raise AssertionError('a row mixes two transitions')
  return np.mean(steps), np.min(steps), np.mean(envs), np.min(envs)


def reference(total_rows: int, rng):
  """Uniform sampling of single transitions: mean distinct steps and envs per batch."""
  steps, envs = [], []
  for _ in range(FLAGS.sample_batches):
    rows = rng.integers(0, total_rows, FLAGS.batch_size)
    steps.append(len(np.unique(rows // FLAGS.num_envs)))
    envs.append(len(np.unique(rows % FLAGS.num_envs)))
  return np.mean(steps), np.min(steps), np.mean(envs), np.min(envs)


def main(argv):
  del argv
  spec = specs()
  n, steps = FLAGS.num_envs, FLAGS.steps
  whole_sig = tfrl.replay.NStepTransitionWriter.item_signature(spec, n)
  env_sig = tfrl.replay.NStepTransitionWriter.item_signature(spec, 1)
  tables = [tfrl.replay.uniform_table('whole', steps, whole_sig),
            tfrl.replay.uniform_table('per_env', steps * n, env_sig),
            tfrl.replay.prioritized_table('prio_whole', steps, whole_sig),
            tfrl.replay.prioritized_table('prio_per_env', steps * n, env_sig)]
  server = tfrl.replay.ReplayServer(tables)
  try:
    write_rates = {name: fill(server, name, g, steps) for name, g in (
        ('whole', n), ('per_env', 1), ('prio_whole', n), ('prio_per_env', 1))}
    batch = FLAGS.batch_size
    paths = [('whole', 'whole', whole_sig, 0)]
    paths += [(f'mixed-{b}', 'whole', whole_sig, int(b)) for b in FLAGS.buffers]
    paths += [(f'tfdata-{b}', 'whole', whole_sig, -int(b)) for b in FLAGS.buffers]
    paths += [('per-env', 'per_env', env_sig, 0), ('prio-whole', 'prio_whole', whole_sig, 0),
              ('prio-per-env', 'prio_per_env', env_sig, 0)]
    print(f'Replay independence: {n} envs x {steps} vector steps stored, batch {batch}, '
          f'{FLAGS.rounds} rounds of {FLAGS.seconds:g} s per path, '
          f'{common.machine_and_versions("dm-reverb")}')
    print(common.load_line('start'))
    measurements, stats = [], {}
    for name, table, sig, buffer_rows in paths:
      make = lambda: tf_data_shuffle(tfrl.replay.make_dataset(
          server.address, table, sig, batch,
          rows_per_item=int(sig['policy_version'].shape[-1]), time_major=False,
          experience_spec=spec, shuffle_rows=max(buffer_rows, 0)), -min(buffer_rows, 0))
      stats[name] = independence(make())
      measurements.append(common.Measurement(name, drain_call(make()), unit='batches'))
    common.time_round_robin(measurements, FLAGS.rounds, FLAGS.seconds,
                            lambda m: f'{m.name:<14} {m.rates()[-1]:>9,.0f} batches/s')
    print(common.load_line('end'))
    base = measurements[0].rate
    print(f'\n{"path":<14} {"batches/s":>10} {"spread":>17} {"vs whole":>9} '
          f'{"steps/batch":>12} {"(min)":>6} {"envs/batch":>11} {"(min)":>6}')
    for m in measurements:
      s = stats[m.name]
      spread = f'{min(m.rates()):,.0f}-{max(m.rates()):,.0f}'
      print(f'{m.name:<14} {m.rate:>10,.0f} {spread:>17} {m.rate / base:>9.1%} '
            f'{s[0]:>12.1f} {s[1]:>6} {s[2]:>11.1f} {s[3]:>6}')
    r = reference(steps * n, np.random.default_rng(0))
    print(f'{"reference":<14} {"":>10} {"":>17} {"":>9} {r[0]:>12.1f} {r[1]:>6} '
          f'{r[2]:>11.1f} {r[3]:>6}   (uniform single transitions)')
    print('\nwriter, vector steps/s: ' + ', '.join(
        f'{name} {rate:,.0f}' for name, rate in write_rates.items()))
  finally:
    server.stop()


if __name__ == '__main__':
  app.run(main)

"""Learner throughput: tfrl's Learner vs tf-agents' Learner vs an in-memory train loop.

Measures DQN train steps per second (batch 64 transitions) in one run, for:

  tfrl        `tfrl.learner.Learner` fed by `tfrl.replay.make_dataset` from a local
              `tfrl.replay.uniform_table` (embedded `tfrl.replay.ReplayServer`) filled
              by `tfrl.replay.NStepTransitionWriter(n=1)` with ~10k transitions: one item
              per 64-env vector step, so a batch of 64 rows is one Reverb item.
  tf-agents   the peer, tf-agents' standard path (as examples/dqn/dqn_train_eval.py):
              `tf_agents.train.learner.Learner` fed by
              `ReverbReplayBuffer(...).as_dataset(sample_batch_size=64, num_steps=2)
              .prefetch(50)` from a `reverb.Table` (uniform, signature [2]-step
              Trajectories) filled with ~10k one-transition items by
              `ReverbAddTrajectoryObserver(sequence_length=2, stride_length=1)`.
  ceiling     the same agent's `agent.train` in a `tf.while_loop` inside one
              `tf.function` on a fixed in-memory [64, 2] Trajectory: no input pipeline,
              no Learner.
  input       (diagnostic) the input pipelines alone: batches/s of draining tfrl's
              `make_dataset` and tf-agents' `as_dataset(...).prefetch(50)` inside a
              tf.function (no training), to show where the time goes.

Every path trains a fresh tf-agents `DqnAgent` built the same way (QNetwork fc(100),
Adam 1e-3, same seed) on the same experience: 160 batched steps of 64 CartPole-v1 envs
with random actions (`tfrl.envs.make`), written once into each path's table. Both
Learners run with checkpoint_interval=0 and summary_interval=0.

The Learner paths are timed over whole `learner.run(iterations=K)` calls after one
warm-up call (which traces the tf.function and fills the prefetch buffers), for two K:
--iterations (default 1000, the figure the targets are judged on) and
--small_iterations (default 16, to show the fixed cost of each call). Steps are counted
from the agent's train_step variable.

Targets (from the issue): tfrl >= 5x the tf-agents Learner and >= 50% of the ceiling.
The script always exits 0 (it is a measurement) and prints PASS/MISS against them.

Run (from the repository root):

    .venv/bin/python benchmarks/learner_throughput.py
    .venv/bin/python benchmarks/learner_throughput.py --seconds=5 --paths=tfrl,ceiling

Results are recorded in benchmarks/RESULTS.md.
"""
import gc
from importlib import metadata
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# Run as a script from the repository root: make `tfrl` importable without installing.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import numpy as np
import reverb
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import trajectory as trajectory_lib

import tfrl.envs
import tfrl.learner
import tfrl.replay

ENV_ID = 'CartPole-v1'
TABLE = 'replay'
ALL_PATHS = ('tfrl', 'tf-agents', 'ceiling', 'input')
TARGET_VS_PEER = 5.0
TARGET_VS_CEILING = 0.5

FLAGS = flags.FLAGS
flags.DEFINE_float('seconds', 10.0, 'Timed budget per measurement (after warm-up).')
flags.DEFINE_integer('batch_size', 64, 'Transitions per train step.')
flags.DEFINE_integer('num_envs', 64, 'Envs per vector step when filling the tables; '
                     'tfrl items hold this many transitions (must divide batch_size).')
flags.DEFINE_integer('fill_steps', 160, 'Vector steps written into each table.')
flags.DEFINE_integer('iterations', 1000, 'Train steps per Learner.run call.')
flags.DEFINE_integer('small_iterations', 16,
                     'Train steps per Learner.run call in the per-call-overhead variant '
                     '(0 skips it).')
flags.DEFINE_list('paths', list(ALL_PATHS), f'Subset of {",".join(ALL_PATHS)}.')
flags.DEFINE_integer('seed', 0, 'Environment and network seed.')


def make_dqn_agent(time_step_spec, action_spec) -> dqn_agent.DqnAgent:
  """A DQN agent with a QNetwork fc(100) and Adam; the same weights on every path."""
  tf.random.set_seed(FLAGS.seed)
  q_net = q_network.QNetwork(time_step_spec.observation, action_spec,
                             fc_layer_params=(100,))
  agent = dqn_agent.DqnAgent(
      time_step_spec, action_spec, q_network=q_net,
      optimizer=tf.keras.optimizers.Adam(1e-3), epsilon_greedy=0.1,
      n_step_update=1, gamma=0.99,
      train_step_counter=tf.Variable(0, dtype=tf.int64, name='train_step'))
  agent.initialize()
  return agent


def collect_experience(num_envs: int, steps: int):
  """`steps` batched (time_step, policy_step, next_time_step) of random CartPole play.

  Returns:
    (time_step_spec, action_spec, list of numpy transitions with leading dim num_envs).
  """
  env = tfrl.envs.make(ENV_ID, num_envs=num_envs, seed=FLAGS.seed)
  rng = np.random.default_rng(FLAGS.seed)
  transitions = []
  try:
    time_step = env.reset()
    for _ in range(steps):
      action = rng.integers(0, 2, size=num_envs, dtype=np.int64)
      next_time_step = env.step(action)
      transitions.append((time_step, policy_step_lib.PolicyStep(action, (), ()),
                          next_time_step))
      time_step = next_time_step
    return env.time_step_spec(), env.action_spec(), transitions
  finally:
    env.close()


class Result:
  """Train steps (or batches) counted over a timed window."""

  def __init__(self, name, steps, seconds, calls=0, note=''):
    self.name, self.steps, self.seconds, self.calls, self.note = (
        name, steps, seconds, calls, note)

  @property
  def rate(self) -> float:
    return self.steps / self.seconds

  @property
  def ms_per_call(self) -> float:
    return 1e3 * self.seconds / self.calls if self.calls else float('nan')


def time_learner(name, learner, train_step, iterations, seconds, note='') -> Result:
  """Times whole `learner.run(iterations)` calls after one warm-up call."""
  learner.run(iterations=iterations)  # warm-up: traces, fills prefetch buffers
  start_step = int(train_step.numpy())
  calls = 0
  start = time.perf_counter()
  while time.perf_counter() - start < seconds:
    learner.run(iterations=iterations)
    calls += 1
  elapsed = time.perf_counter() - start
  return Result(name, int(train_step.numpy()) - start_step, elapsed, calls, note)


def time_iterator(name, dataset, seconds, note='') -> Result:
  """Times pulling batches from a dataset's iterator in-graph, as a Learner does.

  Batches are drawn `chunk` at a time inside one tf.function (a tf.while_loop around
  `next(iterator)`), so the figure is the pipeline's own rate, without a Python call
  per batch.
  """
  iterator = iter(dataset)
  chunk = 500

  @tf.function(autograph=False)
  def drain(n):
    def body(i, total):
      leaf = tf.nest.flatten(next(iterator))[0]  # consume the batch
      return i + 1, total + tf.cast(tf.size(leaf), tf.int64)
    return tf.while_loop(lambda i, _: i < n, body,
                         (tf.constant(0), tf.constant(0, tf.int64)))[1]

  drain(tf.constant(chunk))  # warm-up: traces, fills the prefetch buffer
  batches = 0
  start = time.perf_counter()
  while time.perf_counter() - start < seconds:
    drain(tf.constant(chunk))
    batches += chunk
  return Result(name, batches, time.perf_counter() - start, note=note)


# -- tfrl ---------------------------------------------------------------------------


def fill_tfrl_table(agent, transitions, num_envs):
  """An embedded ReplayServer whose table holds one item of num_envs rows per step."""
  signature = tfrl.replay.NStepTransitionWriter.item_signature(
      agent.collect_data_spec, num_envs)
  table = tfrl.replay.uniform_table(TABLE, max_size=10 * len(transitions),
                                    signature=signature)
  server = tfrl.replay.ReplayServer([table])
  writer = tfrl.replay.NStepTransitionWriter(server.client, TABLE, n=1)
  for time_step, policy_step, next_time_step in transitions:
    writer.write(time_step, policy_step, next_time_step)
  writer.close()
  return server, signature


def bench_tfrl(specs, transitions, seconds):
  """tfrl's Learner at both iteration counts, and its dataset alone."""
  agent = make_dqn_agent(*specs)
  num_envs = FLAGS.num_envs
  server, signature = fill_tfrl_table(agent, transitions, num_envs)
  items = server.table_info()[TABLE].current_size
  note = f'{items} items of {num_envs} transitions'

  def dataset_fn():
    return tfrl.replay.make_dataset(server.address, TABLE, signature, FLAGS.batch_size,
                                    experience_spec=agent.collect_data_spec)

  results = {}
  root_dir = tempfile.mkdtemp(prefix='tfrl_learner_bench_')
  try:
    if 'tfrl' in FLAGS.paths:
      learner = tfrl.learner.Learner(
          root_dir, agent.train_step_counter, agent, experience_dataset_fn=dataset_fn,
          checkpoint_interval=0, summary_interval=0)
      for k in _iteration_counts():
        name = f'tfrl K={k}'
        results[name] = time_learner(name, learner, agent.train_step_counter, k,
                                     seconds, note)
        _report(results[name])
      del learner
    if 'input' in FLAGS.paths:
      name = 'tfrl make_dataset'
      results[name] = time_iterator(name, dataset_fn(), seconds,
                                    f'batches of {FLAGS.batch_size}; {note}')
      _report(results[name], 'batches')
  finally:
    gc.collect()
    server.stop()
    shutil.rmtree(root_dir, ignore_errors=True)
  return results


# -- tf-agents ----------------------------------------------------------------------


def bench_tf_agents(specs, transitions, seconds):
  """tf-agents' Learner + ReverbReplayBuffer at both iteration counts, and its dataset."""
  # Imported here: tfrl itself must not import tf_agents.train / replay_buffers.
  from tf_agents.replay_buffers import reverb_replay_buffer  # pylint: disable=g-import-not-at-top
  from tf_agents.replay_buffers import reverb_utils
  from tf_agents.train import learner as tfa_learner

  agent = make_dqn_agent(*specs)
  signature = tensor_spec.add_outer_dims_nest(
      tensor_spec.from_spec(agent.collect_data_spec), (2,))
  table = reverb.Table(
      TABLE, max_size=10 * len(transitions) * FLAGS.num_envs,
      sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
      rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
  server = reverb.Server([table])
  replay_buffer = reverb_replay_buffer.ReverbReplayBuffer(
      agent.collect_data_spec, sequence_length=2, table_name=TABLE, local_server=server)
  observer = reverb_utils.ReverbAddTrajectoryObserver(
      replay_buffer.py_client, TABLE, sequence_length=2, stride_length=1)
  # One env's stream at a time, as a tf-agents Actor on that env would write it.
  batched = [trajectory_lib.from_transition(*t) for t in transitions]
  for env in range(FLAGS.num_envs):
    for traj in batched:
      observer(tf.nest.map_structure(lambda x, e=env: x[e], traj))
    observer.reset(write_cached_steps=False)
  observer.close()
  items = replay_buffer.py_client.server_info()[TABLE].current_size
  note = f'{items} items of 1 transition'

  def dataset_fn():
    return replay_buffer.as_dataset(sample_batch_size=FLAGS.batch_size,
                                    num_steps=2).prefetch(50)

  results = {}
  root_dir = tempfile.mkdtemp(prefix='tfa_learner_bench_')
  try:
    if 'tf-agents' in FLAGS.paths:
      dataset = dataset_fn()
      learner = tfa_learner.Learner(
          root_dir, agent.train_step_counter, agent,
          experience_dataset_fn=lambda: dataset, checkpoint_interval=0,
          summary_interval=0)
      for k in _iteration_counts():
        name = f'tf-agents K={k}'
        results[name] = time_learner(name, learner, agent.train_step_counter, k,
                                     seconds, note)
        _report(results[name])
      del learner, dataset
    if 'input' in FLAGS.paths:
      name = 'tf-agents as_dataset'
      results[name] = time_iterator(name, dataset_fn(), seconds,
                                    f'batches of {FLAGS.batch_size}; {note}')
      _report(results[name], 'batches')
  finally:
    gc.collect()
    server.stop()
    shutil.rmtree(root_dir, ignore_errors=True)
  return results


# -- ceiling ------------------------------------------------------------------------


def bench_ceiling(specs, transitions, seconds):
  """`agent.train` looped in one tf.function on a fixed in-memory batch."""
  agent = make_dqn_agent(*specs)
  batch = FLAGS.batch_size
  # The [batch, 2] Trajectory of the first two vector steps (step t -> t+1 per env),
  # laid out as the replay datasets deliver it.
  t0, t1 = transitions[0], transitions[1]
  pair = lambda a, b: tf.constant(np.stack([a, b], axis=1)[:batch])
  experience = trajectory_lib.Trajectory(
      step_type=pair(t0[0].step_type, t1[0].step_type),
      observation=pair(t0[0].observation, t1[0].observation),
      action=pair(t0[1].action, t1[1].action),
      policy_info=(),
      next_step_type=pair(t0[2].step_type, t1[2].step_type),
      reward=pair(t0[2].reward, t1[2].reward),
      discount=pair(t0[2].discount, t1[2].discount))
  if FLAGS.num_envs < batch:  # not enough envs for one batch from two steps: tile
    reps = -(-batch // FLAGS.num_envs)
    experience = tf.nest.map_structure(
        lambda x: tf.tile(x, [reps] + [1] * (x.shape.rank - 1))[:batch], experience)

  @tf.function(autograph=False)
  def train_loop(iterations):
    first = agent.train(experience).loss

    def body(i, unused_loss):
      return i + 1, agent.train(experience).loss

    return tf.while_loop(lambda i, _: i < iterations, body, (tf.constant(1), first))[1]

  k = tf.constant(FLAGS.iterations)
  train_loop(k)  # warm-up
  step = agent.train_step_counter
  start_step, calls = int(step.numpy()), 0
  start = time.perf_counter()
  while time.perf_counter() - start < seconds:
    train_loop(k)
    calls += 1
  elapsed = time.perf_counter() - start
  result = Result(f'ceiling K={FLAGS.iterations}', int(step.numpy()) - start_step,
                  elapsed, calls, 'agent.train on one fixed in-memory batch')
  _report(result)
  return {result.name: result}


# -- report -------------------------------------------------------------------------


def _iteration_counts():
  return [FLAGS.iterations] + ([FLAGS.small_iterations] if FLAGS.small_iterations else [])


def _report(r: Result, unit='train steps') -> None:
  print(f'  measured {r.name}: {r.rate:,.0f} {unit}/s over {r.seconds:.1f} s', flush=True)


def _ratio_line(label, num, den, target):
  if num is None or den is None:
    return f'{label:<30} n/a (path not run)'
  ratio = num.rate / den.rate
  verdict = 'PASS' if ratio >= target else 'MISS'
  if target >= 1:
    shown, target_text = f'{ratio:.2f}x', f'{target:g}x'
  else:
    shown, target_text = f'{ratio:.1%}', f'{target:.0%}'
  return f'{label:<30} {shown:<10} target >= {target_text:<4} {verdict}'


def _load() -> str:
  return ', '.join(f'{x:.2f}' for x in os.getloadavg())


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  unknown = [p for p in FLAGS.paths if p not in ALL_PATHS]
  if unknown:
    raise app.UsageError(f'Unknown --paths {unknown}; choose from {ALL_PATHS}.')
  if FLAGS.batch_size % FLAGS.num_envs:
    raise app.UsageError(f'--num_envs={FLAGS.num_envs} must divide '
                         f'--batch_size={FLAGS.batch_size} (tfrl items hold num_envs rows).')
  print(f'Learner throughput, DQN QNetwork fc(100) on {ENV_ID} data: batch '
        f'{FLAGS.batch_size}, {FLAGS.fill_steps} x {FLAGS.num_envs} transitions per table, '
        f'K={_iteration_counts()} steps per run call, {FLAGS.seconds:g} s per measurement, '
        f'{os.cpu_count()} CPUs, GPUs: {len(tf.config.list_physical_devices("GPU"))}; '
        f'tf {tf.__version__}, dm-reverb {metadata.version("dm-reverb")}, '
        f'tf-agents {metadata.version("tf-agents")}', flush=True)
  print(f'  load average at start (1, 5, 15 min): {_load()}', flush=True)

  time_step_spec, action_spec, transitions = collect_experience(
      FLAGS.num_envs, FLAGS.fill_steps)
  specs = (tensor_spec.from_spec(time_step_spec), tensor_spec.from_spec(action_spec))

  results = {}
  # The ceiling runs right before tfrl: on a shared machine the load drifts, and the
  # two terms of the tfrl / ceiling ratio are best measured close together.
  if 'ceiling' in FLAGS.paths:
    results.update(bench_ceiling(specs, transitions, FLAGS.seconds))
  if 'tfrl' in FLAGS.paths or 'input' in FLAGS.paths:
    results.update(bench_tfrl(specs, transitions, FLAGS.seconds))
  if 'tf-agents' in FLAGS.paths or 'input' in FLAGS.paths:
    results.update(bench_tf_agents(specs, transitions, FLAGS.seconds))
  print(f'  load average at end (1, 5, 15 min): {_load()}')

  trained = [r for r in results.values() if r.calls]
  if trained:
    print()
    print(f'{"path":<22} {"steps/s":>9} {"ms/call":>9} {"seconds":>8}  note')
    for r in trained:
      print(f'{r.name:<22} {r.rate:>9,.0f} {r.ms_per_call:>9.1f} {r.seconds:>8.1f}  {r.note}')
  inputs = [r for r in results.values() if not r.calls]
  if inputs:
    print()
    print(f'{"input pipeline alone":<22} {"batches/s":>9} {"":>9} {"seconds":>8}  note')
    for r in inputs:
      print(f'{r.name:<22} {r.rate:>9,.0f} {"":>9} {r.seconds:>8.1f}  {r.note}')
  print()
  k, small = FLAGS.iterations, FLAGS.small_iterations
  tfrl_r = results.get(f'tfrl K={k}')
  print(_ratio_line(f'tfrl / tf-agents (K={k})', tfrl_r, results.get(f'tf-agents K={k}'),
                    TARGET_VS_PEER))
  print(_ratio_line(f'tfrl / ceiling (K={k})', tfrl_r, results.get(f'ceiling K={k}'),
                    TARGET_VS_CEILING))
  if small and f'tfrl K={small}' in results and f'tf-agents K={small}' in results:
    ratio = results[f'tfrl K={small}'].rate / results[f'tf-agents K={small}'].rate
    print(f'{f"tfrl / tf-agents (K={small})":<30} {f"{ratio:.2f}x":<10} (diagnostic)')
  if small and tfrl_r is not None and f'tfrl K={small}' in results:
    r_small = results[f'tfrl K={small}']
    # t(K) = overhead + K / rate: two K values give the fixed cost of one run call.
    per_step = (tfrl_r.seconds / tfrl_r.steps)
    overhead_ms = 1e3 * (r_small.seconds / r_small.calls - small * per_step)
    print(f'{"tfrl Learner.run fixed cost":<30} ~{overhead_ms:.1f} ms per call '
          f'(K={small} runs at {r_small.rate / tfrl_r.rate:.0%} of K={k}) (diagnostic)')


if __name__ == '__main__':
  app.run(main)

"""Learner throughput: tfrl's Learner vs tf-agents' Learner vs an in-memory train loop.

Measures DQN train steps per second (batch 64 transitions) in one run, for:

  tfrl        `tfrl.learner.Learner` fed as a job feeds it: the table, writer,
              dataset and train inputs of `tfrl.layouts.TransitionReplay` (n = 1, an
              embedded `tfrl.replay.ReplayServer`), filled with ~10k transitions, items
              of --envs_per_item transitions (default 16, so a batch of 64 rows mixes 4
              items, as `dqn_cartpole.gin` samples them; --envs_per_item=64 makes each
              batch one item).
  tf-agents   the peer, tf-agents' standard path (as examples/dqn/dqn_train_eval.py):
              `tf_agents.train.learner.Learner` fed by
              `ReverbReplayBuffer(...).as_dataset(sample_batch_size=64, num_steps=2)
              .prefetch(50)` from a `reverb.Table` (uniform, signature [2]-step
              Trajectories, MinSize(1)) filled with ~10k one-transition items by
              `ReverbAddTrajectoryObserver(sequence_length=2, stride_length=1)`.
  ceiling     the same agent's `agent.train` in a `tf.while_loop` inside one
              `tf.function` on a fixed in-memory [64, 2] Trajectory: no input pipeline,
              no Learner.
  tfrl-autotune (diagnostic) the tfrl path with tf.data's autotuning thread on (the
              dataset sets `autotune.enabled = True`; the Learner turns it off in
              datasets that leave it unset: tfrl/learner_input.py), timed at
              --iterations only: what turning the thread off costs.
  memory      (diagnostic) tfrl's Learner fed one of make_dataset's batches again and
              again from memory (`Dataset.from_tensors(batch).repeat()`): the Learner's
              own cost (loop, iterator, strategy plumbing) without Reverb's pipeline.
  input       (diagnostic) the input pipelines alone: batches/s of draining tfrl's
              `make_dataset` and tf-agents' `as_dataset(...).prefetch(50)` in a
              `tf.while_loop` inside one `tf.function` (no training), as a Learner
              pulls them.

Every path trains a fresh tf-agents `DqnAgent` built the same way (QNetwork fc(100), or
--fc_layers; Adam 1e-3, same seed) on the same experience: 160 batched steps of 64
CartPole-v1 envs with random actions (`tfrl.envs.make`), written once into each path's
table. Both Learners run with checkpoint_interval=0 and summary_interval=0.

The Learner paths are timed over whole `learner.run(iterations=K)` calls, for two K:
--iterations (default 1000, the figure the targets are judged on) and
--small_iterations (default 16, to show the fixed cost of each call). Steps are counted
from the agent's train_step variable.

Method: every path is built and warmed up first (one call each: traces the
tf.functions, fills the prefetch buffers); then --rounds rounds each time every path
for --seconds, in a fixed order (ceiling first, tfrl right after it). On a shared
machine other jobs only ever slow a measurement down, so each path's figure is its best
round, and the spread over rounds is printed next to it.

Targets: tfrl >= 5x the tf-agents Learner, and >= 85% of the ceiling with
batches mixed from several items (it was >= 50% with one item per batch).
The script always exits 0 (it is a measurement) and prints PASS/MISS against them.

Run (from the repository root):

    .venv/bin/python benchmarks/learner_throughput.py
    .venv/bin/python benchmarks/learner_throughput.py --seconds=5 --paths=tfrl,ceiling

Results: docs/results/, written by benchmarks/results_pages.py from the outputs kept in
benchmarks/runs/ (a run's output as printed, <name>.txt, beside its <name>.meta.json).
"""
import contextlib
import shutil
import tempfile

# First: benchmarks/common.py puts the repository on sys.path and quiets TF's C++ logs.
import common  # pylint: disable=g-bad-import-order
import tfrl  # TensorFlow, tf-agents and Reverb without their start-up noise
from absl import app
from absl import flags
from absl import logging
import numpy as np
import reverb
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import trajectory as trajectory_lib

import tfrl.envs
import tfrl.graph_options
import tfrl.layouts
import tfrl.learner
import tfrl.replay

ENV_ID = 'CartPole-v1'
TABLE = 'replay'
ALL_PATHS = ('tfrl', 'tf-agents', 'ceiling', 'input', 'memory', 'tfrl-autotune')
TARGET_VS_PEER = 5.0
TARGET_VS_CEILING = 0.85
INPUT_CHUNK = 500  # batches drawn per in-graph call when timing an input pipeline

FLAGS = flags.FLAGS
flags.DEFINE_float('seconds', 10.0, 'Timed budget per path in each round.')
flags.DEFINE_integer('rounds', 3, 'Rounds over all paths; each path reports its best.')
flags.DEFINE_integer('batch_size', 64, 'Transitions per train step.')
flags.DEFINE_integer('num_envs', 64, 'Envs per vector step when filling the tables; '
                     'tfrl items hold this many transitions (must divide batch_size).')
flags.DEFINE_list('fc_layers', ['100'], "The Q-network's hidden layers (dqn_cartpole.gin "
                  'has 256,256).')
flags.DEFINE_integer('envs_per_item', 16,
                     'Transitions per tfrl item (must divide num_envs and batch_size).')
flags.DEFINE_integer('shuffle_buffer_batches', tfrl.replay.mixing.DEFAULT_BUFFER_BATCHES,
                     "tfrl's shuffle buffer, in batches (0: batches of whole items).")
flags.DEFINE_integer('fill_steps', 160, 'Vector steps written into each table.')
flags.DEFINE_integer('iterations', 1000, 'Train steps per Learner.run call.')
flags.DEFINE_integer('small_iterations', 16,
                     'Train steps per Learner.run call in the per-call-overhead variant '
                     '(0 skips it).')
flags.DEFINE_list('paths', list(ALL_PATHS), f'Subset of {",".join(ALL_PATHS)}.')
flags.DEFINE_integer('seed', 0, 'Environment and network seed.')
flags.DEFINE_enum('dependency_optimizer', 'off', ['off', 'on'],
                  "Grappler's dependency optimizer for every path (the setting is per "
                  "process): off as tfrl's Learner sets it (tfrl/graph_options.py), or on, "
                  "TensorFlow's default, to measure what turning it off costs.")


def _fc_layers():
  return tuple(int(units) for units in FLAGS.fc_layers)


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
    return (tensor_spec.from_spec(env.time_step_spec()),
            tensor_spec.from_spec(env.action_spec()), transitions)
  finally:
    env.close()


# -- measurements -------------------------------------------------------------------


def learner_measurement(name, learner, train_step, iterations, note) -> common.Measurement:
  """Whole `learner.run(iterations)` calls; warms up (traces, fills buffers) first."""

  def call():
    before = int(train_step.numpy())
    learner.run(iterations=iterations)
    return int(train_step.numpy()) - before

  call()
  return common.Measurement(name, call, note)


def input_measurement(name, dataset, note) -> common.Measurement:
  """Batches drawn in-graph, `INPUT_CHUNK` per tf.function call, as a Learner does."""
  call = common.drain_call(dataset, INPUT_CHUNK)
  return common.Measurement(name, call, note, unit='batches')


def _iteration_counts():
  return [FLAGS.iterations] + ([FLAGS.small_iterations] if FLAGS.small_iterations else [])


# -- paths --------------------------------------------------------------------------


def setup_ceiling(specs, transitions, stack):
  """`agent.train` looped in one tf.function on a fixed in-memory batch."""
  del stack
  agent = common.make_dqn_agent(*specs, FLAGS.seed, _fc_layers())
  batch = FLAGS.batch_size
  # The [batch, 2] Trajectory of the first two vector steps (step t -> t+1 per env),
  # laid out as the replay datasets deliver it.
  t0, t1 = transitions[0], transitions[1]
  pair = lambda a, b: np.stack([a, b], axis=1)
  experience = trajectory_lib.Trajectory(
      step_type=pair(t0[0].step_type, t1[0].step_type),
      observation=pair(t0[0].observation, t1[0].observation),
      action=pair(t0[1].action, t1[1].action),
      policy_info=(),
      next_step_type=pair(t0[2].step_type, t1[2].step_type),
      reward=pair(t0[2].reward, t1[2].reward),
      discount=pair(t0[2].discount, t1[2].discount))
  reps = -(-batch // FLAGS.num_envs)  # tile when num_envs < batch
  experience = tf.nest.map_structure(
      lambda x: tf.constant(np.concatenate([x] * reps)[:batch]), experience)

  @tf.function(autograph=False)
  def train_loop(iterations):
    first = agent.train(experience).loss

    def body(i, unused_loss):
      return i + 1, agent.train(experience).loss

    return tf.while_loop(lambda i, _: i < iterations, body, (tf.constant(1), first))[1]

  k = tf.constant(FLAGS.iterations)
  step = agent.train_step_counter

  def call():
    before = int(step.numpy())
    train_loop(k)
    return int(step.numpy()) - before

  call()
  return [common.Measurement(f'ceiling K={FLAGS.iterations}', call,
                      'agent.train on one fixed in-memory batch')]


def setup_tfrl(specs, transitions, stack):
  """tfrl's Learner at both iteration counts, and its dataset alone."""
  agent = common.make_dqn_agent(*specs, FLAGS.seed, _fc_layers())
  # The layout dqn_cartpole.gin trains from: items of --envs_per_item envs (a batch of
  # 64 from 16-env items mixes 4 items through the shuffle buffer), n = 1.
  layout = tfrl.layouts.TransitionReplay(
      num_envs=FLAGS.envs_per_item, batch_size=FLAGS.batch_size, n_step=1,
      capacity=10 * len(transitions) * FLAGS.num_envs,
      shuffle_buffer_batches=FLAGS.shuffle_buffer_batches)
  server = tfrl.replay.ReplayServer(layout.tables(agent))
  stack.callback(server.stop)
  writer = layout.make_writer(server.client)  # fed vector steps of --num_envs envs
  for time_step, policy_step, next_time_step in transitions:
    writer.write(time_step, policy_step, next_time_step)
  writer.close()
  table = layout.experience_table
  note = (f'{server.table_info()[table].current_size} items of {layout.rows_per_item} '
          f'transitions, shuffle buffer of {FLAGS.shuffle_buffer_batches} batches')
  dataset_fn = lambda: layout.dataset_fn(server.address, agent)(
      tf.distribute.InputContext())
  train_inputs_fn = layout.train_inputs_fn(agent)

  measurements = []
  if 'tfrl' in FLAGS.paths:
    root_dir = tempfile.mkdtemp(prefix='tfrl_learner_bench_')
    stack.callback(shutil.rmtree, root_dir, ignore_errors=True)
    learner = tfrl.learner.Learner(
        root_dir, agent.train_step_counter, agent, experience_dataset_fn=dataset_fn,
        train_inputs_fn=train_inputs_fn, checkpoint_interval=0, summary_interval=0)
    measurements += [learner_measurement(f'tfrl K={k}', learner, agent.train_step_counter,
                                         k, note) for k in _iteration_counts()]
  if 'tfrl-autotune' in FLAGS.paths:
    measurements.append(_autotuned_tfrl_measurement(specs, layout, server, stack))
  if 'memory' in FLAGS.paths:
    memory_agent = common.make_dqn_agent(*specs, FLAGS.seed, _fc_layers())
    batch = next(iter(dataset_fn()))
    root_dir = tempfile.mkdtemp(prefix='tfrl_learner_bench_')
    stack.callback(shutil.rmtree, root_dir, ignore_errors=True)
    learner = tfrl.learner.Learner(
        root_dir, memory_agent.train_step_counter, memory_agent,
        experience_dataset_fn=lambda: tf.data.Dataset.from_tensors(batch).repeat(),
        train_inputs_fn=layout.train_inputs_fn(memory_agent), checkpoint_interval=0,
        summary_interval=0)
    k = FLAGS.iterations
    measurements.append(learner_measurement(
        f'tfrl-memory K={k}', learner, memory_agent.train_step_counter, k,
        'one batch from memory, repeated'))
  if 'input' in FLAGS.paths:
    measurements.append(input_measurement('tfrl make_dataset', dataset_fn(), note))
  return measurements


def _autotuned_tfrl_measurement(specs, layout, server, stack) -> common.Measurement:
  """The tfrl path on the same table, its dataset asking for tf.data's autotuning."""
  agent = common.make_dqn_agent(*specs, FLAGS.seed, _fc_layers())
  options = tf.data.Options()
  options.autotune.enabled = True  # set, so the Learner keeps it

  def dataset_fn():
    dataset = layout.dataset_fn(server.address, agent)(tf.distribute.InputContext())
    return dataset.with_options(options)

  root_dir = tempfile.mkdtemp(prefix='tfrl_learner_bench_')
  stack.callback(shutil.rmtree, root_dir, ignore_errors=True)
  learner = tfrl.learner.Learner(
      root_dir, agent.train_step_counter, agent, experience_dataset_fn=dataset_fn,
      train_inputs_fn=layout.train_inputs_fn(agent), checkpoint_interval=0,
      summary_interval=0)
  k = FLAGS.iterations
  return learner_measurement(f'tfrl-autotune K={k}', learner, agent.train_step_counter,
                             k, "tf.data's autotuning thread on")


def setup_tf_agents(specs, transitions, stack):
  """tf-agents' Learner + ReverbReplayBuffer at both iteration counts, and its dataset."""
  # Imported here: tfrl itself must not import tf_agents.train / replay_buffers.
  from tf_agents.replay_buffers import reverb_replay_buffer  # pylint: disable=g-import-not-at-top
  from tf_agents.replay_buffers import reverb_utils
  from tf_agents.train import learner as tfa_learner

  agent = common.make_dqn_agent(*specs, FLAGS.seed, _fc_layers())
  signature = tensor_spec.add_outer_dims_nest(
      tensor_spec.from_spec(agent.collect_data_spec), (2,))
  table = reverb.Table(
      TABLE, max_size=10 * len(transitions) * FLAGS.num_envs,
      sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
      rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
  server = reverb.Server([table])
  stack.callback(server.stop)
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
  note = f'{replay_buffer.py_client.server_info()[TABLE].current_size} items of 1 transition'

  def dataset_fn():
    return replay_buffer.as_dataset(sample_batch_size=FLAGS.batch_size,
                                    num_steps=2).prefetch(50)

  measurements = []
  if 'tf-agents' in FLAGS.paths:
    root_dir = tempfile.mkdtemp(prefix='tfa_learner_bench_')
    stack.callback(shutil.rmtree, root_dir, ignore_errors=True)
    dataset = dataset_fn()
    learner = tfa_learner.Learner(
        root_dir, agent.train_step_counter, agent,
        experience_dataset_fn=lambda: dataset, checkpoint_interval=0,
        summary_interval=0)
    measurements += [learner_measurement(f'tf-agents K={k}', learner,
                                         agent.train_step_counter, k, note)
                     for k in _iteration_counts()]
  if 'input' in FLAGS.paths:
    measurements.append(input_measurement('tf-agents as_dataset', dataset_fn(), note))
  return measurements


# -- report -------------------------------------------------------------------------


def _spread(m: common.Measurement) -> str:
  rates = m.rates()
  if len(rates) < 2:
    return ''
  return f'{min(rates):,.0f}-{max(rates):,.0f}'


def _ratio_line(label, num, den, target):
  """'label  ratio  target  PASS|MISS' on the best rounds, then the ratio round by round."""
  if num is None or den is None:
    return common.target_line(label, None, target, '', 30, 10)
  ratio = num.rate / den.rate
  per_round = ''
  if len(num.rounds) > 1 and len(num.rounds) == len(den.rounds):
    ratios = [a / b for a, b in zip(num.rates(), den.rates())]
    per_round = '  (per round: {})'.format(', '.join(
        common.format_ratio(r, target, x_digits=2, share_digits=0) for r in ratios))
  shown = common.format_ratio(ratio, target, x_digits=2)
  return common.target_line(label, ratio, target, shown, 30, 10) + per_round


def _set_dependency_optimizer(on: bool) -> None:
  """Sets the process-wide setting before any path builds its functions; `on` also
  keeps tfrl's Learner from turning it off."""
  if on:
    tfrl.graph_options.keep_train_step_order = lambda: None
  else:
    tfrl.graph_options.keep_train_step_order()
  tf.config.optimizer.set_experimental_options({'dependency_optimization': on})
  print(f"Grappler's dependency optimizer: {'on' if on else 'off'} on every path",
        flush=True)


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  common.check_choices('paths', FLAGS.paths, ALL_PATHS)
  if FLAGS.num_envs % FLAGS.envs_per_item or FLAGS.batch_size % FLAGS.envs_per_item:
    raise app.UsageError(f'--envs_per_item={FLAGS.envs_per_item} must divide --num_envs='
                         f'{FLAGS.num_envs} and --batch_size={FLAGS.batch_size}.')
  print(f'Learner throughput, DQN QNetwork fc{_fc_layers()} on {ENV_ID} data: batch '
        f'{FLAGS.batch_size}, {FLAGS.fill_steps} x {FLAGS.num_envs} transitions per table, '
        f'K={_iteration_counts()} steps per run call, {FLAGS.rounds} rounds of '
        f'{FLAGS.seconds:g} s per path, '
        f'{common.machine_and_versions("dm-reverb", "tf-agents")}', flush=True)
  print(common.load_line('start'), flush=True)
  _set_dependency_optimizer(FLAGS.dependency_optimizer == 'on')

  *specs, transitions = collect_experience(FLAGS.num_envs, FLAGS.fill_steps)
  with contextlib.ExitStack() as stack:
    # Ceiling first and tfrl right after: the two terms of the tfrl / ceiling ratio
    # are measured close together while the machine's load drifts.
    measurements = []
    if 'ceiling' in FLAGS.paths:
      measurements += setup_ceiling(specs, transitions, stack)
    if {'tfrl', 'input', 'memory', 'tfrl-autotune'} & set(FLAGS.paths):
      measurements += setup_tfrl(specs, transitions, stack)
    if 'tf-agents' in FLAGS.paths or 'input' in FLAGS.paths:
      measurements += setup_tf_agents(specs, transitions, stack)
    # Input pipelines last in each round, after the Learners they diagnose.
    measurements.sort(key=lambda m: m.unit == 'batches')
    common.time_round_robin(measurements, FLAGS.rounds, FLAGS.seconds,
                            lambda m: f'{m.name:<22} {m.rates()[-1]:>9,.0f} {m.unit}/s')
  print(common.load_line('end'))

  results = {m.name: m for m in measurements}
  trained = [m for m in measurements if m.unit == 'train steps']
  if trained:
    print()
    print(f'{"path":<22} {"steps/s":>9} {"rounds":>13} {"ms/call":>9}  note')
    for m in trained:
      print(f'{m.name:<22} {m.rate:>9,.0f} {_spread(m):>13} {m.ms_per_call:>9.1f}  {m.note}')
  inputs = [m for m in measurements if m.unit == 'batches']
  if inputs:
    print()
    print(f'{"input pipeline alone":<22} {"batches/s":>9} {"rounds":>13} {"":>9}  note')
    for m in inputs:
      print(f'{m.name:<22} {m.rate:>9,.0f} {_spread(m):>13} {"":>9}  '
            f'batches of {FLAGS.batch_size}; {m.note}')
  print()
  k, small = FLAGS.iterations, FLAGS.small_iterations
  tfrl_m = results.get(f'tfrl K={k}')
  print(_ratio_line(f'tfrl / tf-agents (K={k})', tfrl_m, results.get(f'tf-agents K={k}'),
                    TARGET_VS_PEER))
  print(_ratio_line(f'tfrl / ceiling (K={k})', tfrl_m, results.get(f'ceiling K={k}'),
                    TARGET_VS_CEILING))
  memory_m, ceiling_m = results.get(f'tfrl-memory K={k}'), results.get(f'ceiling K={k}')
  if memory_m is not None and ceiling_m is not None:
    print(f'{"tfrl-memory / ceiling":<30} {memory_m.rate / ceiling_m.rate:.1%} (diagnostic: '
          'the Learner without Reverb)')
  autotune_m = results.get(f'tfrl-autotune K={k}')
  if autotune_m is not None and tfrl_m is not None:
    print(f'{"tfrl / tfrl-autotune":<30} {tfrl_m.rate / autotune_m.rate:.1%} (diagnostic: '
          "tf.data's autotuning thread off, as the Learner runs, against on)")
  if memory_m is not None and tfrl_m is not None:
    print(f'{"tfrl / tfrl-memory":<30} {tfrl_m.rate / memory_m.rate:.1%} (diagnostic: '
          "Reverb's input pipeline)")
  if small and f'tfrl K={small}' in results and f'tf-agents K={small}' in results:
    ratio = results[f'tfrl K={small}'].rate / results[f'tf-agents K={small}'].rate
    print(f'{f"tfrl / tf-agents (K={small})":<30} {f"{ratio:.2f}x":<10} (diagnostic)')
  if small and tfrl_m is not None and f'tfrl K={small}' in results:
    m_small = results[f'tfrl K={small}']
    # time per call = fixed cost + K x time per step: two K give the fixed cost.
    overhead_ms = m_small.ms_per_call - small * 1e3 / tfrl_m.rate
    print(f'{"tfrl Learner.run fixed cost":<30} ~{overhead_ms:.1f} ms per call '
          f'(K={small} runs at {m_small.rate / tfrl_m.rate:.0%} of K={k}) (diagnostic)')


if __name__ == '__main__':
  app.run(main)

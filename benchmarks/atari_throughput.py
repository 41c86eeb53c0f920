"""Atari throughput: tfrl's collection and learner against the raw ALE loop and an
in-memory train loop, with `learners/configs/ppo_atari.gin`'s agent.

Paths (frames are ALE frames: 4 per env step, AtariPreprocessing's frame skip):

  raw            the vector env `tfrl.envs.make(game, num_envs, atari=True)` builds
                 (gymnasium's AtariPreprocessing: 84x84 grey, max-pooled skip of 4, 4
                 stacked frames) stepped with random actions: no policy, no writing.
  collect        `tfrl.actors.Actor` with the PPO agent's collect policy (the Nature
                 CNN, one call per vector step on all envs) and the layout's
                 `SequenceWriter` (unrolls of 129 steps every 128) into a local Reverb
                 table that drops its oldest unrolls (so no consumer is needed).
  collect-nowrite  (diagnostic) the same Actor without a writer.
  collect-workers  the collect path with the envs in --env_workers worker processes
                 (`Experiment.env_workers`): the policy and the writer run while the
                 workers step the games.
  raw-envpool    the raw path on EnvPool (`tfrl.envs.make(..., backend='envpool')`, the
                 'envpool' extra): the same preprocessing in EnvPool's C++ threads
                 (`--envpool_threads`), stepped synchronously with random actions.
  collect-envpool  the collect path on EnvPool (`Experiment.env_backend`): the Actor
                 sends each step's actions and writes the previous step while
                 EnvPool's threads step the games.
  learner        `tfrl.learner.Learner` with the same agent, trained from a local Reverb
                 table holding --fill_unrolls unrolls collected by that Actor, sampled
                 uniformly (each sample reused, so the rate is sustained), batches of
                 the config's 8 unrolls x 128 steps (1,024 env steps, 4,096 frames).
  ceiling        the same agent's `agent.train` in a `tf.while_loop` inside one
                 `tf.function` on one fixed in-memory batch of those unrolls.

Targets: collect >= 50% of raw; learner >= 80% of the ceiling. The training
frames/s against SB3 PPO at the same settings come from benchmarks/solve_time.py's
budget runs (`--algos=ppo_pong,ppo_breakout`, "frames/s while training"; target 2x).

Method as in learner_throughput.py: every path is built and warmed up first, then
--rounds rounds time each path for --seconds; a path's figure is its best round.

Run (from the repository root; needs the 'atari' extra):

    .venv/bin/python benchmarks/atari_throughput.py
    .venv/bin/python benchmarks/atari_throughput.py --game=ALE/Breakout-v5 --seconds=20

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
import reverb
import tensorflow as tf

from learners.configuration import config
from learners.configuration.experiment import Experiment
import tfrl.actors
import tfrl.envs
import tfrl.learner
import tfrl.replay

ALL_PATHS = ('raw', 'collect', 'collect-nowrite', 'collect-workers', 'raw-envpool',
             'collect-envpool', 'learner', 'ceiling')
RAW_PATHS = {'raw', 'raw-envpool'}  # random actions on the envs alone
TARGET_COLLECT_VS_RAW = 0.5
TARGET_LEARNER_VS_CEILING = 0.8
FRAMES_PER_STEP = 4

FLAGS = flags.FLAGS
flags.DEFINE_string('game', 'ALE/Pong-v5', 'The ALE game (Experiment.env_name).')
flags.DEFINE_float('seconds', 15.0, 'Timed budget per path in each round.')
flags.DEFINE_integer('rounds', 2, 'Rounds over all paths; each path reports its best.')
flags.DEFINE_integer('fill_unrolls', 16, "Unrolls in the learner's table.")
flags.DEFINE_integer('iterations', 2, 'Train steps per Learner.run call.')
flags.DEFINE_integer('env_workers', 2, 'Worker processes of the collect-workers path.')
flags.DEFINE_integer('envpool_threads', 0,
                     "EnvPool's threads in the envpool paths (0: EnvPool's choice, one "
                     'per env up to the CPUs this process may use).')
flags.DEFINE_list('paths', list(ALL_PATHS), f'Subset of {",".join(ALL_PATHS)}.')


def frames(m: common.Measurement) -> float:
  """A path's best round in ALE frames per second (its unit is env steps)."""
  return FRAMES_PER_STEP * m.rate


def build_experiment() -> Experiment:
  config.parse(['ppo_atari.gin'], [f"Experiment.env_name = '{FLAGS.game}'"])
  return Experiment()


def dropping_table(name: str, signature, max_size: int, sampler) -> reverb.Table:
  """A table that evicts its oldest items when full: writers never wait on it."""
  return reverb.Table(name, sampler=sampler, remover=reverb.selectors.Fifo(),
                      max_size=max_size, rate_limiter=reverb.rate_limiters.MinSize(1),
                      signature=signature)


def setup(exp: Experiment, stack: contextlib.ExitStack):
  """Builds every path asked for; returns the measurements."""
  layout = exp.layout
  measurements = []
  if set(FLAGS.paths) - RAW_PATHS:  # the raw paths run no agent: they build none
    env = exp.make_env(collect=False)
    stack.callback(env.close)
    train_step = tfrl.learner.new_train_step()
    agent = exp.make_agent(env, train_step)
    signature = layout.item_signature(agent)

  def raw_measurement(name, vector_env, note):
    stack.callback(vector_env.close)
    vector_env.reset(seed=0)

    def raw():
      for _ in range(32):
        vector_env.step(vector_env.action_space.sample())
      return 32 * vector_env.num_envs

    return common.Measurement(name, raw, note)

  if 'raw' in FLAGS.paths:
    measurements.append(raw_measurement('raw', exp.make_env(seed=exp.seed + 1).vector_env,
                                        'random actions, no policy, no writing'))
  if 'raw-envpool' in FLAGS.paths:
    measurements.append(raw_measurement(
        'raw-envpool', make_envpool_env(exp, exp.seed + 5).vector_env,
        'the raw path on EnvPool'))

  def timed_collect(actor):
    def collect():
      before = actor.env_steps
      actor.run(32)
      return actor.env_steps - before
    return collect

  def actor_with_its_table(env):
    """A warmed-up Actor (policy traced, writer open) writing into a table of its own."""
    table = dropping_table(layout.experience_table, signature, FLAGS.fill_unrolls,
                           reverb.selectors.Uniform())
    server = tfrl.replay.ReplayServer([table])
    stack.callback(server.stop)
    stack.callback(env.close)
    actor = tfrl.actors.Actor(env, agent.collect_policy, [layout.make_writer(server.client)])
    stack.callback(actor.close)
    actor.run(exp.layout.unroll_length)
    return actor, server

  fill_server = collect_actor = None
  if {'collect', 'learner', 'ceiling'} & set(FLAGS.paths):
    collect_actor, fill_server = actor_with_its_table(exp.make_env(seed=exp.seed + 2))
    if 'collect' in FLAGS.paths:
      measurements.append(common.Measurement(
          'collect', timed_collect(collect_actor),
          f'{exp.num_envs} envs, Nature CNN collect policy, unrolls of '
          f'{exp.layout.unroll_length + 1} into Reverb'))
  if 'collect-workers' in FLAGS.paths:
    workers_actor, _ = actor_with_its_table(tfrl.envs.make(
        exp.env_name, num_envs=exp.num_envs, seed=exp.seed + 4, atari=True,
        num_workers=FLAGS.env_workers))
    measurements.append(common.Measurement(
        'collect-workers', timed_collect(workers_actor),
        f'the collect path, envs in {FLAGS.env_workers} worker processes'))
  if 'collect-envpool' in FLAGS.paths:
    envpool_actor, _ = actor_with_its_table(make_envpool_env(exp, exp.seed + 6))
    measurements.append(common.Measurement(
        'collect-envpool', timed_collect(envpool_actor),
        'the collect path on EnvPool, stepping while the policy and writer run'))
  if 'collect-nowrite' in FLAGS.paths:
    bare_actor = tfrl.actors.Actor(exp.make_env(seed=exp.seed + 3), agent.collect_policy)
    bare_actor.run(exp.layout.unroll_length)
    measurements.append(common.Measurement('collect-nowrite', timed_collect(bare_actor),
                                    'the same Actor without a writer'))

  if {'learner', 'ceiling'} & set(FLAGS.paths):
    # Fill the learner's table with real unrolls of the collect policy.
    table_size = lambda: fill_server.table_info()[layout.experience_table].current_size
    while table_size() < FLAGS.fill_unrolls:
      collect_actor.run(exp.layout.unroll_length)
      collect_actor.flush()
  batch_steps = exp.batch_size * exp.layout.unroll_length

  if 'ceiling' in FLAGS.paths:
    measurements.append(_ceiling_measurement(exp, env, fill_server.address, batch_steps))
  if 'learner' in FLAGS.paths:
    measurements.append(_learner_measurement(exp, env, train_step, fill_server.address,
                                             batch_steps, stack))
  return measurements


def make_envpool_env(exp: Experiment, seed: int):
  """The job's collect envs on EnvPool (`Experiment.env_backend = 'envpool'`)."""
  options = dict(exp.env_options(), backend='envpool')
  if FLAGS.envpool_threads:
    options['num_threads'] = FLAGS.envpool_threads
  return tfrl.envs.make(exp.env_name, num_envs=exp.num_envs, seed=seed, **options)


def _ceiling_measurement(exp: Experiment, env, address: str,
                         batch_steps: int) -> common.Measurement:
  """The 'ceiling' path: a fresh agent's train steps on one batch from `address`."""
  layout = exp.layout
  ceiling_agent = exp.make_agent(env, tfrl.learner.new_train_step())
  dataset = layout.dataset_fn(address, ceiling_agent)(tf.distribute.InputContext())
  experience, info = next(iter(dataset))
  kwargs = layout.train_inputs_fn(ceiling_agent)(experience, info)
  kwargs = tf.nest.map_structure(tf.identity, kwargs)  # fixed, in memory

  @tf.function(autograph=False)
  def train_loop(iterations):
    first = ceiling_agent.train(**kwargs).loss

    def body(i, unused_loss):
      return i + 1, ceiling_agent.train(**kwargs).loss

    return tf.while_loop(lambda i, _: i < iterations, body, (tf.constant(1), first))[1]

  k = tf.constant(FLAGS.iterations)

  def ceiling():
    train_loop(k)
    return FLAGS.iterations * batch_steps

  ceiling()
  return common.Measurement('ceiling', ceiling, 'agent.train on one fixed in-memory batch')


def _learner_measurement(exp: Experiment, env, train_step: tf.Variable, address: str,
                         batch_steps: int,
                         stack: contextlib.ExitStack) -> common.Measurement:
  """The 'learner' path: a Learner sampling the filled table at `address`."""
  layout = exp.layout
  learner_agent = exp.make_agent(env, train_step)
  root_dir = tempfile.mkdtemp(prefix='tfrl_atari_bench_')
  stack.callback(shutil.rmtree, root_dir, ignore_errors=True)
  learner = tfrl.learner.Learner(
      root_dir, train_step, learner_agent,
      experience_dataset_fn=layout.dataset_fn(address, learner_agent),
      train_inputs_fn=layout.train_inputs_fn(learner_agent),
      checkpoint_interval=0, summary_interval=0)

  def learn():
    before = int(train_step.numpy())
    learner.run(iterations=FLAGS.iterations)
    return (int(train_step.numpy()) - before) * batch_steps

  learn()
  return common.Measurement(
      'learner', learn, f'{FLAGS.fill_unrolls} unrolls in a uniform table, batches of '
      f'{exp.batch_size} x {exp.layout.unroll_length} steps')


def _ratio(label: str, num, den, target: float) -> str:
  if num is None or den is None:
    return common.target_line(label, None, target, '', 28, 8)
  ratio = frames(num) / frames(den)
  return common.target_line(label, ratio, target, f'{ratio:.1%}', 28, 8)


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  common.check_choices('paths', FLAGS.paths, ALL_PATHS)
  exp = build_experiment()
  print(f'Atari throughput on {FLAGS.game}: {exp.num_envs} envs, ppo_atari.gin\'s agent '
        f'(Nature CNN), {FLAGS.rounds} rounds of {FLAGS.seconds:g} s per path, '
        f'{common.machine_and_versions("dm-reverb", "ale-py", "gymnasium")}', flush=True)
  print(common.load_line('start'), flush=True)
  with contextlib.ExitStack() as stack:
    measurements = setup(exp, stack)
    common.time_round_robin(
        measurements, FLAGS.rounds, FLAGS.seconds,
        lambda m: f'{m.name:<16} {FRAMES_PER_STEP * m.rates()[-1]:>9,.0f} frames/s')
  print(common.load_line('end'))
  print()
  print(f'{"path":<16} {"frames/s":>9} {"env steps/s":>12}  note')
  for m in measurements:
    print(f'{m.name:<16} {frames(m):>9,.0f} {frames(m) / FRAMES_PER_STEP:>12,.0f}'
          f'  {m.note}')
  results = {m.name: m for m in measurements}
  print()
  print(_ratio('collect / raw', results.get('collect'), results.get('raw'),
               TARGET_COLLECT_VS_RAW))
  print(_ratio('collect-workers / raw', results.get('collect-workers'), results.get('raw'),
               TARGET_COLLECT_VS_RAW))
  for name in ('collect', 'collect-workers'):
    if 'collect-envpool' in results and name in results:
      ratio = frames(results['collect-envpool']) / frames(results[name])
      print(f'{"collect-envpool / " + name:<28} {ratio:.2f}x')
  if 'raw-envpool' in results and 'raw' in results:
    ratio = frames(results['raw-envpool']) / frames(results['raw'])
    print(f'{"raw-envpool / raw":<28} {ratio:.2f}x')
  print(_ratio('learner / ceiling', results.get('learner'), results.get('ceiling'),
               TARGET_LEARNER_VS_CEILING))
  if 'collect' in results and 'collect-nowrite' in results:
    share = frames(results['collect']) / frames(results['collect-nowrite'])
    print(f'{"collect with writer / without":<28} {share:.1%} (diagnostic: the writer)')


if __name__ == '__main__':
  app.run(main)

"""What RLPD's layer-normalized critic costs: tfrl's normalization against Keras'.

Two measurements in one run, each path timed in turn over --rounds rounds of
--seconds, its best round kept (other jobs on the machine only slow a round down):

  layer   one hidden layer, Dense(--units) then a normalization, forward and backward
          on a fixed [--batch, --units] input, --iterations passes in a
          `tf.while_loop` inside one `tf.function`; the normalization is
            none    no normalization (the plain critic's layer),
            tfrl    `tfrl.networks.critics._LayerNorm` (four ops),
            keras   `tf.keras.layers.LayerNormalization(epsilon=1e-3)` (the same
                    function through Keras' fused kernel).
  sac     whole SAC train steps/s (`tfrl.agents.sac.create_sac_agent`, HalfCheetah's
          specs: 17-dim observations, 6-dim actions; 256x256 actor and critic) on one
          fixed in-memory batch of --batch transitions, --iterations steps per
          `tf.function` call, with the plain critic, `critic_layer_norm=True`, and the
          same layer-normalized critic with Keras' layer swapped in.

It prints each path's rate and its ratio to the plain path, and tfrl's against Keras'.
Both normalizations compute the same values (tests/agents/test_builders.py checks
tfrl's against a numpy reference).

    .venv/bin/python benchmarks/layer_norm.py
    .venv/bin/python benchmarks/layer_norm.py --paths=layer --seconds=2

Results: docs/results/, written by benchmarks/results_pages.py from the outputs kept in
benchmarks/runs/ (a run's output as printed, <name>.txt, beside its <name>.meta.json).
"""
# First: benchmarks/common.py puts the repository on sys.path and quiets TF's C++ logs.
import common  # pylint: disable=g-bad-import-order
from unittest import mock

import tfrl  # TensorFlow, tf-agents and Reverb without their start-up noise
from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl.agents import sac
from tfrl.networks import critics

FLAGS = flags.FLAGS
flags.DEFINE_list('paths', ['layer', 'sac'], 'Measurements: layer, sac.')
flags.DEFINE_integer('batch', 256, 'Rows per pass (layer) and per train step (sac).')
flags.DEFINE_integer('units', 256, 'The hidden layer width (layer).')
flags.DEFINE_integer('iterations', 100, 'Passes or train steps per tf.function call.')
flags.DEFINE_float('seconds', 3.0, 'Seconds per path per round.')
flags.DEFINE_integer('rounds', 3, 'Rounds (each path keeps its best).')
flags.DEFINE_integer('seed', 0, 'Seed of the weights and the batch.')

NORMS = {
    'none': lambda: tf.keras.layers.Lambda(tf.identity),
    'tfrl': critics._LayerNorm,  # pylint: disable=protected-access
    'keras': lambda: tf.keras.layers.LayerNormalization(epsilon=1e-3),
}


def _looped(step_fn):
  """A `call()` that runs `step_fn` --iterations times in one tf.function call."""

  @tf.function(autograph=False)
  def loop(iterations):
    # The step's result is carried through the loop: unused, Grappler would prune it.
    return tf.while_loop(lambda i, _: i < iterations,
                         lambda i, total: (i + 1, total + tf.cast(step_fn(), tf.float32)),
                         [tf.constant(0), tf.constant(0.0)])

  k = tf.constant(FLAGS.iterations)

  def call():
    loop(k)
    return FLAGS.iterations

  call()  # traces
  return call


def layer_measurements():
  """Forward and backward passes of one hidden layer, per normalization."""
  rng = np.random.default_rng(FLAGS.seed)
  x = tf.constant(rng.standard_normal([FLAGS.batch, FLAGS.units]), tf.float32)
  measurements = []
  for name, make_norm in NORMS.items():
    dense, norm = tf.keras.layers.Dense(FLAGS.units), make_norm()
    norm(dense(x))  # builds both layers' weights

    def step(dense=dense, norm=norm):
      with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.nn.relu(norm(dense(x))))
      grads = tape.gradient(y, dense.trainable_variables + norm.trainable_variables)
      return tf.add_n([tf.reduce_sum(g) for g in grads])

    measurements.append(common.Measurement(f'layer {name}', _looped(step), unit='passes'))
  return measurements


def _fixed_batch(agent):
  """One [--batch, 2] Trajectory of random values in the agent's specs (rewards from
  a unit normal: the reward spec is unbounded)."""
  tf.random.set_seed(FLAGS.seed)
  experience = tensor_spec.sample_spec_nest(agent.collect_data_spec,
                                            outer_dims=[FLAGS.batch, 2])
  mid = tf.fill([FLAGS.batch, 2], ts.StepType.MID)
  return experience._replace(step_type=mid, next_step_type=mid,
                             reward=tf.random.normal([FLAGS.batch, 2]),
                             discount=tf.ones([FLAGS.batch, 2]))


def sac_measurements():
  """Whole SAC train steps, per critic."""
  observation = tensor_spec.BoundedTensorSpec([17], tf.float32, -10.0, 10.0)
  action = tensor_spec.BoundedTensorSpec([6], tf.float32, -1.0, 1.0)
  time_step_spec = ts.time_step_spec(observation)
  measurements = []
  for name in ('plain', 'tfrl', 'keras'):
    tf.random.set_seed(FLAGS.seed)
    train_step = tf.Variable(0, dtype=tf.int64)
    # The Keras variant: `LayerNormCritic` (and the copies SacAgent makes of it for the
    # twin and targets) builds its hidden layers' normalization from the layer patched in.
    # pylint: disable=protected-access
    norm = NORMS['keras'] if name == 'keras' else critics._LayerNorm
    with mock.patch.object(critics, '_LayerNorm', norm):
      agent = sac.create_sac_agent(time_step_spec, action, train_step,
                                   critic_layer_norm=name != 'plain')
    twin_norms = getattr(agent._critic_network_2, '_hidden', [])[1::2]
    print(f'sac {name}: the twin critic normalizes with '
          f'{sorted({type(n).__name__ for n in twin_norms}) or "nothing"}', flush=True)
    experience = _fixed_batch(agent)
    measurements.append(common.Measurement(
        f'sac {name}', _looped(lambda a=agent, e=experience: a.train(e).loss)))
  return measurements


def main(argv):
  del argv
  common.check_choices('--paths', FLAGS.paths, ('layer', 'sac'))
  print(common.machine_and_versions('tensorflow', 'tf-agents'), flush=True)
  groups = []
  if 'layer' in FLAGS.paths:
    groups.append(layer_measurements())
  if 'sac' in FLAGS.paths:
    groups.append(sac_measurements())
  for group in groups:
    common.time_round_robin(group, FLAGS.rounds, FLAGS.seconds,
                            lambda m: f'{m.name:<12} {m.rate:10.1f} {m.unit}/s')
  print(f'\nbest of {FLAGS.rounds} rounds of {FLAGS.seconds:g} s; '
        f'batch {FLAGS.batch}, {FLAGS.iterations} per tf.function call')
  for group in groups:
    measurement, base = group[0].name.split()  # 'layer none', 'sac plain'
    by_name = {m.name.split()[-1]: m for m in group}
    for m in group:
      print(f'{m.name:<12} {m.rate:10.1f} {m.unit}/s  {1e3 / m.rate:8.3f} ms each  '
            f'{m.rate / group[0].rate:5.2f}x {base}')
    print(f'{measurement}: tfrl / keras {by_name["tfrl"].rate / by_name["keras"].rate:.2f}x')


if __name__ == '__main__':
  app.run(main)

"""PPO's start-up cost under a tf.distribute strategy: the unrolled graph vs the while loop.

Under a strategy, `PpoAgent` unrolls its num_epochs x num_minibatches gradient steps in
the graph (MirroredStrategy cannot synchronize replicas inside a tf.while_loop); on one
device they run in a while loop. This times `Learner.compile()` (trace + instantiate the
train function, no training) for `ppo_cartpole.gin`'s agent (separate torsos of 64-64,
4 minibatches per epoch) on batches of 8 unrolls of 32 steps, for several epoch counts:

  while loop   default strategy (the one-device path)
  unrolled     MirroredStrategy over 2 logical CPUs (the strategy path)

and one `Learner.run(10)` after it, to show that the steady state is unaffected.

    .venv/bin/python benchmarks/ppo_compile.py
    .venv/bin/python benchmarks/ppo_compile.py --epochs=5,20

Results: docs/results/, written by benchmarks/results_pages.py from the outputs kept in
benchmarks/runs/ (a run's output as printed, <name>.txt, beside its <name>.meta.json).
"""
import os
import tempfile
import time

# First: benchmarks/common.py puts the repository on sys.path and quiets TF's C++ logs.
import common  # pylint: disable=g-bad-import-order
import tfrl  # TensorFlow, tf-agents and Reverb without their start-up noise
from absl import app
from absl import flags
from absl import logging
import numpy as np

from tfrl import distribute

FLAGS = flags.FLAGS
flags.DEFINE_list('epochs', ['5', '20'], 'num_epochs values (4 minibatches each).')
UNROLL, BATCH, MINIBATCHES = 32, 8, 4


def unrolls():
  """A batch-major [BATCH, UNROLL + 1] CartPole Trajectory with behaviour policy info."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import trajectory  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(0)
  shape = (BATCH, UNROLL + 1)
  return tf.nest.map_structure(tf.constant, trajectory.Trajectory(
      step_type=np.ones(shape, np.int32), observation=rng.randn(*shape, 4).astype(np.float32),
      action=rng.randint(0, 2, shape).astype(np.int64),
      policy_info={'logits': rng.randn(*shape, 2).astype(np.float32),
                   'value': rng.randn(*shape).astype(np.float32)},
      next_step_type=np.ones(shape, np.int32), reward=np.ones(shape, np.float32),
      discount=np.ones(shape, np.float32)))


def time_compile(strategy, epochs: int):
  """(compile seconds, seconds of 10 train calls) for a fresh PPO agent and Learner."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfrl import envs  # pylint: disable=g-import-not-at-top
  from tfrl import learner as learner_lib  # pylint: disable=g-import-not-at-top
  from tfrl.agents import ppo  # pylint: disable=g-import-not-at-top
  env = envs.make('CartPole-v1', num_envs=1)
  with strategy.scope():
    step = learner_lib.new_train_step()
    agent = ppo.create_ppo_agent(env.time_step_spec(), env.action_spec(), step,
                                 num_epochs=epochs, num_minibatches=MINIBATCHES,
                                 shared_torso=False)
  data = unrolls()

  def dataset_fn(context):
    rows = context.get_per_replica_batch_size(BATCH)
    return tf.data.Dataset.from_tensor_slices({'experience': data}).batch(
        rows, drop_remainder=True).map(lambda x: (x, ())).repeat()

  learner = learner_lib.Learner(
      tempfile.mkdtemp(), step, agent, experience_dataset_fn=dataset_fn,
      strategy=strategy, checkpoint_interval=0, summary_interval=0,
      use_kwargs_in_agent_train=True)
  start = time.perf_counter()
  learner.compile()
  compile_s = time.perf_counter() - start
  start = time.perf_counter()
  learner.run(10)
  return compile_s, time.perf_counter() - start


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')  # MirroredStrategy logs every collective it builds
  logging.set_verbosity(logging.ERROR)
  devices = distribute.split_cpu(2)  # before TensorFlow creates its devices
  strategies = {'while loop': distribute.get_strategy('default'),
                'unrolled': distribute.get_strategy('mirrored', devices=devices)}
  print(f'PPO compile time: batches of {BATCH} unrolls x {UNROLL} steps, '
        f'{MINIBATCHES} minibatches per epoch, {os.cpu_count()} CPUs; load average '
        f'{common.load_average()}')
  print(f'{"path":<12} {"grad steps":>10} {"compile s":>10} {"s/step":>7} '
        f'{"10 calls s":>10}')
  for epochs in [int(e) for e in FLAGS.epochs]:
    results = {}
    for name, strategy in strategies.items():
      compile_s, run_s = time_compile(strategy, epochs)
      steps = epochs * MINIBATCHES
      results[name] = compile_s
      print(f'{name:<12} {steps:>10} {compile_s:>10.1f} {compile_s / steps:>7.2f} '
            f'{run_s:>10.2f}', flush=True)
    print(f'  unrolled / while loop compile time: '
          f'{results["unrolled"] / results["while loop"]:.1f}x')


if __name__ == '__main__':
  app.run(main)

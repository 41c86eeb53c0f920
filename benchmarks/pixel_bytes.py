"""What Reverb stores per env step of a frame-stacked pixel env, per data layout.

Fills an embedded server's tables with `--env_steps` env steps through tfrl's own
writers (`Experiment(...).layout.make_writer`, the agent's collect policy acting), then
writes a Reverb checkpoint and reads its chunks: every chunk the tables' items
reference, as the server holds it in memory (Reverb keeps chunks compressed; the
checkpoint stores the same ChunkData protos, inside a ZLIB tfrecord file). For each
layout it prints

  the chunks, and how many vector steps an observation chunk holds (Reverb's
    auto-tuned chunk length);
  stored bytes per env step (compressed, as held) and uncompressed;
  the observation's share of them (uint8 tensors of image rank);
  those bytes against one raw frame (H x W x C) and one stacked observation (k frames).

Layouts: 'sequence' (PPO/IMPALA: `SequenceWriter(T+1, stride T)`) and 'transition'
(DQN: `NStepTransitionWriter`, each row holding [o_t, o_t+n]).

Frames: --env=noise gives uniform random uint8 frames (incompressible: the layout's
worst case, what the uncompressed figures show anyway); --env=catch gives PixelCatch
drawn at 84 x 84 (12 x 12 cells of 7 pixels: mostly black, so it compresses well, like
many game frames).

    .venv/bin/python benchmarks/pixel_bytes.py
    .venv/bin/python benchmarks/pixel_bytes.py --env=catch --frame_stack=4 --n_step=3

Results: docs/results/, written by benchmarks/results_pages.py from the outputs kept in
benchmarks/runs/ (a run's output as printed, <name>.txt, beside its <name>.meta.json).
"""
import collections
import functools
import os
import tempfile

# First: benchmarks/common.py puts the repository on sys.path and quiets TF's C++ logs.
import common  # pylint: disable=g-bad-import-order
import tfrl  # TensorFlow, tf-agents and Reverb without their start-up noise
from absl import app
from absl import flags
import gymnasium as gym
import numpy as np

FLAGS = flags.FLAGS
flags.DEFINE_enum('env', 'noise', ['noise', 'catch'], 'Frames: random noise or catch.')
flags.DEFINE_integer('frame_stack', 4, 'Frames stacked per observation (1: none).')
flags.DEFINE_integer('env_steps', 4096, 'Env steps written per layout.')
flags.DEFINE_integer('num_envs', 16, 'Envs per actor (one item per vector step).')
flags.DEFINE_integer('unroll_length', 16, "Transitions per unroll ('sequence').")
flags.DEFINE_integer('n_step', 1, "Steps per transition ('transition').")
flags.DEFINE_list('layouts', ['sequence', 'transition'], 'Layouts to measure.')

FRAME = (84, 84, 1)
NOISE_ID = 'tfrl_bench/NoiseFrames-v0'
CATCH_ID = 'tfrl_bench/PixelCatch84-v0'


class NoiseFrames(gym.Env):
  """Uniform random uint8 frames [84, 84, 1], 3 actions, episodes of 100 steps."""

  observation_space = gym.spaces.Box(0, 255, FRAME, np.uint8)
  action_space = gym.spaces.Discrete(3)

  def __init__(self):
    self._t = 0

  def _frame(self):
    return self.np_random.integers(0, 256, FRAME, dtype=np.uint8)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._t = 0
    return self._frame(), {}

  def step(self, action):
    self._t += 1
    return self._frame(), 0.0, self._t >= 100, False, {}


def register_envs() -> None:
  if NOISE_ID not in gym.registry:
    gym.register(NOISE_ID, entry_point=NoiseFrames)
  if CATCH_ID not in gym.registry:
    gym.register(CATCH_ID, entry_point='tfrl.envs.toy:PixelCatch',
                 kwargs=dict(rows=12, columns=12, cell_size=7))


ChunkBytes = collections.namedtuple(
    'ChunkBytes', ['chunks', 'stored', 'uncompressed', 'observation_stored',
                   'observation_uncompressed', 'observation_chunks',
                   'observation_chunk_steps', 'file_bytes'])


def checkpoint_chunk_bytes(checkpoint_path: str) -> ChunkBytes:
  """Sums the chunks of a Reverb checkpoint: as held (compressed) and uncompressed.

  A tensor is counted as observation when it is uint8 of rank >= 4 (a chunk's
  [steps, envs, H, W, C] images, [steps, envs, 2, H, W, C] for transition pairs).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from reverb.cc import schema_pb2  # pylint: disable=g-import-not-at-top
  path = os.path.join(checkpoint_path, 'chunks.tfrecord')
  chunks = stored = uncompressed = observation_stored = observation_uncompressed = 0
  observation_chunks = observation_chunk_steps = 0
  for record in tf.data.TFRecordDataset(path, compression_type='ZLIB').as_numpy_iterator():
    chunk = schema_pb2.ChunkData.FromString(record)
    chunks += 1
    stored += chunk.data.ByteSize()
    uncompressed += chunk.data_uncompressed_size
    for tensor in chunk.data.tensors:
      shape = [d.size for d in tensor.tensor_shape.dim]
      if tf.as_dtype(tensor.dtype) == tf.uint8 and len(shape) >= 4:
        observation_stored += tensor.ByteSize()
        observation_uncompressed += int(np.prod(shape))
        observation_chunks += 1
        observation_chunk_steps += shape[0]
  return ChunkBytes(chunks, stored, uncompressed, observation_stored,
                    observation_uncompressed, observation_chunks, observation_chunk_steps,
                    os.path.getsize(path))


def measure(layout_name: str) -> dict:
  """Fills a fresh server through `layout_name`'s writer; returns the figures."""
  from learners.configuration.experiment import Experiment  # pylint: disable=g-import-not-at-top
  from tfrl import actors  # pylint: disable=g-import-not-at-top
  from tfrl import replay  # pylint: disable=g-import-not-at-top
  from tfrl.agents import dqn  # pylint: disable=g-import-not-at-top
  from tfrl.agents import ppo  # pylint: disable=g-import-not-at-top

  num_envs, env_steps = FLAGS.num_envs, FLAGS.env_steps
  if layout_name == 'sequence':
    settings = dict(layout_settings=dict(unroll_length=FLAGS.unroll_length,
                                         queue_capacity=2 * env_steps),
                    agent_fn=functools.partial(ppo.create_ppo_agent, cnn='nature'))
  else:
    settings = dict(layout_settings=dict(n_step=FLAGS.n_step, capacity=2 * env_steps),
                    agent_fn=functools.partial(dqn.create_dqn_agent, cnn='nature'))
  exp = Experiment(env_name=NOISE_ID if FLAGS.env == 'noise' else CATCH_ID,
                   frame_stack=FLAGS.frame_stack, num_envs=num_envs, batch_size=num_envs,
                   **settings)
  _, agent = exp.build_agent()
  checkpoint_dir = tempfile.mkdtemp(prefix='pixel_bytes_')
  with replay.ReplayServer(exp.layout.tables(agent), checkpoint_dir=checkpoint_dir) as server:
    env = exp.make_env()
    writer = exp.layout.make_writer(server.client)
    actor = actors.Actor(env, agent.collect_policy, [writer])
    actor.run(-(-env_steps // num_envs))
    writer.close()
    env.close()
    items = server.client.server_info()[exp.layout.experience_table].current_size
    figures = checkpoint_chunk_bytes(server.checkpoint())
  spec = env.observation_spec()
  # Env steps the stored items cover (steps written after the last item are in no
  # chunk the checkpoint holds).
  covered = items * exp.layout.env_steps_per_item
  if layout_name == 'sequence':  # the first unroll's extra (bootstrap) step
    covered += num_envs
  return dict(layout=layout_name, items=items, env_steps=covered,
              observation_bytes=int(np.prod(spec.shape)),
              frame_bytes=int(np.prod(spec.shape)) // FLAGS.frame_stack, **figures._asdict())


def main(argv):
  del argv
  common.check_choices('layouts', FLAGS.layouts, ('sequence', 'transition'))
  register_envs()
  print(f'# pixel_bytes: env={FLAGS.env} frames {FRAME} x {FLAGS.frame_stack} stacked, '
        f'{FLAGS.num_envs} envs, ~{FLAGS.env_steps} env steps per layout, unroll '
        f'{FLAGS.unroll_length}, n_step {FLAGS.n_step}; '
        f'{common.machine_and_versions("dm-reverb", "gymnasium")}')
  header = ('layout', 'env steps', 'chunks', 'steps/obs chunk', 'B/step held', 'B/step raw', 'obs B/step held',
            'obs B/step raw', 'obs raw / frame', 'obs raw / stack', 'obs held / stack')
  print(' | '.join(header))
  for layout_name in FLAGS.layouts:
    r = measure(layout_name)
    steps = r['env_steps']
    row = (r['layout'], steps, r['chunks'],
           f"{r['observation_chunk_steps'] / max(r['observation_chunks'], 1):.1f}",
           f"{r['stored'] / steps:.0f}",
           f"{r['uncompressed'] / steps:.0f}", f"{r['observation_stored'] / steps:.0f}",
           f"{r['observation_uncompressed'] / steps:.0f}",
           f"{r['observation_uncompressed'] / steps / r['frame_bytes']:.2f}",
           f"{r['observation_uncompressed'] / steps / r['observation_bytes']:.2f}",
           f"{r['observation_stored'] / steps / r['observation_bytes']:.2f}")
    print(' | '.join(str(x) for x in row), flush=True)


if __name__ == '__main__':
  app.run(main)

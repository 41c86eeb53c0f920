"""tfrl.replay.fallback: the server keeps its previous checkpoint and falls back to it."""
import os

import numpy as np
import tensorflow as tf

from tfrl import replay
from tfrl.replay import fallback

SIGNATURE = {'observation': tf.TensorSpec((2,), tf.float32)}


def _tables():
  return [replay.uniform_table('replay', 100, SIGNATURE)]


def _insert(server, value):
  server.client.insert({'observation': np.array([value, value], np.float32)},
                       priorities={'replay': 1.0})


def _size(server):
  return int(server.table_info()['replay'].current_size)


def _truncate(checkpoint):
  """Cuts each data file of a checkpoint in half (as a full disk or a kill would)."""
  for name in os.listdir(checkpoint):
    path = os.path.join(checkpoint, name)
    if name != 'DONE':
      with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) // 2)


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(reverb_server_factory,
                                                               tmp_path, caplog):
  checkpoint_dir = str(tmp_path / 'reverb')
  server = reverb_server_factory(_tables(), checkpoint_dir=checkpoint_dir)
  _insert(server, 1.0)
  first = server.checkpoint()
  _insert(server, 2.0)
  newest = server.checkpoint()
  server.stop()
  # Reverb itself kept only the newest; the previous one is kept beside it.
  assert replay.latest_checkpoint(checkpoint_dir) == newest
  kept = replay.latest_checkpoint(checkpoint_dir + fallback.PREVIOUS_SUFFIX)
  assert os.path.basename(kept) == os.path.basename(first)

  _truncate(newest)
  restarted = reverb_server_factory(_tables(), checkpoint_dir=checkpoint_dir)
  assert _size(restarted) == 1  # the previous checkpoint's one item
  moved = os.path.join(checkpoint_dir + fallback.UNREADABLE_SUFFIX,
                       os.path.basename(newest))
  assert os.path.isdir(moved)
  assert f'Reverb checkpoint {newest} could not be read' in caplog.text
  assert moved in caplog.text


def test_without_a_previous_checkpoint_it_starts_empty(reverb_server_factory, tmp_path,
                                                       caplog):
  checkpoint_dir = str(tmp_path / 'reverb')
  server = reverb_server_factory(_tables(), checkpoint_dir=checkpoint_dir)
  _insert(server, 1.0)
  only = server.checkpoint()
  server.stop()
  _truncate(only)
  restarted = reverb_server_factory(_tables(), checkpoint_dir=checkpoint_dir)
  assert _size(restarted) == 0
  assert 'starting from empty tables' in caplog.text


def test_discard_removes_the_checkpoints_the_previous_and_the_unreadable(tmp_path):
  checkpoint_dir = str(tmp_path / 'reverb')
  for suffix in ('', fallback.PREVIOUS_SUFFIX, fallback.UNREADABLE_SUFFIX):
    os.makedirs(os.path.join(checkpoint_dir + suffix, 'ckpt'))
  (tmp_path / 'other').mkdir()
  fallback.discard(checkpoint_dir)
  assert sorted(os.listdir(tmp_path)) == ['other']

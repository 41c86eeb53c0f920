"""Which of a trainer's checkpoints are whole: the `ckpt-N` prefixes that have their
index file (TensorFlow writes it last). A leaf of tfrl: `tfrl.checkpoints` restores
from them, `tfrl.run_dir` asks whether a root_dir has any."""
import os
import re
from typing import List

import tensorflow as tf

_INDEX = re.compile(r'^ckpt-(\d+)\.index$')


def checkpoint_prefixes(directory: str) -> List[str]:
  """The `ckpt-N` prefixes in `directory` with an index file, newest (highest N) first."""
  if not tf.io.gfile.isdir(directory):
    return []
  found = [(int(m.group(1)), os.path.join(directory, name[:-len('.index')]))
           for name in tf.io.gfile.listdir(directory) for m in [_INDEX.match(name)] if m]
  return [prefix for _, prefix in sorted(found, reverse=True)]

"""tfrl's programs: train_eval (one process), and reverb_server, collect, train, eval and
launch (separate programs)."""
# First: a program started by the launcher ends with it, even if killed before TF loads.
from learners import child_process as _child_process
_child_process.die_with_parent_if_asked()
# Before any program imports TensorFlow: tfrl imports it without its start-up noise.
import tfrl  # pylint: disable=unused-import,wrong-import-position

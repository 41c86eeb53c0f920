"""tfrl's programs: train_eval (one process), and reverb_server, collect, train, eval and
launch (separate programs)."""
# First: a program started by the launcher ends with it, even if killed before TF loads.
from learners import child_process as _child_process
_child_process.die_with_parent_if_asked()
# TensorFlow is not imported here: a program parses its flags (and answers --help)
# first. Each module that needs it imports `tfrl` before it, which imports TensorFlow
# without its start-up noise.

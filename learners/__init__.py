"""tfrl's programs: train_eval (one process), and reverb_server, collect, train, eval and
launch (separate programs)."""
# Before any program imports TensorFlow: tfrl imports it without its start-up noise.
import tfrl  # pylint: disable=unused-import

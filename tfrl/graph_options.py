"""Graph optimizer settings that tfrl's compiled train steps rely on.

tfrl turns off one of TensorFlow's graph rewrites, Grappler's dependency optimizer, in
any process that builds a `Learner`. With it on, a train step whose losses read variables
that the same step then updates (SAC's and CQL's critics: their Q-values for the loss
are read, then the optimizer applies the critic gradients) gave results that depend on
thread timing: of 30 default-strategy runs of the same three CQL-SAC steps (fixed data,
weights and sampling noise; six processes at once on two cores), 7 reported different
losses, some from the first step on; with the optimizer off, 30 of 30 were identical
(and so were 12 of 12 with every Grappler pass off, or with one inter-op thread). The
optimized graph still orders each read before the update, so the race lies below the
graph (TensorFlow 2.15's executor), and turning the pass off is a measured workaround,
not an explanation. The pass only prunes redundant control edges; its cost is measured
in docs/results/throughput.md ("Learner: Grappler's dependency optimizer off and on").
"""
import tensorflow as tf

_SETTING = 'dependency_optimization'


def keep_train_step_order() -> None:
  """Turns Grappler's dependency optimizer off for the rest of this process.

  Process-wide (TensorFlow reads the setting when it instantiates a function), so call
  it before the train functions are first run; `Learner` does in its constructor.
  """
  if tf.config.optimizer.get_experimental_options().get(_SETTING) is not False:
    tf.config.optimizer.set_experimental_options({_SETTING: False})

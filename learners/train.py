r"""The train program: the Learner fed from a Reverb server, pushing variables back.

    python -m learners.train --root_dir=runs/job --reverb_address=host:8000 \
      --gin_file=dqn_cartpole.gin [--strategy=mirrored]

After every `Learner.run` (Experiment.train_steps_per_iteration steps) it pushes the
policy variables and train step to the server's variables table, where collectors and
the evaluator pick them up. Checkpoints (root_dir/train/checkpoints) and policy exports
(root_dir/policies) run from triggers; a restarted trainer resumes from the latest
checkpoint. Under --strategy=multi_worker each worker runs this program with its own
TF_CONFIG; the chief pushes variables and exports, the others checkpoint under
root_dir/worker_<i>. SIGTERM/SIGINT stop it after the current run with a checkpoint.
"""
import os
import threading
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from learners import config
from learners import process
from learners.experiment import Experiment
from tfrl import distribute
from tfrl import replay
from tfrl import triggers

config.define_common_flags()
flags.DEFINE_string('reverb_address', 'localhost:8000', 'host:port of the Reverb server.')
flags.DEFINE_enum('strategy', 'default', list(distribute.STRATEGIES),
                  'default | mirrored (local GPUs) | multi_worker (TF_CONFIG) | tpu.')
flags.DEFINE_string('tpu', None, 'TPU name or address, for --strategy=tpu.')
flags.DEFINE_float('log_interval_s', 10.0, 'Seconds between progress lines.')
FLAGS = flags.FLAGS


def _worker_role(strategy: tf.distribute.Strategy):
  """(is_chief, task_id) of this process in a multi-worker cluster."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True, 0
  task_type, task_id = resolver.task_type, resolver.task_id or 0
  return task_type == 'chief' or (task_type == 'worker' and task_id == 0 and
                                  'chief' not in resolver.cluster_spec().as_dict()), task_id


def train(root_dir: str, address: str, strategy: tf.distribute.Strategy,
          stop_event: threading.Event) -> int:
  """Trains until the step budget or a stop; returns the final train step."""
  experiment = Experiment()
  is_chief, task_id = _worker_role(strategy)
  job_dir = root_dir if is_chief else os.path.join(root_dir, f'worker_{task_id}')
  train_step, agent = experiment.build_agent(strategy)
  replay.wait_for_server(address)
  replay.check_table_signature(address, experiment.experience_table,
                              experiment.item_signature(agent))
  variables = replay.VariableContainer(address,
                                       experiment.pushed_variables(agent, train_step))
  learner_triggers, policy_trigger = [], None
  if is_chief:
    policy_trigger = triggers.PolicySavedModelTrigger(
        root_dir, agent, train_step, experiment.policy_checkpoint_interval)
    learner_triggers = [policy_trigger]
  learner = experiment.make_learner(job_dir, address, agent, train_step, strategy,
                                    triggers=learner_triggers)
  if is_chief:
    variables.push()
  # Build the train function while the collectors (now released by the push) fill the
  # table, rather than in the first run().
  learner.compile()
  start_step, start_time, last_log = learner.train_step_numpy, time.monotonic(), 0.0
  logging.info('Trainer (chief=%s) from train step %d to %d.', is_chief, start_step,
               experiment.num_train_steps)
  while learner.train_step_numpy < experiment.num_train_steps and not stop_event.is_set():
    iterations = min(experiment.train_steps_per_iteration,
                     experiment.num_train_steps - learner.train_step_numpy)
    loss_info = learner.run(iterations=iterations)
    if is_chief:
      variables.push()
    if time.monotonic() - last_log >= FLAGS.log_interval_s:
      last_log = time.monotonic()
      step = learner.train_step_numpy
      logging.info('train step %d | loss %.4f | %.0f train steps/s', step,
                   float(np.mean(loss_info.loss)),
                   (step - start_step) / max(time.monotonic() - start_time, 1e-9))
  learner.save_checkpoint()
  if policy_trigger is not None:
    policy_trigger.save_saved_models()
  logging.info('Trainer stopped at train step %d.', learner.train_step_numpy)
  return learner.train_step_numpy


def main(argv):
  del argv
  # The strategy first: MultiWorkerMirroredStrategy must exist before any other op.
  strategy = distribute.get_strategy(FLAGS.strategy, tpu=FLAGS.tpu)
  config.parse_from_flags()
  try:
    process.run_until_signal(
        lambda stop_event: train(FLAGS.root_dir, FLAGS.reverb_address, strategy,
                                 stop_event), 'trainer')
  except (replay.ReplayServerUnreachableError, replay.SpecMismatchError) as e:
    raise SystemExit(f'error: {e}') from e


def run_main():
  flags.mark_flag_as_required('root_dir')
  app.run(main)


if __name__ == '__main__':
  run_main()

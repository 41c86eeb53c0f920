r"""Trains an agent in one process: embedded Reverb server, batched actor, Learner.

    python -m learners.train_eval --root_dir=runs/dqn \
      --gin_file=learners/configs/dqn_cartpole.gin --gin_bindings='Experiment.seed=1'

Each iteration collects `collect_steps_per_iteration` vector steps (num_envs env steps
each) and then runs `train_steps_per_iteration` train steps in one compiled call, so the
ratio of training to collection is fixed by configuration, not by process speeds. Every
`eval_interval` train steps the greedy policy plays `num_eval_episodes` episodes and a
progress line is logged. Re-running with the same root_dir resumes from the latest
checkpoint. The greedy policy's SavedModel ends up in root_dir/policies/greedy_policy.
"""
import contextlib
import dataclasses
import os
import sys
import time
from typing import Any, Callable, Dict, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import gin
import tensorflow as tf

from tf_agents.policies import random_tf_policy
from tfrl import actors
from tfrl import distribute
from tfrl import learner as learner_lib
from tfrl import replay
from tfrl import triggers
from learners import config
from learners.experiment import Experiment

SAMPLE_TIMEOUT_MS = 60_000


@gin.configurable
def train_eval(root_dir: str, strategy: str = 'default',
               experiment: Optional[Experiment] = None,
               on_evaluation: Optional[Callable[[Dict[str, Any]], None]] = None
               ) -> Dict[str, Any]:
  """Trains, evaluates and exports in one process; returns the final figures.

  Args:
    root_dir: where checkpoints, summaries and policies go.
    strategy: 'default' | 'mirrored' | 'multi_worker' | 'tpu' (see tfrl.distribute).
    experiment: the settings (default: `Experiment()` as bound in gin).
    on_evaluation: called after each evaluation with its history row (train_step,
      env_steps, eval_return, seconds), e.g. to drive a notebook's progress bar.

  Returns:
    dict with train_step, env_steps, eval_return (last evaluation), reached_target,
    greedy_policy_dir, train_seconds (from the first train step), history (evals).
  """
  exp = experiment or Experiment()
  tf.random.set_seed(exp.seed)
  with contextlib.ExitStack() as cleanup:  # on any exit, errors included
    env = exp.make_env()
    cleanup.callback(env.close)
    eval_env = exp.make_eval_env()
    cleanup.callback(eval_env.close)
    strategy_obj = distribute.get_strategy(strategy)
    with strategy_obj.scope():
      train_step = learner_lib.new_train_step()
      agent = exp.make_agent(env, train_step)
    # One process alternates collection and training, so the table has no ratio limiter
    # (it could block the learner while the actor is idle): the ratio is fixed by
    # collect/train steps per iteration instead.
    server = replay.ReplayServer(exp.experience_tables(agent, samples_per_insert=None))
    cleanup.callback(server.stop)
    writer = exp.make_writer(server.client)
    cleanup.callback(writer.abandon)  # after a normal end's close(), nothing to do
    collect_actor = actors.Actor(env, agent.collect_policy, [writer],
                                 policy_version=train_step,
                                 summary_dir=os.path.join(root_dir, 'collect'))
    evaluator = actors.Evaluator(eval_env, triggers.greedy(agent),
                                 exp.num_eval_episodes, seed=exp.seed + 10_000)
    env_steps_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    eval_return_var = tf.Variable(float('nan'), dtype=tf.float32, trainable=False)
    policy_trigger = triggers.PolicySavedModelTrigger(
        root_dir, agent, train_step, exp.policy_checkpoint_interval,
        metadata={'env_steps': env_steps_var, 'eval_return': eval_return_var})
    # A sample that waits this long means the loop's own bookkeeping went wrong (this
    # process is the only collector): fail with a message instead of hanging.
    learner = exp.make_learner(root_dir, server.address, agent, train_step, strategy_obj,
                               sample_timeout_ms=SAMPLE_TIMEOUT_MS,
                               triggers=[policy_trigger])
    # Graph building belongs to start-up (as the actors' and the evaluator's do): a
    # broken train step fails here, before any collection, and the first train call is
    # not a second-long stall in the collect/train rhythm.
    learner.compile()
    eval_writer = tf.summary.create_file_writer(os.path.join(root_dir, 'eval'))

    # Off-policy: fill the table with random-action experience before the first train
    # step. (On-policy unrolls need the behaviour policy's logits: no random warm-up.)
    random_actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(
        env.time_step_spec(), env.action_spec()), [writer])
    if not exp.is_sequence:
      random_actor.run(exp.warmup_vector_steps())
      collect_actor.reset()  # random_actor moved the env: start clean episodes
    else:
      # Unrolls hold unroll_length + 1 steps and overlap by one, so an unroll is complete
      # one step *after* its last transition. Collecting that one step up front shifts every
      # later iteration's unroll to end exactly where its collection ends: the train call
      # that follows trains on the unroll the current policy just collected (on-policy,
      # bar the shared boundary step, whose behaviour logits are recorded), instead of one
      # a policy update older.
      collect_actor.run(1)

    history, result = [], {'AverageReturn': float('nan')}
    collect_clock, train_clock = _Clock(), _Clock()
    start_step = learner.train_step_numpy
    train_start = time.perf_counter()
    logging.info('Training %s on %s from train step %d to %d.', type(agent).__name__,
                 exp.env_name, start_step, exp.num_train_steps)
    reached = False
    items_trained = 0  # on-policy: queue items the train steps of this process consumed
    next_eval = (start_step // exp.eval_interval + 1) * exp.eval_interval
    while learner.train_step_numpy < exp.num_train_steps:
      with collect_clock:
        collect_actor.run(exp.collect_steps_per_iteration)
        if exp.is_sequence:
          # Wait until the unrolls just written are in the queue: counting them while
          # they are still in flight would skip this iteration's training, and the
          # backlog that leaves would make every later batch several updates stale.
          collect_actor.flush()
      iterations = _train_steps_available(exp, writer.items_created - items_trained)
      if not iterations:
        continue
      with train_clock:
        try:
          learner.run(iterations=iterations)
        except tf.errors.OutOfRangeError as e:
          raise RuntimeError(
              f'No batch from {exp.experience_table!r} at {server.address} within '
              f'{SAMPLE_TIMEOUT_MS / 1000:.0f} s although this process collected for it '
              f'({writer.items_created} items written, {items_trained} trained on).') from e
      items_trained += iterations * exp.items_per_batch(_fresh_rows(exp))
      step = learner.train_step_numpy
      if step < next_eval and step < exp.num_train_steps:
        continue
      next_eval = step + exp.eval_interval
      result = evaluator.run()
      env_steps = random_actor.env_steps + collect_actor.env_steps
      env_steps_var.assign(env_steps)
      eval_return_var.assign(result['AverageReturn'])
      history.append({'train_step': step, 'env_steps': env_steps,
                      'eval_return': result['AverageReturn'],
                      'seconds': time.perf_counter() - train_start})
      if on_evaluation is not None:
        on_evaluation(history[-1])
      with eval_writer.as_default():
        tf.summary.scalar('eval/AverageReturn', result['AverageReturn'], step=step)
        tf.summary.scalar('eval/AverageReturn_vs_env_steps', result['AverageReturn'],
                          step=env_steps)
      logging.info(
          'train step %7d | env steps %9d | eval return %7.1f | %8.0f env steps/s | '
          '%6.0f train steps/s | %5.1f s', step, env_steps, result['AverageReturn'],
          collect_clock.rate(collect_actor.env_steps), train_clock.rate(step - start_step),
          time.perf_counter() - train_start)
      if exp.target_return is not None and result['AverageReturn'] >= exp.target_return:
        # Confirm on fresh episodes, so one lucky evaluation does not end training.
        confirmation = evaluator.run()
        logging.info('Confirmation evaluation: %.1f', confirmation['AverageReturn'])
        if confirmation['AverageReturn'] >= exp.target_return:
          reached = True
          break
    train_seconds = time.perf_counter() - train_start
    learner.save_checkpoint()
    learner.train_summary_writer.flush()  # readers (notebooks) see every summary now
    paths = policy_trigger.save_saved_models()
    writer.close()
  return {
      'train_step': learner.train_step_numpy,
      'env_steps': random_actor.env_steps + collect_actor.env_steps,
      'eval_return': result['AverageReturn'],
      'reached_target': reached,
      'greedy_policy_dir': paths[triggers.GREEDY_POLICY],
      'train_seconds': train_seconds,
      'history': history,
  }


def _train_steps_available(exp: Experiment, untrained_items: int) -> int:
  """Train steps to run now: fixed for replay; for a queue, the full batches collected.

  Sampling an empty queue would block this one-process loop forever (collection waits
  for training), so on-policy training only takes what has been collected:
  `untrained_items`, the writer's items (all inserted, after its flush) minus those the
  train steps took. Not the queue's current size: the dataset's prefetch takes items out
  of the queue before the learner uses them, and a size that reads zero then would skip
  training and leave a backlog of stale unrolls.
  """
  if not exp.is_sequence:
    return exp.train_steps_per_iteration
  return min(exp.train_steps_per_iteration,
             untrained_items // exp.items_per_batch(_fresh_rows(exp)))


def _fresh_rows(exp: Experiment) -> int:
  """Rows of a batch from the queue (CLEAR takes the others from replay)."""
  return exp.batch_size - exp.replay_rows(exp.batch_size)


class _Clock:
  """Accumulates the seconds spent inside `with clock:` blocks."""

  def __init__(self):
    self.seconds = 0.0
    self._start = 0.0

  def __enter__(self):
    self._start = time.perf_counter()

  def __exit__(self, *unused_exc):
    self.seconds += time.perf_counter() - self._start

  def rate(self, count: float) -> float:
    """count per second spent inside the blocks."""
    return count / self.seconds if self.seconds else float('nan')


def run(root_dir: str, gin_files: Sequence[str] = (), gin_bindings: Sequence[str] = (),
        on_evaluation: Optional[Callable[[Dict[str, Any]], None]] = None,
        **overrides) -> Dict[str, Any]:
  """The Python entry point (notebooks, tests): parse gin, then `train_eval`.

  Args:
    root_dir: the job's directory.
    gin_files: .gin paths (or names of files in learners/configs).
    gin_bindings: extra 'configurable.param = value' lines.
    on_evaluation: see `train_eval`.
    **overrides: `Experiment` fields, applied over gin.

  Returns:
    What `train_eval` returns.

  Raises:
    learners.config.ConfigError: a missing gin file or a bad binding.
  """
  config.parse(gin_files, gin_bindings)
  try:
    experiment = dataclasses.replace(Experiment(), **overrides)
  except (ValueError, TypeError) as e:
    raise config.ConfigError(f'Invalid Experiment settings {overrides}: {e}') from e
  return train_eval(root_dir, experiment=experiment, on_evaluation=on_evaluation)


FLAGS = flags.FLAGS
config.define_common_flags()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # TensorFlow's own deprecation notices (from tf-agents' internals) drown the progress
  # lines; its errors still print.
  tf.get_logger().setLevel('ERROR')
  try:
    result = run(FLAGS.root_dir, FLAGS.gin_file, FLAGS.gin_bindings)
  except config.ConfigError as e:
    config.fail(str(e))
  target = Experiment().target_return
  print(f'Trained to step {result["train_step"]} ({result["env_steps"]} env steps) in '
        f'{result["train_seconds"]:.1f} s; last eval return {result["eval_return"]:.1f}.')
  print(f'Greedy policy exported to: {os.path.abspath(result["greedy_policy_dir"])}')
  if target is not None and not result['reached_target']:
    sys.exit(f'error: the eval return never reached the target {target} within '
             f'{result["train_step"]} train steps.')


def run_main():
  """Console-script entry point."""
  flags.mark_flag_as_required('root_dir')
  app.run(main)


if __name__ == '__main__':
  run_main()

r"""Trains an agent in one process: embedded Reverb server, batched actor, Learner.

    python -m learners.train_eval --root_dir=runs/dqn \
      --gin_file=learners/configs/dqn_cartpole.gin --gin_bindings='train_eval.seed=1'

Each iteration collects `collect_steps_per_iteration` vector steps (num_envs env steps
each) and then runs `train_steps_per_iteration` train steps in one compiled call, so the
ratio of training to collection is fixed by configuration, not by process speeds. Every
`eval_interval` train steps the greedy policy plays `num_eval_episodes` episodes and a
progress line is logged. Re-running with the same root_dir resumes from the latest
checkpoint. The greedy policy's SavedModel ends up in root_dir/policies/greedy_policy.
"""
import os
import sys
import time
from typing import Any, Callable, Dict, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import gin
import tensorflow as tf

import tfrl.envs
from tfrl import actors
from tfrl import learner as learner_lib
from tfrl import metrics as metrics_lib
from tfrl import replay
from tfrl import triggers
from tfrl.agents import dqn
from tf_agents.policies import random_tf_policy
from learners import config

REPLAY_TABLE = 'replay'


@gin.configurable
def train_eval(root_dir: str,
               env_name: str = 'CartPole-v1',
               seed: int = 0,
               agent_fn: Callable[..., Any] = dqn.create_dqn_agent,
               gamma: float = 0.99,
               n_step: int = 1,
               num_envs: int = 16,
               replay_capacity: int = 100_000,
               batch_size: int = 64,
               initial_collect_steps: int = 1_000,
               collect_steps_per_iteration: int = 1,
               train_steps_per_iteration: int = 1,
               num_train_steps: int = 100_000,
               eval_interval: int = 1_000,
               num_eval_episodes: int = 10,
               target_return: Optional[float] = None,
               checkpoint_interval: int = 10_000,
               policy_checkpoint_interval: int = 10_000,
               summary_interval: int = 1_000,
               strategy: str = 'default') -> Dict[str, Any]:
  """Trains, evaluates and exports; returns the final figures.

  Args:
    root_dir: where checkpoints, summaries and policies go.
    env_name: a gymnasium id.
    seed: seeds TF, the collect envs (seed) and the eval envs (seed + 10000).
    agent_fn: builds the agent from (time_step_spec, action_spec, train_step, gamma=).
    gamma: the discount, shared by the agent and the n-step writer.
    n_step: steps per transition.
    num_envs: parallel collect envs.
    replay_capacity: replay size in transitions.
    batch_size: transitions per train step (a multiple of num_envs, or a divisor).
    initial_collect_steps: env steps of random actions before training starts.
    collect_steps_per_iteration: vector steps collected per iteration.
    train_steps_per_iteration: train steps per iteration (one compiled call).
    num_train_steps: the train step budget.
    eval_interval: train steps between evaluations (and progress lines).
    num_eval_episodes: episodes per evaluation.
    target_return: stop once an evaluation's average return reaches it and a second
      evaluation on new episodes confirms it.
    checkpoint_interval: train steps between learner checkpoints.
    policy_checkpoint_interval: train steps between variables-only policy checkpoints.
    summary_interval: train steps between training summaries.
    strategy: 'default' | 'mirrored' | 'multi_worker' | 'tpu' (see tfrl.distribute).

  Returns:
    dict with train_step, env_steps, eval_return (last evaluation), reached_target,
    greedy_policy_dir, train_seconds (from the first train step), history (evals).
  """
  from tfrl import distribute  # pylint: disable=g-import-not-at-top
  tf.random.set_seed(seed)
  env = tfrl.envs.make(env_name, num_envs=num_envs, seed=seed)
  eval_env = tfrl.envs.make(env_name, num_envs=min(num_eval_episodes, 10), seed=seed + 10_000)
  strategy_obj = distribute.get_strategy(strategy)
  with strategy_obj.scope():
    train_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='train_step')
    agent = agent_fn(env.time_step_spec(), env.action_spec(), train_step, gamma=gamma)

  # envs_per_item: one item per vector step, unless the batch is smaller than that.
  envs_per_item = num_envs if batch_size % num_envs == 0 else batch_size
  if num_envs % envs_per_item:
    raise ValueError(f'batch_size={batch_size} must be a multiple or a divisor of '
                     f'num_envs={num_envs}.')
  signature = replay.NStepTransitionWriter.item_signature(agent.collect_data_spec,
                                                          envs_per_item)
  min_items = max(1, batch_size // envs_per_item)
  server = replay.ReplayServer([replay.uniform_table(
      REPLAY_TABLE, max(replay_capacity // envs_per_item, min_items), signature,
      min_size_to_sample=min_items)])
  writer = replay.NStepTransitionWriter(server.client, REPLAY_TABLE, n=n_step,
                                        discount=gamma, envs_per_item=envs_per_item)
  collect_actor = actors.Actor(env, agent.collect_policy, [writer], policy_version=train_step,
                               summary_dir=os.path.join(root_dir, 'collect'))
  evaluator = actors.Evaluator(eval_env, agent.policy, num_eval_episodes, seed=seed + 10_000)

  def dataset_fn(context: tf.distribute.InputContext):
    per_replica = context.get_per_replica_batch_size(batch_size)
    return replay.make_dataset(server.address, REPLAY_TABLE, signature, per_replica,
                               experience_spec=agent.collect_data_spec)

  env_steps_var = tf.Variable(0, dtype=tf.int64, trainable=False)
  eval_return_var = tf.Variable(float('nan'), dtype=tf.float32, trainable=False)
  policy_trigger = triggers.PolicySavedModelTrigger(
      root_dir, agent, train_step, policy_checkpoint_interval,
      metadata={'env_steps': env_steps_var, 'eval_return': eval_return_var})
  learner = learner_lib.Learner(
      root_dir, train_step, agent, experience_dataset_fn=dataset_fn,
      triggers=[policy_trigger], checkpoint_interval=checkpoint_interval,
      summary_interval=summary_interval, strategy=strategy_obj)
  eval_writer = tf.summary.create_file_writer(os.path.join(root_dir, 'eval'))

  # Fill the table with random-action experience before the first train step.
  random_actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(
      env.time_step_spec(), env.action_spec()), [writer])
  random_actor.run(max(initial_collect_steps // num_envs, n_step + min_items))
  collect_actor.reset()  # random_actor moved the env: start clean episodes

  history, result = [], {'AverageReturn': float('nan')}
  collect_clock, train_clock = _Clock(), _Clock()
  start_step = learner.train_step_numpy
  train_start = time.perf_counter()
  logging.info('Training %s on %s from train step %d to %d.', type(agent).__name__,
               env_name, start_step, num_train_steps)
  reached = False
  next_eval = (start_step // eval_interval + 1) * eval_interval
  while learner.train_step_numpy < num_train_steps:
    with collect_clock:
      collect_actor.run(collect_steps_per_iteration)
    with train_clock:
      learner.run(iterations=train_steps_per_iteration)
    step = learner.train_step_numpy
    if step >= next_eval or step >= num_train_steps:
      next_eval = step + eval_interval
      result = evaluator.run()
      env_steps = random_actor.env_steps + collect_actor.env_steps
      env_steps_var.assign(env_steps)
      eval_return_var.assign(result['AverageReturn'])
      history.append({'train_step': step, 'env_steps': env_steps,
                      'eval_return': result['AverageReturn'],
                      'seconds': time.perf_counter() - train_start})
      with eval_writer.as_default():
        tf.summary.scalar('eval/AverageReturn', result['AverageReturn'], step=step)
        tf.summary.scalar('eval/AverageReturn_vs_env_steps', result['AverageReturn'],
                          step=env_steps)
      logging.info(
          'train step %7d | env steps %9d | eval return %7.1f | %8.0f env steps/s | '
          '%6.0f train steps/s | %5.1f s', step, env_steps, result['AverageReturn'],
          collect_clock.rate(collect_actor.env_steps), train_clock.rate(step - start_step),
          time.perf_counter() - train_start)
      if target_return is not None and result['AverageReturn'] >= target_return:
        # Confirm on fresh episodes, so one lucky evaluation does not end training.
        confirmation = evaluator.run()
        logging.info('Confirmation evaluation: %.1f', confirmation['AverageReturn'])
        if confirmation['AverageReturn'] >= target_return:
          reached = True
          break
  train_seconds = time.perf_counter() - train_start
  learner.save_checkpoint()
  paths = policy_trigger.save_saved_models()
  writer.close()
  server.stop()
  env.close()
  eval_env.close()
  return {
      'train_step': learner.train_step_numpy,
      'env_steps': random_actor.env_steps + collect_actor.env_steps,
      'eval_return': result['AverageReturn'],
      'reached_target': reached,
      'greedy_policy_dir': paths[triggers.GREEDY_POLICY],
      'train_seconds': train_seconds,
      'history': history,
  }


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
        **overrides) -> Dict[str, Any]:
  """The Python entry point (notebooks, tests): parse gin, then `train_eval`.

  Args:
    root_dir: the job's directory.
    gin_files: .gin paths (or names of files in learners/configs).
    gin_bindings: extra 'configurable.param = value' lines.
    **overrides: keyword arguments of `train_eval`, applied over gin.

  Returns:
    What `train_eval` returns.

  Raises:
    learners.config.ConfigError: a missing gin file or a bad binding.
  """
  config.parse(gin_files, gin_bindings)
  return train_eval(root_dir, **overrides)


FLAGS = flags.FLAGS
flags.DEFINE_string('root_dir', None, 'Where checkpoints, summaries and policies go.')
flags.DEFINE_multi_string('gin_file', [], 'gin files (repeatable; later ones win).')
flags.DEFINE_multi_string('gin_bindings', [], "gin bindings, e.g. 'train_eval.seed=1'.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # TensorFlow's own deprecation notices (from tf-agents' internals) drown the progress
  # lines; its errors still print.
  tf.get_logger().setLevel('ERROR')
  try:
    result = run(FLAGS.root_dir, FLAGS.gin_file, FLAGS.gin_bindings)
  except config.ConfigError as e:
    sys.exit(f'error: {e}')
  target = gin.query_parameter('train_eval.target_return') if _bound('target_return') else None
  print(f'Trained to step {result["train_step"]} ({result["env_steps"]} env steps) in '
        f'{result["train_seconds"]:.1f} s; last eval return {result["eval_return"]:.1f}.')
  print(f'Greedy policy exported to: {os.path.abspath(result["greedy_policy_dir"])}')
  if target is not None and not result['reached_target']:
    sys.exit(f'error: the eval return never reached the target {target} within '
             f'{result["train_step"]} train steps.')


def _bound(parameter: str) -> bool:
  try:
    gin.query_parameter(f'train_eval.{parameter}')
    return True
  except ValueError:
    return False


def run_main():
  """Console-script entry point."""
  flags.mark_flag_as_required('root_dir')
  app.run(main)


if __name__ == '__main__':
  run_main()

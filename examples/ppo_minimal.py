"""PPO on CartPole-v1 in one file, from tfrl's pieces wired top to bottom.

    python examples/ppo_minimal.py --root_dir=runs/ppo_minimal [--seed=1 ...]

A batched gymnasium env feeds unrolls of T + 1 steps (consecutive unrolls share one
step, the bootstrap) into a Reverb FIFO queue; after each collection of T vector steps
the Learner takes the one batch just collected and runs epochs of minibatches on it.
Every `eval_interval` train calls the greedy policy plays `num_eval_episodes` episodes;
training stops once their average reaches `target_return`, and the greedy policy is
exported as a SavedModel. Exits non-zero if the budget runs out first.
(`learners/train_eval.py` runs the same loop with checkpoints, summaries and gin.)
"""
import argparse
import dataclasses
import os
import sys
import time
from typing import Any, Dict, Tuple

import tensorflow as tf

import tfrl.envs
from tfrl import actors, export, layouts, replay, seeding, triggers
from tfrl.agents import ppo
from tfrl.learner import Learner, new_train_step


@dataclasses.dataclass
class Settings:
  """Everything the run depends on (defaults: RL-Zoo's CartPole PPO, 4 minibatches)."""
  root_dir: str = 'runs/ppo_minimal'  # checkpoints and the exported policy go here
  env_id: str = 'CartPole-v1'  # a registered gymnasium id
  seed: int = 0  # seeds TF and the collect and eval envs' streams
  num_envs: int = 8  # envs stepped together; one batch = one unroll of each
  unroll_length: int = 32  # T: vector steps collected per train call
  fc_layer_params: Tuple[int, ...] = (64, 64)  # hidden layers of policy and value nets
  learning_rate: float = 1e-3  # Adam's step size
  gamma: float = 0.98  # discount
  lambda_: float = 0.8  # GAE's lambda
  clip_ratio: float = 0.2  # epsilon of the clipped surrogate
  value_cost: float = 1.0  # weight of 0.5 * squared value error
  entropy_cost: float = 0.0  # weight of the entropy bonus
  num_epochs: int = 20  # passes over each batch per train call
  num_minibatches: int = 4  # minibatches per pass (of num_envs * T / 4 steps)
  gradient_clipping: float = 0.5  # max global gradient norm
  num_train_steps: int = 1_000  # the budget: give up after this many train calls
  eval_interval: int = 8  # train calls between evaluations
  num_eval_episodes: int = 10  # episodes per evaluation
  target_return: float = 475.0  # stop once an evaluation averages this much
  checkpoint_interval: int = 200  # train calls between Learner checkpoints


def main(s: Settings) -> Dict[str, Any]:
  """Trains until the target return or the budget, then exports the greedy policy.

  Args:
    s: the settings.

  Returns:
    dict with eval_return (of the last evaluation), train_step, env_steps, policy_dir
    (the greedy policy's SavedModel), reached_target and seconds.
  """
  tf.random.set_seed(s.seed)
  eval_seed = seeding.derive(s.seed, seeding.EVALUATE)  # a stream apart from collection's
  env = tfrl.envs.make(s.env_id, num_envs=s.num_envs,
                       seed=seeding.derive(s.seed, seeding.COLLECT))
  eval_env = tfrl.envs.make(s.env_id, num_envs=min(s.num_eval_episodes, 10),
                            seed=eval_seed)
  train_step = new_train_step()
  agent = ppo.create_ppo_agent(
      env.time_step_spec(), env.action_spec(), train_step, gamma=s.gamma,
      fc_layer_params=s.fc_layer_params, learning_rate=s.learning_rate,
      shared_torso=False, lambda_=s.lambda_, clip_ratio=s.clip_ratio, value_clip=None,
      value_cost=s.value_cost, entropy_cost=s.entropy_cost, num_epochs=s.num_epochs,
      num_minibatches=s.num_minibatches, gradient_clipping=s.gradient_clipping)

  # The data layout: one queue item per collection, the unrolls (T + 1 steps) of all
  # envs, each sampled once; the collect policy's logits and values ride along in
  # policy_info. Only the latest item ever waits in the queue: 32 is room to spare.
  layout = layouts.SequenceQueue(s.num_envs, batch_size=s.num_envs,
                                 unroll_length=s.unroll_length,
                                 queue_capacity=32 * s.num_envs)
  server = replay.ReplayServer(layout.tables(agent))
  writer = layout.make_writer(server.client)
  learner = Learner(
      s.root_dir, train_step, agent,
      # A sample that waits a minute means this loop's bookkeeping broke: fail, not hang.
      experience_dataset_fn=layout.dataset_fn(server.address, agent,
                                              sample_timeout_ms=60_000),
      train_inputs_fn=layout.train_inputs_fn(agent),
      checkpoint_interval=s.checkpoint_interval)
  actor = actors.Actor(env, agent.collect_policy, [writer], policy_version=train_step)
  evaluator = actors.Evaluator(eval_env, triggers.greedy(agent), s.num_eval_episodes,
                               seed=eval_seed)

  # An unroll is complete one step *after* its last transition (it holds T + 1 steps).
  # Collecting that one step up front makes every later unroll end exactly where a
  # collection ends, so each train call learns from what the current policy just did.
  layout.warm_up(actor, random_actor=None, initial_collect_steps=0)
  start, eval_return, reached, items_trained = time.perf_counter(), float('nan'), False, 0
  next_eval = learner.train_step_numpy + s.eval_interval
  while learner.train_step_numpy < s.num_train_steps and not reached:
    actor.run(s.unroll_length)
    # Wait until the unroll is in the queue. Train only on the full batches collected
    # (counted by the writer, not by the queue's size, which the dataset's prefetch
    # empties early): sampling an empty queue would block this one process forever.
    actor.flush()
    batches = layout.train_steps_available(
        writer.items_created - items_trained,
        limit=s.num_train_steps - learner.train_step_numpy)
    if not batches:
      continue
    learner.run(iterations=batches)
    items_trained += batches * layout.items_per_train_step
    step = learner.train_step_numpy
    if step >= next_eval or step >= s.num_train_steps:
      next_eval = step + s.eval_interval
      eval_return = evaluator.run()['AverageReturn']
      reached = eval_return >= s.target_return
      print(f'train step {step:5d} | env steps {actor.env_steps:7d} | eval return '
            f'{eval_return:6.1f} | {time.perf_counter() - start:5.1f} s', flush=True)

  learner.save_checkpoint()
  policy_dir = export.export_policy(triggers.greedy(agent),
                                    os.path.join(s.root_dir, 'greedy_policy'), train_step)
  writer.close()
  server.stop()
  env.close()
  eval_env.close()
  return {'eval_return': eval_return, 'train_step': learner.train_step_numpy,
          'env_steps': actor.env_steps, 'policy_dir': policy_dir,
          'reached_target': reached, 'seconds': time.perf_counter() - start}


def parse_settings(argv=None) -> Settings:
  """Settings from the command line: `--<field>=<value>` for each scalar field."""
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  for field in dataclasses.fields(Settings):
    if isinstance(field.default, (int, float, str)):
      parser.add_argument(f'--{field.name}', type=type(field.default),
                          default=field.default)
  return Settings(**vars(parser.parse_args(argv)))


if __name__ == '__main__':
  tf.get_logger().setLevel('ERROR')  # tf-agents' deprecation notices drown the progress
  settings = parse_settings()
  result = main(settings)
  print(f'Final eval return: {result["eval_return"]:.1f} at train call '
        f'{result["train_step"]} ({result["env_steps"]} env steps, '
        f'{result["seconds"]:.1f} s)')
  print(f'Greedy policy exported to: {os.path.abspath(result["policy_dir"])}')
  if not result['reached_target']:
    sys.exit(f'error: the eval return never reached {settings.target_return} within '
             f'{settings.num_train_steps} train calls.')

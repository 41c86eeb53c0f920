"""Double DQN on CartPole-v1 in one file, from tfrl's pieces wired top to bottom.

    python examples/dqn_minimal.py --root_dir=runs/dqn_minimal [--seed=1 ...]

A batched gymnasium env feeds 5-step transitions through a writer into a uniform
Reverb replay table; the Learner samples batches from it in one compiled call per
iteration. Every `eval_interval` train steps the greedy policy plays `num_eval_episodes`
episodes; training stops once their average reaches `target_return`, and the greedy
policy is exported as a SavedModel. Exits non-zero if the budget runs out first.
(`learners/train_eval.py` runs the same loop with checkpoints, summaries and gin.)
"""
import argparse
import dataclasses
import os
import sys
import time
from typing import Any, Dict, Tuple

import tensorflow as tf
from tf_agents.policies import random_tf_policy

import tfrl.envs
from tfrl import actors, export, layouts, replay, seeding, triggers
from tfrl.agents import dqn
from tfrl.learner import Learner, new_train_step


@dataclasses.dataclass
class Settings:
  """Everything the run depends on (defaults: RL-Zoo's CartPole DQN plus n-step)."""
  root_dir: str = 'runs/dqn_minimal'  # checkpoints and the exported policy go here
  env_id: str = 'CartPole-v1'  # a registered gymnasium id
  seed: int = 0  # seeds TF and the collect and eval envs' streams
  num_envs: int = 16  # envs stepped together; one Reverb item holds one vector step
  fc_layer_params: Tuple[int, ...] = (256, 256)  # hidden layers of the Q-network
  learning_rate: float = 2.3e-3  # Adam's step size
  gamma: float = 0.99  # discount, shared by the agent and the n-step writer
  n_step: int = 5  # steps summed into each transition's reward
  target_update_period: int = 128  # train steps between target-network copies
  epsilon_end: float = 0.04  # final exploration rate (from 1.0) ...
  epsilon_decay_steps: int = 4_000  # ... reached after this many train steps
  gradient_clipping: float = 10.0  # max gradient norm
  replay_capacity: int = 100_000  # transitions the replay table keeps
  batch_size: int = 64  # transitions per train step (a multiple of num_envs)
  initial_collect_steps: int = 1_000  # env steps of random actions before training
  collect_steps_per_iteration: int = 16  # vector steps collected per iteration
  train_steps_per_iteration: int = 128  # train steps per iteration (one compiled call)
  num_train_steps: int = 50_000  # the budget: give up after this many train steps
  eval_interval: int = 512  # train steps between evaluations
  num_eval_episodes: int = 10  # episodes per evaluation
  target_return: float = 475.0  # stop once an evaluation averages this much
  checkpoint_interval: int = 5_000  # train steps between Learner checkpoints


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
  agent = dqn.create_dqn_agent(
      env.time_step_spec(), env.action_spec(), train_step,
      fc_layer_params=s.fc_layer_params, learning_rate=s.learning_rate, gamma=s.gamma,
      target_update_period=s.target_update_period, epsilon_end=s.epsilon_end,
      epsilon_decay_steps=s.epsilon_decay_steps, gradient_clipping=s.gradient_clipping)

  # The data layout: n-step transitions in a uniform replay table. It builds the table,
  # the writer (which sums the n discounted rewards itself, so the agent trains with
  # 1-step targets), the Learner's dataset and `agent.train`'s inputs (rows that start
  # on an episode boundary, LAST -> FIRST, are no experience: weight 0).
  layout = layouts.TransitionReplay(s.num_envs, s.batch_size, n_step=s.n_step,
                                    gamma=s.gamma, capacity=s.replay_capacity)
  # No samples-per-insert limiter: this one process alternates collecting and training,
  # so the ratio is fixed by the two *_per_iteration settings instead.
  server = replay.ReplayServer(layout.tables(agent))
  writer = layout.make_writer(server.client)
  learner = Learner(
      s.root_dir, train_step, agent,
      # A sample that waits a minute means this loop's bookkeeping broke: fail, not hang.
      experience_dataset_fn=layout.dataset_fn(server.address, agent,
                                              sample_timeout_ms=60_000),
      train_inputs_fn=layout.train_inputs_fn(agent),
      checkpoint_interval=s.checkpoint_interval)

  # Fill the table with random-action experience, then collect with epsilon-greedy.
  random_actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(
      env.time_step_spec(), env.action_spec()), [writer])
  actor = actors.Actor(env, agent.collect_policy, [writer], policy_version=train_step)
  layout.warm_up(actor, random_actor, s.initial_collect_steps)
  evaluator = actors.Evaluator(eval_env, triggers.greedy(agent), s.num_eval_episodes,
                               seed=eval_seed)

  start, eval_return, reached = time.perf_counter(), float('nan'), False
  next_eval = learner.train_step_numpy + s.eval_interval
  while learner.train_step_numpy < s.num_train_steps and not reached:
    actor.run(s.collect_steps_per_iteration)
    learner.run(iterations=s.train_steps_per_iteration)
    step = learner.train_step_numpy
    if step >= next_eval or step >= s.num_train_steps:
      next_eval = step + s.eval_interval
      eval_return = evaluator.run()['AverageReturn']
      reached = eval_return >= s.target_return
      env_steps = random_actor.env_steps + actor.env_steps
      print(f'train step {step:6d} | env steps {env_steps:7d} | eval return '
            f'{eval_return:6.1f} | {time.perf_counter() - start:5.1f} s', flush=True)

  learner.save_checkpoint()
  policy_dir = export.export_policy(triggers.greedy(agent),
                                    os.path.join(s.root_dir, 'greedy_policy'), train_step)
  writer.close()
  server.stop()
  env.close()
  eval_env.close()
  return {'eval_return': eval_return, 'train_step': learner.train_step_numpy,
          'env_steps': random_actor.env_steps + actor.env_steps, 'policy_dir': policy_dir,
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
  print(f'Final eval return: {result["eval_return"]:.1f} at train step '
        f'{result["train_step"]} ({result["env_steps"]} env steps, '
        f'{result["seconds"]:.1f} s)')
  print(f'Greedy policy exported to: {os.path.abspath(result["policy_dir"])}')
  if not result['reached_target']:
    sys.exit(f'error: the eval return never reached {settings.target_return} within '
             f'{settings.num_train_steps} train steps.')

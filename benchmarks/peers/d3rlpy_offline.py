"""d3rlpy's offline agents on a dataset from benchmarks/d3rlpy_data.py (tfrl's offline peer).

Runs in its own venv (benchmarks/peers/.venv-d3rlpy, from d3rlpy_requirements.txt;
benchmarks/offline.py creates it and runs this script). Trains one algorithm for
--grad_steps gradient steps and evaluates its greedy policy (`predict`) on the env every
--eval_interval steps, printing one JSON line per evaluation:

  {"grad_steps": N, "return": R, "seconds": S, "eval_seconds": E}

where S is the wall clock since the script started (imports included, as tfrl's
process seconds) and E the part of it spent evaluating. Settings are d3rlpy's own
reproductions (reproductions/offline/cql.py, iql.py) unless a flag says otherwise; the
caller passes tfrl's config values where both sides must match (networks, rates, batch).

    benchmarks/peers/.venv-d3rlpy/bin/python benchmarks/peers/d3rlpy_offline.py \
      --data=DATA.npz --env=HalfCheetah-v5 --algo=cql --seed=0 --grad_steps=50000
"""
import argparse
import json
import time

START = time.perf_counter()

# pylint: disable=g-import-not-at-top (the clock starts before the heavy imports)
import d3rlpy
import gymnasium
import numpy as np


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--data', required=True, help='.npz from benchmarks/d3rlpy_data.py')
  parser.add_argument('--env', required=True, help='gymnasium env id to evaluate on')
  parser.add_argument('--algo', required=True, choices=['cql', 'iql', 'discrete_cql'])
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--grad_steps', type=int, default=50_000)
  parser.add_argument('--eval_interval', type=int, default=5_000)
  parser.add_argument('--eval_episodes', type=int, default=10)
  parser.add_argument('--hidden', default='256,256,256', help='units per layer')
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--actor_lr', type=float, default=1e-4)
  parser.add_argument('--critic_lr', type=float, default=3e-4)
  parser.add_argument('--temp_lr', type=float, default=1e-4)
  parser.add_argument('--conservative_weight', type=float, default=5.0,
                      help='CQL: the fixed weight of the conservative term')
  parser.add_argument('--learning_rate', type=float, default=1e-4, help='discrete_cql')
  parser.add_argument('--alpha', type=float, default=1.0, help='discrete_cql: CQL weight')
  parser.add_argument('--target_update_interval', type=int, default=1000,
                      help='discrete_cql: gradient steps between target copies')
  parser.add_argument('--torch_threads', type=int, default=0, help='0: torch default')
  return parser.parse_args()


def make_algo(args, encoder):
  """The algorithm, as d3rlpy's reproduction scripts configure it."""
  if args.algo == 'cql':
    # reproductions/offline/cql.py: a fixed conservative weight (alpha_learning_rate 0).
    return d3rlpy.algos.CQLConfig(
        actor_learning_rate=args.actor_lr, critic_learning_rate=args.critic_lr,
        temp_learning_rate=args.temp_lr, actor_encoder_factory=encoder,
        critic_encoder_factory=encoder, batch_size=args.batch_size, n_action_samples=10,
        alpha_learning_rate=0.0, conservative_weight=args.conservative_weight,
    ).create(device='cpu:0')
  if args.algo == 'iql':
    # reproductions/offline/iql.py, its cosine schedule over this run's steps.
    return d3rlpy.algos.IQLConfig(
        actor_learning_rate=3e-4, critic_learning_rate=3e-4,
        actor_optim_factory=d3rlpy.optimizers.AdamFactory(
            lr_scheduler_factory=d3rlpy.optimizers.CosineAnnealingLRFactory(
                T_max=args.grad_steps)),
        actor_encoder_factory=encoder, critic_encoder_factory=encoder,
        value_encoder_factory=encoder, batch_size=args.batch_size, weight_temp=3.0,
        max_weight=100.0, expectile=0.7,
        reward_scaler=d3rlpy.preprocessing.ReturnBasedRewardScaler(multiplier=1000.0),
    ).create(device='cpu:0')
  return d3rlpy.algos.DiscreteCQLConfig(
      learning_rate=args.learning_rate, encoder_factory=encoder,
      batch_size=args.batch_size, alpha=args.alpha,
      target_update_interval=args.target_update_interval,
  ).create(device='cpu:0')


def main():
  args = parse_args()
  if args.torch_threads:
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(args.torch_threads)
  d3rlpy.seed(args.seed)
  data = np.load(args.data)
  discrete = args.algo == 'discrete_cql'
  dataset = d3rlpy.dataset.MDPDataset(
      observations=data['observations'], actions=data['actions'], rewards=data['rewards'],
      terminals=data['terminals'], timeouts=data['timeouts'],
      action_space=(d3rlpy.ActionSpace.DISCRETE if discrete
                    else d3rlpy.ActionSpace.CONTINUOUS))
  env = gymnasium.make(args.env)
  d3rlpy.envs.seed_env(env, args.seed)
  encoder = d3rlpy.models.encoders.VectorEncoderFactory(
      [int(units) for units in args.hidden.split(',')])
  algo = make_algo(args, encoder)
  eval_seconds = [0.0]

  def evaluate(algo_, epoch, total_step):
    del epoch
    started = time.perf_counter()
    score = d3rlpy.metrics.evaluate_qlearning_with_environment(
        algo_, env, n_trials=args.eval_episodes)
    eval_seconds[0] += time.perf_counter() - started
    print(json.dumps({'grad_steps': int(total_step), 'return': float(score),
                      'seconds': time.perf_counter() - START,
                      'eval_seconds': eval_seconds[0]}), flush=True)

  algo.fit(dataset, n_steps=args.grad_steps, n_steps_per_epoch=args.eval_interval,
           logger_adapter=d3rlpy.logging.NoopAdapterFactory(), show_progress=False,
           save_interval=args.grad_steps + 1, epoch_callback=evaluate)


if __name__ == '__main__':
  main()

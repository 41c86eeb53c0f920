"""The standard-task configs (Box2D, MuJoCo, MiniGrid, Atari) run briefly in
`train_eval` and under `learners.launch`, a few train steps each, and their exported
policies load as a user loads them and act in the task. Whether they learn
is benchmarks/ work (minutes to hours each on this machine: docs/results/);
this proves each config builds, trains and exports both ways.

The `train_eval` runs share one subprocess, TensorFlow loaded once, one after another;
each launched job is its own set of processes (server, collector, trainer, evaluator).
"""
import json
import os
import textwrap

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
from learners.configuration import config
from programs import evaluate_export, final_state, run_launch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# config -> bindings that make the run brief (a few train steps, small warm-ups). The
# replay configs train whole iterations before they check the end: one of TRAIN_STEPS
# (their own iterations, 32-256 train steps behind a samples-per-insert limiter, made
# these runs collect thousands of env steps for nothing the test reads).
_ONE_ITERATION = 'Experiment.train_steps_per_iteration = 2'
# The Atari sequence configs' batches of 8 games' 128-step unrolls cost each brief run
# 10-15 s of CNN gradient steps on 1,024 frames; two games (in one worker process) give
# the same layout, networks and export a quarter of the frames.
_TWO_GAMES = ['Experiment.num_envs = 2', 'Experiment.batch_size = 2',
              'Experiment.env_workers = 1']
BRIEF = {
    'dqn_lunarlander.gin': ['Experiment.initial_collect_steps = 256', _ONE_ITERATION],
    'ppo_lunarlander.gin': ['SequenceQueue.unroll_length = 64',  # 1,024-step batches
                            'Experiment.collect_steps_per_iteration = 64',
                            'create_ppo_agent.num_minibatches = 4'],
    'sac_halfcheetah.gin': ['Experiment.initial_collect_steps = 256', _ONE_ITERATION],
    'ppo_halfcheetah.gin': [],
    'ppo_minigrid_doorkey.gin': [],
    'ppo_atari.gin': _TWO_GAMES,
    'impala_atari.gin': _TWO_GAMES,
    'appo_atari.gin': _TWO_GAMES + ['create_impala_agent.num_minibatches = 2'],  # of 1 unroll
    'dqn_atari.gin': ['Experiment.initial_collect_steps = 256', _ONE_ITERATION],
}
# (The MiniGrid task-sequence configs run through all three tasks, export and evaluate in
# benchmarks/task_sequence.py's smoke run, tests/test_benchmarks_run.py.)
TRAIN_STEPS = 2  # (_ONE_ITERATION's too)
# The export, loaded as a user loads it, acts for this many vector steps of the task
# from the eval env's first reset. Not a whole episode: train_eval's own evaluation has
# just played one with the same weights, and whole episodes of the export at the target
# are test_learning's (1,000-step LunarLander and HalfCheetah episodes, 759-step Pong:
# 21 s of this module's run replayed what the evaluation had played).
PLAY_STEPS = 64
# Under launch, one config per env suite, each through the replay layout: Box2D
# (dqn_lunarlander), MuJoCo (sac_halfcheetah), Atari (dqn_atari: stacked uint8 frames in
# transitions, the path no other launched test takes). The suites' PPO/IMPALA configs
# run above in train_eval with the same env options, and the sequence layout with
# pixels and Dicts runs under launch in test_learning.py (ppo_pixel_catch_dict); each
# launched job costs 20-65 s of the suite.
LAUNCHED = ['dqn_lunarlander.gin', 'sac_halfcheetah.gin', 'dqn_atari.gin']

_SCRIPT = textwrap.dedent('''
    import json, os, sys
    import numpy as np
    from learners import train_eval
    from learners.configuration import config
    from learners.configuration.experiment import Experiment
    from tfrl import actors, export
    root, runs = sys.argv[1], json.loads(sys.argv[2])
    for gin_file, bindings in runs.items():
      bindings = bindings + ['Experiment.num_train_steps = {steps}',
                             'Experiment.eval_interval = {steps}',
                             'Experiment.num_eval_episodes = 1',
                             'Experiment.target_return = None']
      result = train_eval.run(os.path.join(root, gin_file), [gin_file], bindings)
      path = os.path.join(root, gin_file, 'policies', 'greedy_policy')
      config.parse([gin_file], bindings)
      env = Experiment().make_eval_env()
      policy = export.load_policy(path)
      act = actors.CompiledActionFn(policy, env.num_envs)
      time_step, state, rewards = env.reset(seed=0), policy.get_initial_state(env.num_envs), []
      for _ in range({play_steps}):
        policy_step = act(time_step, state)
        time_step, state = env.step(policy_step.action), policy_step.state
        rewards.append(time_step.reward)
      env.close()
      print('RESULT ' + json.dumps({{
          'config': gin_file, 'train_step': int(result['train_step']),
          'exported_step': export.exported_train_step(path),
          'played_steps': len(rewards), 'played_rewards_finite':
              bool(np.all(np.isfinite(rewards)))}}), flush=True)
''').format(steps=TRAIN_STEPS, play_steps=PLAY_STEPS)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = python_runs.run(
      ['-c', _SCRIPT, str(tmp_path_factory.mktemp('suites')), json.dumps(BRIEF)],
      timeout=900, env=env)
  results = {}
  for line in result.stdout.splitlines():
    if line.startswith('RESULT '):
      row = json.loads(line[len('RESULT '):])
      results[row['config']] = row
  return results, result


@pytest.mark.parametrize('gin_file', list(BRIEF))
def test_config_trains_briefly_and_its_export_acts(runs, gin_file):
  results, process = runs
  assert gin_file in results, (process.stdout + process.stderr)[-4000:]
  row = results[gin_file]
  assert row['exported_step'] == row['train_step'] >= TRAIN_STEPS, row
  assert row['played_steps'] == PLAY_STEPS and row['played_rewards_finite'], row


@pytest.mark.parametrize('gin_file', LAUNCHED)
def test_config_runs_under_launch_and_its_export_plays(tmp_path, gin_file):
  """The same config as separate programs: one collector feeds the trainer through the
  server, the evaluator follows, and the launcher's ordered stop leaves a final
  checkpoint and exports at the last train step, which load and play."""
  bindings = BRIEF[gin_file] + [f'Experiment.num_train_steps = {TRAIN_STEPS}',
                                f'Experiment.eval_interval = {TRAIN_STEPS}',
                                'Experiment.num_eval_episodes = 1',
                                'Experiment.target_return = None']
  result = run_launch(tmp_path, gin_file, bindings, num_collectors=1)
  assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
  state = final_state(str(tmp_path))
  assert len(set(state.values())) == 1 and state['checkpoint'] >= TRAIN_STEPS, state
  config.parse([gin_file], bindings)
  played = evaluate_export(os.path.join(tmp_path, 'policies', 'greedy_policy'), seed=0)
  assert np.isfinite(played), played

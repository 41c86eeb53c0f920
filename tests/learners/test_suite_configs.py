"""The standard-task configs (issue 14: Box2D, MuJoCo, MiniGrid, Atari) run briefly in
`train_eval`, a few train steps each, and their exported policies load as a user loads
them and play an episode of the task. Whether they learn is benchmarks/ work (minutes
to hours each on this machine); this proves each config builds, trains and exports.

All of them run in one subprocess, TensorFlow loaded once, one after another.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# config -> bindings that make the run brief (a few train steps, small warm-ups).
BRIEF = {
    'dqn_lunarlander.gin': ['Experiment.initial_collect_steps = 256'],
    'ppo_lunarlander.gin': [],
    'sac_halfcheetah.gin': ['Experiment.initial_collect_steps = 256'],
    'ppo_halfcheetah.gin': [],
    'ppo_minigrid_doorkey.gin': [],
    'ppo_atari.gin': [],
    'impala_atari.gin': [],
    'dqn_atari.gin': ['Experiment.initial_collect_steps = 256'],
}
TRAIN_STEPS = 4

_SCRIPT = textwrap.dedent('''
    import json, os, sys
    from learners import config, train_eval
    from learners.experiment import Experiment
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
      played = actors.Evaluator(env, export.load_policy(path), 1, seed=0).run()
      env.close()
      print('RESULT ' + json.dumps({{
          'config': gin_file, 'train_step': int(result['train_step']),
          'exported_step': export.exported_train_step(path),
          'played_return': float(played['AverageReturn']),
          'played_length': float(played['AverageEpisodeLength'])}}), flush=True)
''').format(steps=TRAIN_STEPS)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = subprocess.run(
      [sys.executable, '-c', _SCRIPT, str(tmp_path_factory.mktemp('suites')),
       json.dumps(BRIEF)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  results = {}
  for line in result.stdout.splitlines():
    if line.startswith('RESULT '):
      row = json.loads(line[len('RESULT '):])
      results[row['config']] = row
  return results, result


@pytest.mark.parametrize('gin_file', list(BRIEF))
def test_config_trains_briefly_and_its_export_plays_an_episode(runs, gin_file):
  results, process = runs
  assert gin_file in results, (process.stdout + process.stderr)[-4000:]
  row = results[gin_file]
  # Replay configs train a whole iteration (up to 256 steps) before they check the end.
  assert row['exported_step'] == row['train_step'] >= TRAIN_STEPS, row
  assert row['played_length'] >= 1 and np.isfinite(row['played_return']), row

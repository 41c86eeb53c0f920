"""Learning tests: each algorithm's config reaches its return threshold (slow).

Each runs the real program (`python -m learners.train_eval`) in a subprocess, exactly as
a user would, seeded by its config. The program exits non-zero if a confirmed
evaluation (10 episodes, then 10 more on fresh seeds) never reaches
`Experiment.target_return`; the test also reads the figures from its log.
"""
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = [
    ('dqn_per_cartpole.gin', 475.0),
    ('ppo_cartpole.gin', 475.0),
    ('impala_cartpole.gin', 475.0),
    ('clear_cartpole.gin', 475.0),
    ('appo_cartpole.gin', 475.0),
    ('sac_pendulum.gin', -200.0),
]


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', CASES, ids=[c[0] for c in CASES])
def test_config_reaches_threshold(tmp_path, gin_file, threshold):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = subprocess.run(
      [sys.executable, '-m', 'learners.train_eval', f'--root_dir={tmp_path}',
       f'--gin_file={gin_file}'],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  log = result.stdout + result.stderr
  assert result.returncode == 0, log[-4000:]
  number = r'(-?\d+(?:\.\d+)?)'
  returns = [float(r) for r in re.findall(r'\| eval return\s+' + number, log)]
  confirmation = [float(r) for r in re.findall(r'Confirmation evaluation: ' + number, log)]
  assert returns[-1] >= threshold, returns
  assert confirmation and confirmation[-1] >= threshold, confirmation
  assert os.path.isfile(os.path.join(tmp_path, 'policies', 'greedy_policy', 'saved_model.pb'))


LAUNCH_CASES = [('appo_cartpole.gin', 475.0), ('sac_pendulum.gin', -200.0)]


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', LAUNCH_CASES, ids=[c[0] for c in LAUNCH_CASES])
def test_config_reaches_threshold_under_launch(tmp_path, gin_file, threshold):
  """The same configs as separate programs (server, 2 collectors, trainer, evaluator).

  (DQN under launch is tested in test_programs.py.)
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = subprocess.run(
      [sys.executable, '-m', 'learners.launch', f'--root_dir={tmp_path}',
       f'--gin_file={gin_file}', '--num_collectors=2', '--timeout_s=600'],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
  with open(os.path.join(tmp_path, 'eval', 'results.json')) as f:
    last = json.load(f)[-1]
  assert last['reached_target'] and last['return'] >= threshold, last

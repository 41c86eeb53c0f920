"""Learning tests: each algorithm's config reaches its return threshold (slow).

Each config runs twice, as a user would run it, seeded by its config: in one process
(`python -m learners.train_eval`), which exits non-zero unless a confirmed evaluation (10
episodes, then 10 more on fresh seeds) reaches `Experiment.target_return`, the test also
reading the figures from its log; and as separate programs under `python -m
learners.launch` (Reverb server, 2 collectors, trainer, evaluator), where the
evaluator's last confirmed result must reach the threshold. The pixel configs run in
one process only (see ONE_PROCESS_CASES).
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from learners import config
from programs import evaluate_export, final_state, run_launch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = [
    ('dqn_per_cartpole.gin', 475.0),
    ('ppo_cartpole.gin', 475.0),
    ('impala_cartpole.gin', 475.0),
    ('clear_cartpole.gin', 475.0),
    ('appo_cartpole.gin', 475.0),
    ('sac_pendulum.gin', -200.0),
]
# Pixels (uint8 images through Reverb to IMPALA's CNN) and a Dict observation (CNN +
# MLP) on catch, where a random policy returns about -0.6 and the best 1: in one process
# only. Under launch PPO learns them too, but more slowly and unevenly (targets reached
# at train steps 121, 169 and 355, once not within 600): with --variable_update_period
# 50 the collectors act up to several train steps behind, and these configs' 16
# gradient steps per train call move the policy far in that time.
ONE_PROCESS_CASES = CASES + [
    ('ppo_pendulum.gin', -200.0),
    ('ppo_lstm_cartpole_masked.gin', 475.0),
    ('impala_lstm_cartpole_masked.gin', 475.0),
    ('ppo_pixel_catch.gin', 0.9),
    ('ppo_pixel_catch_dict.gin', 0.9),
]


def train_eval(root_dir, gin_file, *bindings):
  """Runs `python -m learners.train_eval` as a user would; returns the process."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  return subprocess.run(
      [sys.executable, '-m', 'learners.train_eval', f'--root_dir={root_dir}',
       f'--gin_file={gin_file}'] + [f'--gin_bindings={b}' for b in bindings],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', ONE_PROCESS_CASES,
                         ids=[c[0] for c in ONE_PROCESS_CASES])
def test_config_reaches_threshold(tmp_path, gin_file, threshold):
  result = train_eval(tmp_path, gin_file)
  log = result.stdout + result.stderr
  assert result.returncode == 0, log[-4000:]
  number = r'(-?\d+(?:\.\d+)?)'
  returns = [float(r) for r in re.findall(r'\| eval return\s+' + number, log)]
  confirmation = [float(r) for r in re.findall(r'Confirmation evaluation: ' + number, log)]
  assert returns[-1] >= threshold, returns
  assert confirmation and confirmation[-1] >= threshold, confirmation
  assert os.path.isfile(os.path.join(tmp_path, 'policies', 'greedy_policy', 'saved_model.pb'))


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', CASES, ids=[c[0] for c in CASES])
def test_config_reaches_threshold_under_launch(tmp_path, gin_file, threshold):
  """The same configs as separate programs (server, 2 collectors, trainer, evaluator).

  (Plain DQN under launch is tested in test_programs.py.)
  """
  result = run_launch(tmp_path, gin_file, [], num_collectors=2, timeout_s=600)
  assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
  with open(os.path.join(tmp_path, 'eval', 'results.json')) as f:
    last = json.load(f)[-1]
  assert last['reached_target'] and last['return'] >= threshold, last
  # A target-reached end: the trainer's final checkpoint and the three exports are at
  # its final train step, the one the evaluator confirmed, and the export plays.
  state = final_state(str(tmp_path))
  assert set(state.values()) == {last['train_step']}, (state, last)
  config.parse([gin_file])
  played = evaluate_export(os.path.join(tmp_path, 'policies', 'greedy_policy'),
                           last['confirmation_seed'])  # the confirmation's episodes
  assert played >= threshold, (played, state, last)


# The recurrent config on every seed it claims (seed 0 runs above): memory is the
# capability most sensitive to the seed. ppo_pendulum's seeds 1-2 left the suite for its
# time (65 s); benchmarks/solve_time.py --algos=ppo_pendulum measures them.
OTHER_SEEDS = (1, 2)
SEEDED_CASES = [('ppo_lstm_cartpole_masked.gin', 475.0)]


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', SEEDED_CASES, ids=[c[0] for c in SEEDED_CASES])
def test_config_reaches_threshold_on_other_seeds(tmp_path, gin_file, threshold):
  """Seeds 1 and 2 side by side (one process each; a one-process job's learning does
  not depend on its speed, so sharing the cores changes only the seconds)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  runs = {seed: subprocess.Popen(
      [sys.executable, '-m', 'learners.train_eval', f'--root_dir={tmp_path}/seed{seed}',
       f'--gin_file={gin_file}', f'--gin_bindings=Experiment.seed = {seed}'],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
          for seed in OTHER_SEEDS}
  logs = {}
  try:
    for seed, process in runs.items():
      logs[seed] = process.communicate(timeout=900)[0]
  finally:
    for process in runs.values():
      if process.poll() is None:
        process.kill()
        process.communicate()
  for seed, process in runs.items():
    assert process.returncode == 0, (seed, logs[seed][-4000:])
    confirmation = re.findall(r'Confirmation evaluation: (-?\d+(?:\.\d+)?)', logs[seed])
    assert confirmation and float(confirmation[-1]) >= threshold, (seed, confirmation)


@pytest.mark.slow
def test_masked_cartpole_needs_the_lstm(tmp_path):
  """Without velocities a feed-forward policy cannot balance the pole: the LSTM config
  with the LSTM removed fails within 300 train steps (77k env steps), about three times
  the most the LSTM needed on seeds 0-3 (24-104; half the config's budget, which
  covers the LSTM's slow runs)."""
  result = train_eval(tmp_path, 'ppo_lstm_cartpole_masked.gin',
                      'create_ppo_agent.lstm_size = None',
                      'create_ppo_agent.shared_torso = False',
                      'Experiment.num_train_steps = 300')
  log = result.stdout + result.stderr
  assert result.returncode == 1, log[-4000:]
  assert 'never reached the target 475.0' in log, log[-4000:]
  returns = [float(r) for r in re.findall(r'\| eval return\s+(-?\d+(?:\.\d+)?)', log)]
  assert returns and max(returns) < 300.0, returns


LAUNCH_SMOKE_CASES = ['ppo_lstm_cartpole_masked.gin', 'impala_pendulum.gin',
                      'ppo_pixel_catch_dict.gin']


@pytest.mark.parametrize('gin_file', LAUNCH_SMOKE_CASES)
def test_recurrent_continuous_and_pixel_configs_run_under_launch(tmp_path, gin_file):
  """A short job as separate programs: the collectors write the items (LSTM states,
  Gaussian samples, uint8 images beside a vector) the trainer trains on, and the
  exported policy loads and plays."""
  bindings = ['Experiment.num_train_steps = 20', 'Experiment.target_return = None',
              'Experiment.eval_interval = 10']
  result = run_launch(tmp_path, gin_file, bindings, num_collectors=2)
  assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
  state = final_state(str(tmp_path))
  assert set(state.values()) == {20}, state
  config.parse([gin_file], bindings)
  played = evaluate_export(os.path.join(tmp_path, 'policies', 'greedy_policy'), seed=0)
  assert np.isfinite(played), played

"""Learning tests: each algorithm's config reaches its return threshold (slow).

Each config runs twice, as a user would run it, seeded by its config: in one process
(`python -m learners.train_eval`), which exits non-zero unless a confirmed evaluation (10
episodes, then a confirmation over 100 fresh ones) reaches the case's threshold (bound
as `Experiment.target_return`), the test also reading the figures from its log; and as
separate programs under `python -m learners.launch` (Reverb server, 2 collectors,
trainer, evaluator), where the evaluator's last confirmed result must reach the
threshold. The pixel configs run in one process only (see ONE_PROCESS_CASES), SAC's too
(see LAUNCH_CASES). The one-process jobs run two at a time (`TwoAtATime`), the launched
ones alone.
"""
import json
import os
import re
import sys
import time

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
from learners.configuration import config
from programs import (CONFIRM_AT_ONCE, evaluate_export, final_state, replay_confirmation,
                      run_launch)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Prioritized DQN's evaluations swing between 250 and 480 for thousands of train steps
# before one at 475 is confirmed: its runs to 475 took 2,048-11,776 train steps (33-155
# s) in three suite runs of the one seed. Here it is held to PER_RETURN (a random policy
# returns about 22), which four runs (seed 0 twice, seeds 1 and 2) confirmed at train
# steps 512-1,536 (9-26 s of training; BUILD_NOTES); DQN's demo config (uniform replay)
# is held to 475 by test_train_eval.py, and benchmarks/solve_time.py --algos=dqn_per
# times 475.
PER_RETURN = 300.0
CASES = [
    ('dqn_per_cartpole.gin', PER_RETURN),
    ('ppo_cartpole.gin', 475.0),
    ('impala_cartpole.gin', 475.0),
    ('clear_cartpole.gin', 475.0),
    ('appo_cartpole.gin', 475.0),
    ('sac_pendulum.gin', -200.0),
]
# Pixels (uint8 images through Reverb to IMPALA's CNN) and a Dict observation (CNN +
# MLP) on catch, where a random policy returns about -0.6 and the best 1: in one process
# only. Under launch PPO learns them too, but more slowly and unevenly (when collectors
# pulled every 50 vector steps: targets at train steps 121, 169 and 355, once not within
# 600): separate collectors act a few train steps behind, and these configs' 16
# gradient steps per train call move the policy far in that time.
#
# PPO on Pendulum is held to PPO_PENDULUM_RETURN (a random policy returns about -1,200):
# seeds 0-2 confirmed it at train steps 35-45 (20-25 s a process), against 75-165 (31-61
# s) for the config's -200 (BUILD_NOTES); benchmarks/solve_time.py --algos=ppo_pendulum
# times -200.
PPO_PENDULUM_RETURN = -300.0
ONE_PROCESS_CASES = CASES + [
    ('ppo_pendulum.gin', PPO_PENDULUM_RETURN),
    ('impala_lstm_cartpole_masked.gin', 475.0),
    ('ppo_pixel_catch.gin', 0.9),
    ('ppo_pixel_catch_dict.gin', 0.9),
]


def train_eval_args(root_dir, gin_file, *bindings):
  """`python -m learners.train_eval` as a user runs it (confirming at once)."""
  return [sys.executable, '-m', 'learners.train_eval', f'--root_dir={root_dir}',
          f'--gin_file={gin_file}'] + [f'--gin_bindings={b}'
                                       for b in (CONFIRM_AT_ONCE, *bindings)]


# The recurrent config on three seeds: memory is the capability most sensitive to the
# seed. The test asks for what only memory reaches, MEMORY_RETURN, not the full 475: the
# feed-forward control below never evaluates above 48 in its 160 train steps, while the
# LSTM confirmed 300 at train steps 48, 80 and 32 on seeds 0-2 and needed 88-136 for
# 475, two thirds of the module's time on these seeds' jobs (benchmarks/solve_time.py
# --algos=ppo_lstm_masked times them to 475). With the acting LSTM's state zeroed at
# every step, seed 1 evaluated 23-48 over its whole budget (BUILD_NOTES). ppo_pendulum's
# seeds 1-2 left the suite for its time (65 s); benchmarks/solve_time.py
# --algos=ppo_pendulum measures them.
MEMORY_SEEDS = (0, 1, 2)
MEMORY_RETURN = 300.0
SEEDED_CASES = [('ppo_lstm_cartpole_masked.gin', MEMORY_RETURN)]
# Without velocities a feed-forward policy cannot balance the pole: the LSTM config with
# the LSTM removed must stay below MEMORY_RETURN for 160 train steps (41k env steps),
# half as many again as the most the LSTM needed to reach 475 on seeds 0-3 (24-104).
# (The control always runs its whole budget: 300 train steps made it the module's
# longest job.)
FEED_FORWARD_MASKED = ['create_ppo_agent.lstm_size = None',
                       'create_ppo_agent.shared_torso = False',
                       'Experiment.num_train_steps = 160']


def one_process_jobs():
  """Every one-process job of this module: name -> (gin file, bindings)."""
  jobs = {gin: (gin, (f'Experiment.target_return = {threshold}',))
          for gin, threshold in ONE_PROCESS_CASES}
  for gin, threshold in SEEDED_CASES:
    for seed in MEMORY_SEEDS:
      jobs[f'{gin}/seed{seed}'] = (gin, (f'Experiment.seed = {seed}',
                                         f'Experiment.target_return = {threshold}'))
  jobs['feed_forward_masked'] = ('ppo_lstm_cartpole_masked.gin', FEED_FORWARD_MASKED)
  return jobs


def jobs_of(item) -> list:
  """The one-process jobs a collected test waits for, in the order it waits."""
  gin = getattr(item, 'callspec', None) and item.callspec.params.get('gin_file')
  name = item.originalname
  if name == 'test_config_reaches_threshold':
    return [gin]
  if name == 'test_config_reaches_threshold_on_three_seeds':
    return [f'{gin}/seed{seed}' for seed in MEMORY_SEEDS]
  if name == 'test_masked_cartpole_needs_the_lstm':
    return ['feed_forward_masked']
  return []


class TwoAtATime:
  """Runs the one-process jobs two at a time, in the order the selected tests wait.

  A one-process job's learning does not depend on its speed (no config here has a time
  cap), so sharing the two cores changes only the seconds: waiting for a job starts the
  next one beside it. Jobs of tests not selected never start.
  """

  def __init__(self, root, order):
    self._root, self._order, self._jobs = root, order, one_process_jobs()
    self._running, self._done = {}, {}

  def _start(self, name):
    gin, bindings = self._jobs[name]
    root_dir = os.path.join(self._root, name.replace('/', '_'))
    log = root_dir + '.log'
    process = python_runs.start(train_eval_args(root_dir, gin, *bindings)[1:], log)
    self._running[name] = (process, log, root_dir, time.monotonic())

  def result(self, name):
    """Waits for job `name` (at most 900 s from its start); returns (returncode, log,
    root_dir)."""
    if name not in self._done:
      if name not in self._running:
        self._start(name)
      for later in self._order[self._order.index(name) + 1:]:
        if sum(p.poll() is None for p, *_ in self._running.values()) >= 2:
          break
        if later not in self._running and later not in self._done:
          self._start(later)
      process, log, root_dir, started = self._running.pop(name)
      try:
        process.wait(timeout=max(1.0, 900 - (time.monotonic() - started)))
      finally:
        if process.poll() is None:
          process.kill()
          process.wait()
      with open(log) as f:
        self._done[name] = (process.returncode, f.read(), root_dir)
    return self._done[name]

  def close(self):
    for process, _, _, _ in self._running.values():
      if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture(scope='module')
def jobs(request, tmp_path_factory):
  """The module's TwoAtATime, ordered as the selected tests run."""
  order = [job for item in request.session.items
           if item.module is request.module for job in jobs_of(item)]
  pool = TwoAtATime(str(tmp_path_factory.mktemp('learning')), order)
  yield pool
  pool.close()


NUMBER = r'(-?\d+(?:\.\d+)?)'


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', ONE_PROCESS_CASES,
                         ids=[c[0] for c in ONE_PROCESS_CASES])
def test_config_reaches_threshold(jobs, gin_file, threshold):
  returncode, log, root_dir = jobs.result(gin_file)
  assert returncode == 0, log[-4000:]
  returns = [float(r) for r in re.findall(r'\| eval return\s+' + NUMBER, log)]
  confirmation = [float(r) for r in re.findall(r'Confirmation evaluation: ' + NUMBER, log)]
  assert returns[-1] >= threshold, returns
  assert confirmation and confirmation[-1] >= threshold, confirmation
  assert os.path.isfile(os.path.join(root_dir, 'policies', 'greedy_policy', 'saved_model.pb'))


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', SEEDED_CASES, ids=[c[0] for c in SEEDED_CASES])
def test_config_reaches_threshold_on_three_seeds(jobs, gin_file, threshold):
  for seed in MEMORY_SEEDS:
    returncode, log, root_dir = jobs.result(f'{gin_file}/seed{seed}')
    assert returncode == 0, (seed, log[-4000:])
    confirmation = re.findall(r'Confirmation evaluation: ' + NUMBER, log)
    assert confirmation and float(confirmation[-1]) >= threshold, (seed, confirmation)
    assert os.path.isfile(os.path.join(root_dir, 'policies', 'greedy_policy',
                                       'saved_model.pb')), seed


@pytest.mark.slow
def test_masked_cartpole_needs_the_lstm(jobs):
  """The feed-forward control (FEED_FORWARD_MASKED) never reaches the target."""
  returncode, log, _ = jobs.result('feed_forward_masked')
  assert returncode == 1, log[-4000:]
  assert 'never reached the target 475 within' in log, log[-4000:]
  returns = [float(r) for r in re.findall(r'\| eval return\s+' + NUMBER, log)]
  assert returns and max(returns) < MEMORY_RETURN, returns


# SAC learns under launch too, but its launched run was the suite's slowest test (50-100
# s); what separate programs add for SAC (its collect policy pushed, the replay limiter,
# the exports) runs in test_suite_configs.py (sac_halfcheetah under launch), and SAC's
# learning in one process above.
# Under launch the CartPole configs learn to 200, not 475 (a random policy returns about
# 22): what separate programs add (pushed variables, collectors acting a few train
# steps behind, the evaluator's confirmation, the ordered stop's final saves) shows at
# 200 as at 475, and the one-process runs above hold each algorithm to its CASES
# threshold (475; prioritized DQN 300, the demo's DQN 475). Launched to 200 on seeds 0-2
# the configs took 18-35 s a job (BUILD_NOTES), against 24-107 s to 475 in the suite.
LAUNCH_THRESHOLD = 200.0
LAUNCH_CASES = [(gin, LAUNCH_THRESHOLD) for gin, _ in CASES if gin != 'sac_pendulum.gin']


@pytest.mark.slow
@pytest.mark.parametrize('gin_file,threshold', LAUNCH_CASES,
                         ids=[c[0] for c in LAUNCH_CASES])
def test_config_reaches_threshold_under_launch(tmp_path, gin_file, threshold):
  """The same configs as separate programs (server, 2 collectors, trainer, evaluator).

  (Plain DQN under launch is tested in test_programs.py.)
  """
  # CONFIRM_AT_ONCE (run_launch's too) is here for config.parse below: the replay plays
  # the confirmation's episodes in its envs.
  bindings = [CONFIRM_AT_ONCE, f'Experiment.target_return = {threshold}']
  result = run_launch(tmp_path, gin_file, bindings, num_collectors=2, timeout_s=600)
  assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
  with open(os.path.join(tmp_path, 'eval', 'results.json')) as f:
    last = json.load(f)[-1]
  assert last['reached_target'] and last['return'] >= threshold, last
  # A target-reached end: the trainer's final checkpoint and the three exports are at
  # its final train step, the one the evaluator confirmed, and the export plays.
  state = final_state(str(tmp_path))
  assert set(state.values()) == {last['train_step']}, (state, last)
  config.parse([gin_file], bindings)
  played = replay_confirmation(os.path.join(tmp_path, 'policies', 'greedy_policy'),
                               last['confirmation_seed'])  # the confirmation's episodes
  assert played >= threshold, (played, state, last)


LAUNCH_SMOKE_CASES = ['ppo_lstm_cartpole_masked.gin', 'impala_pendulum.gin',
                      'ppo_pixel_catch_dict.gin']


@pytest.mark.parametrize('gin_file', LAUNCH_SMOKE_CASES)
def test_recurrent_continuous_and_pixel_configs_run_under_launch(tmp_path, gin_file):
  """A short job as separate programs: the collector writes the items (LSTM states,
  Gaussian samples, uint8 images beside a vector) the trainer trains on, and the
  exported policy loads and plays."""
  bindings = ['Experiment.num_train_steps = 20', 'Experiment.target_return = None',
              'Experiment.eval_interval = 10']
  # One collector: what several collectors add is proven by the learning runs above.
  result = run_launch(tmp_path, gin_file, bindings, num_collectors=1)
  assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
  state = final_state(str(tmp_path))
  assert set(state.values()) == {20}, state
  config.parse([gin_file], bindings)
  played = evaluate_export(os.path.join(tmp_path, 'policies', 'greedy_policy'), seed=0)
  assert np.isfinite(played), played

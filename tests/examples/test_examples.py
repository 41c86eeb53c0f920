"""The single-file examples: short, runnable as a user runs them, and they solve CartPole.

Each example runs as a subprocess (`python examples/<name> --root_dir=...`), must exit 0
after printing a final eval return >= 475, and must leave a greedy policy that plain
`tf.saved_model.load` serves. Their `main(settings)` is also called in-process with a
tiny budget, as a test or notebook would, to check what it returns when the target is
not reached.
"""
import importlib.util
import os
import re
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import python_runs  # tests/python_runs.py

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = ['dqn_minimal.py', 'ppo_minimal.py']
TARGET = 475.0
MAX_LINES = 200
RESULT_KEYS = {'eval_return', 'train_step', 'env_steps', 'policy_dir', 'reached_target'}


def _path(name: str) -> str:
  return os.path.join(REPO, 'examples', name)


def _load(name: str):
  """Imports an example file as a module (examples/ is no package)."""
  spec = importlib.util.spec_from_file_location(name[:-3], _path(name))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _run(name: str, *args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  return python_runs.run([_path(name), *args], timeout=600, env=env)


def _play(policy_dir: str, episodes: int = 3, seed: int = 123) -> float:
  """Average return of the export, served by plain TF's 'action' signature, on
  CartPole-v1 episodes stepped with gymnasium directly."""
  action_fn = tf.saved_model.load(policy_dir).signatures['action']
  env = gym.make('CartPole-v1')
  returns = []
  for episode in range(episodes):
    observation, _ = env.reset(seed=seed + episode)
    done, total, first = False, 0.0, True
    while not done:
      outputs = action_fn(step_type=tf.constant([0 if first else 1], tf.int32),
                          reward=tf.zeros([1]), discount=tf.ones([1]),
                          observation=tf.constant(observation[None], tf.float32))
      action = outputs['action'].numpy()
      assert action.shape == (1,) and action[0] in (0, 1), action
      observation, reward, terminated, truncated, _ = env.step(int(action[0]))
      total, first, done = total + reward, False, terminated or truncated
    returns.append(total)
  env.close()
  return float(np.mean(returns))


@pytest.mark.parametrize('name', EXAMPLES)
def test_example_is_a_short_single_file(name):
  with open(_path(name)) as f:
    lines = f.read().splitlines()
  assert len(lines) < MAX_LINES, f'{name}: {len(lines)} lines; keep it under {MAX_LINES}.'
  imports = [line for line in lines if line.startswith(('import ', 'from '))]
  assert not any('learners' in line for line in imports), imports  # the raw pieces only


@pytest.mark.slow
@pytest.mark.parametrize('name', EXAMPLES)
def test_example_solves_cartpole_and_exports_a_plain_tf_policy(tmp_path, name):
  root_dir = str(tmp_path / 'run')
  result = _run(name, f'--root_dir={root_dir}')
  log = result.stdout + result.stderr
  assert result.returncode == 0, log[-4000:]
  progress = re.findall(r'\| eval return\s+(-?\d+\.\d+)', result.stdout)
  final = re.findall(r'Final eval return: (-?\d+\.\d+)', result.stdout)
  assert progress and final, log[-4000:]
  assert float(final[-1]) == float(progress[-1]) >= TARGET, result.stdout
  policy_dir = re.findall(r'Greedy policy exported to: (.+)', result.stdout)[-1].strip()
  assert policy_dir == os.path.join(root_dir, 'greedy_policy')
  # Random play averages ~20; the trained greedy policy should be far past that.
  assert _play(policy_dir) > 200.0


@pytest.mark.integration
@pytest.mark.parametrize('name', EXAMPLES)
def test_main_returns_its_figures_when_the_budget_runs_out(tmp_path, name):
  module = _load(name)
  # Two train steps: DQN's by one per iteration (with its default 128 per iteration, a
  # greedy policy at 128 steps once played 477 over the 2 episodes), PPO's two calls.
  per_iteration = dict(train_steps_per_iteration=1) if name == 'dqn_minimal.py' else {}
  settings = module.Settings(root_dir=str(tmp_path), num_train_steps=2, eval_interval=1,
                             num_eval_episodes=2, **per_iteration)
  result = module.main(settings)
  assert RESULT_KEYS <= set(result), result
  assert not result['reached_target'] and result['eval_return'] < TARGET
  assert result['train_step'] >= 2 and result['env_steps'] > 0
  assert tf.saved_model.contains_saved_model(result['policy_dir'])


@pytest.mark.integration
def test_example_exits_non_zero_when_the_target_is_not_reached(tmp_path):
  result = _run('ppo_minimal.py', f'--root_dir={tmp_path}', '--num_train_steps=1',
                '--eval_interval=1', '--num_eval_episodes=2')
  assert result.returncode != 0, result.stdout
  assert 'never reached 475.0' in result.stderr, result.stderr[-2000:]

"""`pip install git+<repository>` (not only `pip install -e .`) installs tfrl with its
bundled configs, and the console scripts find a config by its bare name."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
  """The repository's HEAD installed as a user would from git, into a fresh folder."""
  if not os.path.isdir(os.path.join(REPO, '.git')):
    pytest.fail('tests/test_packaging.py needs the repository as a git checkout')
  target = tmp_path_factory.mktemp('site')
  result = subprocess.run(
      [sys.executable, '-m', 'pip', 'install', '--quiet', '--no-deps',
       '--no-build-isolation', '--target', str(target), f'git+file://{REPO}'],
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  return target


def _run(installed, args, cwd):
  # The installed copy only: PYTHONPATH names it, and the cwd is not the repository.
  env = dict(os.environ, PYTHONPATH=str(installed))
  return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=300)


@pytest.mark.integration
def test_the_configs_are_installed_with_the_package(installed, tmp_path):
  result = _run(installed, [sys.executable, '-c',
                            'from learners.configuration import config; '
                            'print(config.resolve_gin_file("ppo_atari.gin"))'], tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == os.path.join(str(installed), 'learners', 'configs',
                                               'ppo_atari.gin')
  bundled = set(os.listdir(os.path.join(REPO, 'learners', 'configs')))
  assert set(os.listdir(os.path.join(installed, 'learners', 'configs'))) == bundled


@pytest.mark.integration
def test_an_installed_console_script_trains_from_a_bundled_config(installed, tmp_path):
  script = os.path.join(installed, 'bin', 'tfrl-train-eval')
  result = _run(installed, [
      sys.executable, script, f'--root_dir={tmp_path / "run"}', '--gin_file=ppo_cartpole.gin',
      '--gin_bindings=Experiment.num_train_steps = 8',
      '--gin_bindings=Experiment.eval_interval = 8',
      '--gin_bindings=Experiment.target_return = None'], tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Trained to step 8 ' in result.stdout
  assert os.path.isfile(tmp_path / 'run' / 'policies' / 'greedy_policy' / 'saved_model.pb')

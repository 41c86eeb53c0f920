"""A program's --help answers from its flags alone: usage on stdout, no TensorFlow.

Each program runs as a user runs it, `python -m learners.<program> --help`, under
`-X importtime`, whose report on stderr names every module the process imported.
"""
import ast
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# absl's --help prints the usage and exits 1 (absl.app.HelpFlag), in every program.
HELP_STATUS = 1
HEAVY = ('tensorflow', 'tf_agents', 'reverb')


def _console_script_programs():
  """The learners modules behind setup.py's console scripts: every program a user runs."""
  with open(os.path.join(REPO, 'setup.py')) as f:
    return re.findall(r"'tfrl-[\w-]+=learners\.(\w+):run_main'", f.read())


PROGRAMS = _console_script_programs()


def test_every_program_is_checked():
  assert set(PROGRAMS) >= {'train_eval', 'launch', 'train', 'collect', 'eval',
                           'reverb_server', 'pbt', 'export_policy', 'convert_dataset'}


def test_the_trainers_strategy_choices_are_tfrl_distributes():
  """learners/train.py repeats them so that its --help imports no TensorFlow. (Read
  from its source: importing the program here would define its flags in this process.)"""
  from tfrl import distribute  # pylint: disable=g-import-not-at-top
  with open(os.path.join(REPO, 'learners', 'train.py')) as f:
    tree = ast.parse(f.read())
  repeated = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and
                  [getattr(t, 'id', None) for t in node.targets] == ['STRATEGIES'])
  assert repeated == distribute.STRATEGIES


def _imported_modules(importtime_report: str):
  return set(re.findall(r'^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$',
                        importtime_report, re.MULTILINE))


@pytest.mark.parametrize('program', PROGRAMS)
def test_help_imports_no_tensorflow(program):
  run = subprocess.run(
      [sys.executable, '-X', 'importtime', '-m', f'learners.{program}', '--help'],
      cwd=REPO, capture_output=True, text=True, timeout=120,
      env=dict(os.environ, PYTHONPATH=REPO))
  assert run.returncode == HELP_STATUS, run.stderr[-2000:]
  assert '--root_dir' in run.stdout or 'flags' in run.stdout, run.stdout[-2000:]
  assert 'Traceback' not in run.stderr, run.stderr[-2000:]
  modules = _imported_modules(run.stderr)
  assert f'learners.{program}' in modules or 'learners' in modules  # report was read
  assert not modules & set(HEAVY), f'--help imported {sorted(modules & set(HEAVY))}'

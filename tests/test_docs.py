"""The documentation site builds with no warning, and the README's links lead somewhere.

`mkdocs build --strict` fails on any warning: a link to a page or an anchor that does
not exist, a page missing from the nav, an include (`--8<--`) of a file that is not
there, a module the API pages name that griffe cannot find. mkdocstrings reads the
source statically, so the build imports no TensorFlow.
"""
import ast
import os
import re
import subprocess
import sys

import pytest

import python_runs  # tests/python_runs.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.integration
def test_the_site_builds_with_no_warning(tmp_path):
  env = dict(os.environ, NO_MKDOCS_2_WARNING='1')  # Material's banner about MkDocs 2
  result = subprocess.run(
      [sys.executable, '-m', 'mkdocs', 'build', '--strict', '--site-dir', str(tmp_path)],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  output = result.stdout + result.stderr
  assert result.returncode == 0, output
  warnings = [line for line in output.splitlines() if line.startswith('WARNING')]
  assert not warnings, output
  assert os.path.isfile(tmp_path / 'index.html')
  assert os.path.isfile(tmp_path / 'reference' / 'learner' / 'index.html')


def test_the_readme_links_to_files_that_exist():
  with open(os.path.join(REPO, 'README.md')) as f:
    readme = f.read()
  targets = re.findall(r'\]\(([^)#\s]+)(?:#[^)]*)?\)', readme)
  local = [t for t in targets if '://' not in t]
  assert local, 'the README links into docs/'
  missing = [t for t in local if not os.path.exists(os.path.join(REPO, t))]
  assert not missing, missing


def test_the_readme_is_short_and_holds_the_results_markers():
  with open(os.path.join(REPO, 'README.md')) as f:
    lines = f.read().splitlines()
  assert len(lines) <= 250, len(lines)
  start = lines.index('<!-- results:headline:start -->')
  end = lines.index('<!-- results:headline:end -->')
  assert start < end


def test_make_docs_installs_the_dev_extras_docs_packages():
  """The Makefile's docs-install target and setup.py's dev extras name the same
  packages with the same ranges."""
  with open(os.path.join(REPO, 'Makefile')) as f:
    makefile = f.read()
  with open(os.path.join(REPO, 'setup.py')) as f:
    setup = f.read()
  make_line = re.search(r'^DOCS_PACKAGES := (.*)$', makefile, re.M).group(1)
  in_make = sorted(re.findall(r"'([^']+)'", make_line))
  docs = [node.value for node in ast.parse(setup).body if isinstance(node, ast.Assign)
          and [getattr(t, 'id', None) for t in node.targets] == ['DOCS']]
  in_setup = sorted(ast.literal_eval(docs[0]))
  assert in_make == in_setup
  assert re.search(r"'dev': \[[^\]]*\] \+ DOCS \+", setup)


# The README's example with a budget of a few train steps: what it prints shows each
# line ran (the training's return, an action, the export's directory).
_EXAMPLE_BUDGET = '''
import functools
from learners import train_eval
train_eval.run = functools.partial(
    train_eval.run, num_train_steps=8, eval_interval=8, initial_collect_steps=64,
    num_eval_episodes=1, target_return=None)
'''


@pytest.mark.integration
def test_the_readmes_example_runs(tmp_path):
  with open(os.path.join(REPO, 'README.md')) as f:
    example = re.search(r'```python\n(.*?)```', f.read(), re.S).group(1)
  assert len(example.splitlines()) <= 10, example
  result = python_runs.run(['-c', _EXAMPLE_BUDGET + example], timeout=600,
                           cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr[-3000:]
  eval_return, action, policy_dir = result.stdout.split()[-3:]
  assert float(eval_return) > 0 and action in ('0', '1')
  assert os.path.isdir(tmp_path / policy_dir)
  assert policy_dir == os.path.join('runs', 'quickstart', 'policies', 'greedy_policy')

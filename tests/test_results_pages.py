"""benchmarks/results_pages.py: the committed results pages (docs/results/, the README's
headline table) are what the recorded runs in benchmarks/runs/ make, and a changed run
changes its page.

The generator runs as a program, as a user runs it: it imports no TensorFlow, and the
benchmarks' modules it imports stay out of the tests' process. Its check draws nothing (a
curve's PNG is keyed by the hash of its inputs and of the plotting code), so each run
takes a second or two. When the first test fails, `python benchmarks/results_pages.py`
writes what it names (and draws the curves whose inputs changed, about a minute).
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'benchmarks', 'results_pages.py')
RUNS = os.path.join(REPO, 'benchmarks', 'runs')
PAGES = os.path.join(REPO, 'docs', 'results')


def _generate(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, capture_output=True,
                        text=True, timeout=300, check=False)


def test_the_committed_pages_are_what_the_recorded_runs_make():
  done = _generate('--check')
  assert done.returncode == 0, (
      'docs/results/ or the README\'s headline table differ from what benchmarks/runs/ '
      f'makes (run python benchmarks/results_pages.py):\n{done.stdout}{done.stderr}')


def test_a_changed_run_changes_its_page_and_no_other(tmp_path):
  runs, pages = tmp_path / 'runs', tmp_path / 'results'
  shutil.copytree(RUNS, runs)
  shutil.copytree(PAGES, pages)
  # SB3's seed 0 of DQN on LunarLander reaching 200 ten thousand env steps later.
  path = runs / 'dqn_lunarlander_5seeds.jsonl'
  rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  changed = next(r for r in rows if r['side'] == 'SB3' and r['seed'] == 0)
  before = changed['env_steps']
  changed['env_steps'] += 10_000
  path.write_text(''.join(json.dumps(row) + '\n' for row in rows))
  args = [f'--runs_dir={runs}', f'--out_dir={pages}', '--readme=', '--no_figures']

  check = _generate('--check', *args)
  assert check.returncode == 1, check.stdout + check.stderr
  named = [line.strip() for line in check.stdout.splitlines()[1:]]
  assert [os.path.basename(p) for p in named] == ['dqn.md'], check.stdout

  assert _generate(*args).returncode == 0
  new = (pages / 'dqn.md').read_text()
  old = open(os.path.join(PAGES, 'dqn.md')).read()
  seed_row = f'| 0 | 118,526 | {before + 10_000:,} |'
  assert seed_row in new and seed_row not in old
  others = sorted(name for name in os.listdir(PAGES)
                  if name.endswith('.md') and name != 'dqn.md')
  match, mismatch, errors = filecmp.cmpfiles(PAGES, pages, others, shallow=False)
  assert (mismatch, errors) == ([], []), (mismatch, errors)
  assert match == others

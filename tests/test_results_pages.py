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
  path = runs / 'dqn_lunarlander_2026-12-01.jsonl'
  rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  changed = next(r for r in rows if r['side'] == 'SB3' and r['seed'] == 0)
  tfrl = next(r for r in rows if r['side'] == 'tfrl' and r['seed'] == 0)
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
  seed_row = f'| 0 | {tfrl["env_steps"]:,} | {before + 10_000:,} |'
  assert seed_row in new and seed_row not in old
  others = sorted(name for name in os.listdir(PAGES)
                  if name.endswith('.md') and name != 'dqn.md')
  match, mismatch, errors = filecmp.cmpfiles(PAGES, pages, others, shallow=False)
  assert (mismatch, errors) == ([], []), (mismatch, errors)
  assert match == others


# -- The data offline and hybrid runs trained on ----------------------------------------

CHECKSUM, OTHER, DESCRIBED = '0123456789abcdef', 'fedcba9876543210', '00112233aabbccdd'


def _with_checksums(path, checksum_of) -> None:
  """Sets (or, where `checksum_of` returns None, leaves out) each run's checksum."""
  rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  for row in rows:
    row.pop('dataset_checksum', None)
    checksum = checksum_of(row)
    if checksum is not None:
      row['dataset_checksum'] = checksum
  path.write_text(''.join(json.dumps(row) + '\n' for row in rows))


def _pages(tmp_path, change) -> dict:
  """The offline and hybrid pages the recorded runs make after `change(runs_dir)`."""
  runs, pages = tmp_path / 'runs', tmp_path / 'results'
  shutil.copytree(RUNS, runs)
  change(runs)
  done = _generate(f'--runs_dir={runs}', f'--out_dir={pages}', '--readme=',
                   '--no_figures', '--pages=offline,hybrid')
  assert done.returncode == 0, done.stdout + done.stderr
  return {page: (pages / f'{page}.md').read_text() for page in ('offline', 'hybrid')}


def _section(text: str, heading: str) -> str:
  """A page's text from `heading` to the next heading."""
  start = text.index(heading)
  end = text.find('\n#', start + len(heading))
  return text[start:] if end < 0 else text[start:end]


def test_the_committed_offline_and_hybrid_runs_say_their_checksum_was_not_recorded():
  offline = open(os.path.join(PAGES, 'offline.md')).read()
  hybrid = open(os.path.join(PAGES, 'hybrid.md')).read()
  assert ('Dataset checksum: not recorded by these runs (tfrl CQL seeds 0, 1, 2; d3rlpy '
          'DiscreteCQL seeds 0, 1, 2).') in offline
  # Every dataset of every offline record: 5 tables.
  assert offline.count('Dataset checksum: not recorded by these runs (') == 5
  assert 'Dataset checksum: not recorded by these runs (seeds 0, 1, 2, 3, 4, 5, 6).' in hybrid
  assert 'Dataset checksum: not recorded by these runs (seeds 0, 1, 2).' in hybrid


def test_runs_of_one_checksum_show_it(tmp_path):
  def change(runs):
    _with_checksums(runs / 'offline.jsonl', lambda row: CHECKSUM)
    _with_checksums(runs / 'hybrid_medium_replay_36ep.jsonl', lambda row: CHECKSUM)

  pages = _pages(tmp_path, change)
  lunarlander = _section(pages['offline'], '#### lunarlander_mixed')
  assert f'Dataset checksum: `{CHECKSUM}` (all 6 runs).' in lunarlander
  assert f'Dataset checksum: `{CHECKSUM}` (all 7 runs).' in pages['hybrid']
  # Shown once, on its own line: not again among hybrid.py's settings.
  assert pages['hybrid'].count(CHECKSUM) == 1
  assert 'dataset_checksum' not in pages['hybrid']


def test_runs_of_two_checksums_or_of_none_are_flagged(tmp_path):
  def change(runs):
    _with_checksums(runs / 'offline.jsonl', lambda row: (
        OTHER if (row['algo'], row['seed']) == ('tfrl_cql', 2) else CHECKSUM))
    _with_checksums(runs / 'hybrid_medium_replay_36ep.jsonl',
                    lambda row: None if row['seed'] == 6 else CHECKSUM)

  pages = _pages(tmp_path, change)
  lunarlander = _section(pages['offline'], '#### lunarlander_mixed')
  assert (f'Dataset checksum: not the same for all these runs: `{CHECKSUM}` (tfrl CQL '
          f'seeds 0, 1; d3rlpy DiscreteCQL seeds 0, 1, 2); `{OTHER}` (tfrl CQL seed 2).'
          ) in lunarlander
  assert (f'Dataset checksum: not the same for all these runs: `{CHECKSUM}` (seeds 0, 1, '
          '2, 3, 4, 5); not recorded (seed 6).') in pages['hybrid']


def test_a_description_of_other_data_than_the_runs_is_flagged(tmp_path):
  def change(runs):
    _with_checksums(runs / 'offline.jsonl', lambda row: CHECKSUM)
    path = runs / 'offline_datasets_2026-11-27.txt'
    text = path.read_text()
    line = next(l for l in text.splitlines() if l.startswith('dataset lunarlander_mixed'))
    path.write_text(text.replace(line, f'{line}, checksum {DESCRIBED}'))

  lunarlander = _section(_pages(tmp_path, change)['offline'], '#### lunarlander_mixed')
  assert (f'Dataset checksum: `{CHECKSUM}` (all 6 runs). The description above is of the '
          f'data of checksum `{DESCRIBED}`.') in lunarlander


# -- Populations of two modes under one budget -----------------------------------------


def _population(reached: bool, env_steps: int, seconds: float) -> dict:
  return {'reached': reached, 'env_steps': env_steps if reached else None,
          'member': 1 if reached else None, 'copies': 2, 'seconds': seconds,
          'starts': {'0': {}, '1': {}}}


def test_populations_of_two_modes_are_compared_per_seed_where_both_reached(tmp_path):
  runs, pages = tmp_path / 'runs', tmp_path / 'results'
  populations = {0: (_population(True, 100_000, 300.0), _population(True, 80_000, 150.0)),
                 1: (_population(True, 200_000, 400.0), _population(True, 100_000, 400.0)),
                 2: (_population(True, 50_000, 100.0), _population(False, 0, 900.0))}
  for seed, (sync, asynchronous) in populations.items():
    directory = runs / 'modes' / f's{seed}'
    directory.mkdir(parents=True)
    (directory / 'tuned.json').write_text(json.dumps({'env_steps': 500_000 + seed}))
    (directory / 'population.json').write_text(json.dumps(sync))
    (directory / 'population_async.json').write_text(json.dumps(asynchronous))
  (runs / 'modes.meta.json').write_text(json.dumps({
      'page': 'pbt', 'kind': 'pbt', 'runs_dir': 'modes', 'seeds': [0, 1, 2],
      'modes': {'sync': 'population', 'async': 'population_async'},
      'title': 'Two modes', 'command': ['x'], 'commit': 'abc', 'date': 'today',
      'protocol': 'one budget', 'machine': '2 CPUs'}))
  done = _generate(f'--runs_dir={runs}', f'--out_dir={pages}', '--readme=',
                   '--no_figures', '--pages=pbt')
  assert done.returncode == 0, done.stdout + done.stderr
  page = (pages / 'pbt.md').read_text()
  assert ('| 0 | 500,000 | member 1 at 100,000 | 2 | 300 | member 1 at 80,000 | 2 | 150 | '
          '0.80x | 0.50x |') in page
  assert ('| 2 | 500,002 | member 1 at 50,000 | 2 | 100 | not reached | 2 | 900 | n/a | '
          'n/a |') in page
  # Seeds 0 and 1 only: the medians of (0.8, 0.5) and (0.5, 1.0).
  assert ('async over sync, env steps to the target: median 0.65x over the 2 of 3 seeds '
          'where both populations reached it.') in page
  assert ('async over sync, seconds to the target: median 0.75x over the 2 of 3 seeds '
          'where both populations reached it.') in page


# -- Arms run to a target --------------------------------------------------------------


def test_arms_to_a_target_count_an_unsolved_seed_as_never(tmp_path):
  runs, pages = tmp_path / 'runs', tmp_path / 'results'
  (runs / 'arms').mkdir(parents=True)
  rows = [{'arm': 'b', 'seed': seed, 'solved': True, 'steps': 100 * (seed + 1),
           'confirmations': [-1.0]} for seed in range(3)]
  rows += [{'arm': 'a', 'seed': 0, 'solved': True, 'steps': 50, 'confirmations': [-3.0, -1.0]},
           {'arm': 'a', 'seed': 1, 'solved': False, 'steps': None, 'confirmations': [-9.0]},
           {'arm': 'a', 'seed': 2, 'solved': False, 'steps': None, 'confirmations': []}]
  (runs / 'arms' / 'runs.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
  (runs / 'arms.meta.json').write_text(json.dumps({
      'page': 'offline', 'kind': 'to_target', 'runs': 'arms/runs.jsonl',
      'measures': [['steps to it', 'steps', 'steps']], 'title': 'Arms',
      'command': ['x'], 'commit': 'abc', 'date': 'today', 'protocol': 'p'}))
  done = _generate(f'--runs_dir={runs}', f'--out_dir={pages}', '--readme=',
                   '--no_figures', '--pages=offline')
  assert done.returncode == 0, done.stdout + done.stderr
  page = (pages / 'offline.md').read_text()
  # In the file's order; of 3 seeds the IQM is their mean, and two of arm a's never got
  # there; a's one solved seed was confirmed at its second candidate.
  assert ('| b | 3 of 3 (0, 1, 2) | 200 [100, 300] | 3 |\n'
          '| a | 1 of 3 (0, 1, 2) | never [50, never] | 0 |\n') in page

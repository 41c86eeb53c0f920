"""Writes the benchmark results pages from the recorded runs in benchmarks/runs/.

    .venv/bin/python benchmarks/results_pages.py           # writes them
    .venv/bin/python benchmarks/results_pages.py --check   # exit 1 naming each file
                                                           # that differs from its output

What it writes:
  docs/results/<page>.md  for each page of PAGES: its records, each with its table(s), its
                          curves, the command, the commit, the date and the protocol.
                          Markdown fragments whose headings start at level 3: the
                          algorithm page docs/algorithms/<page>.md includes its own
                          under its "Results" heading (`--8<-- "docs/results/<page>.md"`),
                          so image links are written to work from docs/algorithms/ and
                          from docs/results/ alike.
  docs/results/index.md   links to the algorithm pages and to the pages of no algorithm,
                          the records of no page (start-up, reliability, ...), and the
                          changelog: runs not shown, with why.
  docs/results/img/       learning curves and profiles drawn from the runs, each PNG beside
                          <name>.png.inputs.sha256, the hash of what drew it (its data and
                          the plotting code): a PNG is drawn again only when that changes,
                          and --check draws nothing; and figures copied from
                          benchmarks/curves/ for records whose runs were not kept.
  README.md               the headline table, between the lines
                          <!-- results:headline:start --> and <!-- results:headline:end -->
                          where the README has them.

What it reads: every benchmarks/runs/<name>.meta.json, one record or {"records": [...]},
and the files the records name; every other file there must be named by a record (or by
benchmarks/runs/changelog.json). A record names its page ('page', a page or a list of
them), its 'title', how it was run ('command', 'commit', 'date', 'protocol', optionally
'machine', 'description' and 'notes': facts as recorded when it ran; a commit that was
not recorded is null and the page says so) and, by its 'kind', what to make of which
files:
  solve_time     solve_time.py's --json_out runs ('runs', 'algo'; optionally
                 'budget_seconds', 'env_step_budgets', 'measures' (name prefixes to
                 keep), 'peer_label', 'curves'): summary.py's table of each measure's
                 central value and interval on both sides with their comparison, each
                 seed's values, the curves, and (with a peer) each measure's performance
                 profiles (curves.plot_profiles).
  arms           ablation.py's runs, a file per arm ('arms': [name, file, bindings],
                 'baseline', 'to_target' or 'env_step_budgets', optionally 'peer':
                 {'runs', 'side', 'label', 'algo'} and 'curves': the arms to draw): each
                 arm's central value and interval against the baseline's and the peer's.
  runs           single solve_time runs side by side ('algo', 'rows': [label, file],
                 optionally 'budget_seconds' and 'measures').
  hybrid         hybrid.py's runs against online SAC's ('runs', 'online_runs',
                 'online_env_steps').
  offline        offline.py's runs ('runs', 'sources' (algorithm -> another file),
                 'datasets' (name -> env), 'grad_steps', 'algos', 'labels',
                 'comparisons', and 'datasets_file': offline.py's printed description of
                 the datasets, which are not kept).
                 Both kinds say, per dataset, the content checksum of the data the runs
                 trained on, from each run's 'dataset_checksum': the one all runs name,
                 else each with its runs (a run without one: "not recorded").
  task_sequence  task_sequence.py's tasks.json per algorithm and seed ('runs_dir',
                 'algos', 'seeds', 'labels', 'ratios'); the accuracy matrix and the
                 transfer figures are computed from each run's history and switches.
  multi_task     multi_task.py's summaries ('runs_dir', 'modes', 'seeds', 'thresholds').
  pbt            pbt_lunarlander.py's summaries ('runs_dir', 'seeds', and 'population'
                 with its starting points alone, or 'modes': label -> population, the
                 populations of one budget B side by side).
  to_target      runs of arms to a target, one JSON line each ('runs': the file; each
                 line's 'arm', 'seed', 'solved', 'confirmations' and the 'measures'
                 named: [label, field, unit]): per arm, the seeds solved and each
                 measure's central value and interval, an unsolved seed as never.
  output         a benchmark's printed output where that is the record (throughput
                 ratios, start-up times, ...): <name>.txt beside the meta file, shown as
                 printed, and/or <name>.md, a table as it was recorded.
An output or pbt record may name 'figures' (PNGs under benchmarks/curves/ to show), a
solve_time, arms or offline record a 'headline' (a row of the README's table). A record
with 'superseded' (why it is not shown) is not rendered: the changelog names it and its
'files', as it does changelog.json's entries.

Statistics come from benchmarks/stats.py through summary.py (the IQM over seeds with
rliable's 95% percentile bootstrap interval, seed 0), so the output is the same on every
run: inputs are read in sorted order and nothing records when the pages were made.
"""
import argparse
import dataclasses
import glob
import hashlib
import json
import math
import os
import re
import shutil
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCHMARKS)
for _path in (BENCHMARKS, REPO):  # its helpers beside it and learners, wherever it runs
  if _path not in sys.path:
    sys.path.insert(0, _path)

# pylint: disable=g-import-not-at-top,wrong-import-position
import curves  # benchmarks/curves.py
import pbt_criterion  # benchmarks/pbt_criterion.py
import stats  # benchmarks/stats.py
import summary  # benchmarks/summary.py
import task_curves  # benchmarks/task_curves.py
import tasks  # benchmarks/tasks.py
from learners.configuration import transfer  # numpy alone, no TensorFlow
# pylint: enable=g-import-not-at-top,wrong-import-position

# The pages: the algorithm pages (docs/algorithms/<page>.md include docs/results/<page>.md)
# and the pages of no algorithm, which the index links to.
ALGORITHM_PAGES = {
    'dqn': 'DQN and prioritized DQN', 'ppo': 'PPO', 'sac': 'SAC', 'impala': 'IMPALA',
    'appo': 'APPO', 'clear': 'CLEAR', 'offline': 'Offline RL: CQL and IQL',
    'hybrid': 'Hybrid SAC: online learning from a dataset',
    'task_sequence': 'Forgetting on a task sequence: IMPALA and CLEAR',
    'multi_task': 'Multi-task IMPALA', 'pbt': 'Population-based training'}
OTHER_PAGES = {'throughput': 'Throughput: collection, learner, replay, scaling, Atari'}
PAGES = {**ALGORITHM_PAGES, **OTHER_PAGES}
INDEX = 'index'
# The command that makes a page's first run, said where a page has no record.
FIRST_RUN = {
    'dqn': 'benchmarks/solve_time.py --algos=dqn,dqn_lunarlander',
    'ppo': 'benchmarks/solve_time.py --algos=ppo,ppo_lunarlander',
    'sac': 'benchmarks/solve_time.py --algos=sac,sac_halfcheetah',
    'impala': 'benchmarks/solve_time.py --algos=impala,impala_breakout --skip_peer',
    'appo': 'benchmarks/solve_time.py --algos=appo,appo_breakout --skip_peer',
    'clear': 'benchmarks/solve_time.py --algos=clear --skip_peer',
    'offline': 'benchmarks/offline.py', 'hybrid': 'benchmarks/hybrid.py',
    'task_sequence': 'benchmarks/task_sequence.py',
    'multi_task': 'benchmarks/multi_task.py', 'pbt': 'benchmarks/pbt_lunarlander.py',
    'throughput': 'benchmarks/collect_throughput.py'}

RUNS_DIR = os.path.join(BENCHMARKS, 'runs')
OUT_DIR = os.path.join(REPO, 'docs', 'results')
README = os.path.join(REPO, 'README.md')
HEADLINE_START = '<!-- results:headline:start -->'
HEADLINE_END = '<!-- results:headline:end -->'
CHANGELOG = 'changelog.json'
IMAGES = 'img'
# An image path that works from docs/results/<page>.md and from the algorithm page that
# includes it, docs/algorithms/<page>.md.
IMAGE_LINK = '../results/img/'
HASH_SUFFIX = '.inputs.sha256'
PLOT_CODE = ('curves.py', 'task_curves.py', 'stats.py')  # a change to these redraws
GENERATED = ('<!-- Generated by benchmarks/results_pages.py from benchmarks/runs/: edit '
             'those, not this file. -->')

SETTINGS = summary.Settings()
CENTRAL = stats.NAMES[SETTINGS.statistic]
CI = f'{SETTINGS.confidence:.0%} CI'


class RecordError(ValueError):
  """A meta file that cannot be rendered: a missing field or file, an unknown kind."""


@dataclasses.dataclass
class Figure:
  """A PNG of docs/results/img/: drawn from runs (`draw`, keyed by the hash of `inputs`)
  or copied from a recorded figure (`source`, from the repository root)."""
  name: str
  inputs: Any = None
  draw: Optional[Callable[[str], Any]] = None
  source: Optional[str] = None


@dataclasses.dataclass
class Rendered:
  """A record's markdown and the figures it shows."""
  lines: List[str]
  figures: List[Figure] = dataclasses.field(default_factory=list)


class Record:
  """One record of a meta file: its fields, its name, and where its files are."""

  def __init__(self, meta: Dict[str, Any], name: str, meta_path: str, runs_dir: str):
    self.meta, self.name, self.meta_path, self.runs_dir = meta, name, meta_path, runs_dir
    self.stem = os.path.basename(meta_path)[:-len('.meta.json')]

  def __getitem__(self, key: str) -> Any:
    """A field the record must have.

    Args:
      key: the field's name.

    Returns:
      Its value.

    Raises:
      RecordError: the record lacks it (naming the meta file).
    """
    if key not in self.meta:
      raise RecordError(f'{self.meta_path}: no {key!r}')
    return self.meta[key]

  def get(self, key: str, default: Any = None) -> Any:
    """A field the record may have.

    Args:
      key: the field's name.
      default: the value without it.

    Returns:
      Its value, or `default`.
    """
    return self.meta.get(key, default)

  @property
  def pages(self) -> List[str]:
    """The pages that show the record ('page': one name or a list of them)."""
    page = self['page']
    return [page] if isinstance(page, str) else list(page)

  def path(self, name: str) -> str:
    """Where a file the record names is.

    Args:
      name: the file's path relative to the runs directory.

    Returns:
      Its full path.

    Raises:
      RecordError: it does not exist.
    """
    full = os.path.join(self.runs_dir, name)
    if not os.path.exists(full):
      raise RecordError(f'{self.meta_path}: {name} is not in {self.runs_dir}')
    return full

  def files(self) -> List[str]:
    """The files and directories of the runs directory that the record shows.

    Returns:
      Their paths relative to it, each once, a directory's with a trailing '/'.
    """
    return list(dict.fromkeys(self._files()))

  def _files(self) -> List[str]:
    kind, get = self['kind'], self.get
    if get('superseded'):
      return list(get('files', []))
    if kind == 'solve_time':
      return list(self['runs'])
    if kind == 'arms':
      peer_runs = (get('peer') or {}).get('runs', [])
      return [file for _, file, _ in self['arms']] + list(peer_runs)
    if kind == 'runs':
      return [file for _, file in self['rows']]
    if kind == 'hybrid':
      return [self['runs'], self['online_runs']]
    if kind == 'to_target':
      return [self['runs']]
    if kind == 'offline':
      return sorted({self['runs'], *get('sources', {}).values(), self['datasets_file']})
    if kind in ('task_sequence', 'multi_task', 'pbt'):
      return [self['runs_dir'] + '/']
    # An output record's printed text, and the runs it was printed from where it keeps
    # them ('runs_dir': the script re-prints the text from them).
    return [f'{self.stem}{ext}' for ext in ('.md', '.txt')
            if os.path.exists(os.path.join(self.runs_dir, self.stem + ext))] + (
                [get('runs_dir') + '/'] if get('runs_dir') else [])


# -- Reading ---------------------------------------------------------------------------

KINDS = ('solve_time', 'arms', 'runs', 'hybrid', 'offline', 'task_sequence', 'multi_task',
         'pbt', 'to_target', 'output')


def load_records(runs_dir: str) -> List[Record]:
  """Every record of the meta files in `runs_dir`, in the order of their file names.

  Args:
    runs_dir: benchmarks/runs/ or a copy of it.

  Returns:
    The records.

  Raises:
    RecordError: a record without a known page or kind, a file it names that is
      missing, or a file of `runs_dir` that no record names.
  """
  records = []
  for meta_path in sorted(glob.glob(os.path.join(runs_dir, '*.meta.json'))):
    meta = _json(meta_path)
    stem = os.path.basename(meta_path)[:-len('.meta.json')]
    for entry in meta['records'] if 'records' in meta else [meta]:
      record = Record(entry, f'{stem}-{entry["id"]}' if 'id' in entry else stem,
                      meta_path, runs_dir)
      unknown = [p for p in record.pages if p not in (*PAGES, INDEX)]
      if unknown or record['kind'] not in KINDS:
        raise RecordError(f'{meta_path}: unknown page {unknown} or kind {record["kind"]!r}')
      if not record.files() and record['kind'] == 'output':
        raise RecordError(f'{meta_path}: no {stem}.txt or {stem}.md beside it')
      for name in record.files():
        record.path(name.rstrip('/'))
      records.append(record)
  _check_every_file_named(records, runs_dir)
  return records


def _check_every_file_named(records: Sequence[Record], runs_dir: str) -> None:
  """Raises RecordError naming the files of `runs_dir` that no record names."""
  named: Set[str] = {CHANGELOG}
  for record in records:
    named.add(os.path.basename(record.meta_path))
    named.update(name.split('/')[0] for name in record.files())
  changelog = os.path.join(runs_dir, CHANGELOG)
  if os.path.exists(changelog):
    for entry in _json(changelog)['entries']:
      named.update(name.split('/')[0] for name in entry.get('files', []))
  unnamed = sorted(set(os.listdir(runs_dir)) - named)
  if unnamed:
    raise RecordError(f'{runs_dir}: no record names {unnamed}; describe each in a '
                      '<name>.meta.json (module docstring)')


def _jsonl(path: str) -> List[Dict[str, Any]]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def _json(path: str) -> Dict[str, Any]:
  with open(path) as f:
    return json.load(f)


def _solve_time_runs(record: Record, files: Sequence[str], algo: str,
                     side: Optional[str] = None) -> List[tasks.Run]:
  """The solve_time runs of `algo` in `files` (on `side` only, where given): tfrl's
  first, then by side and seed."""
  runs = [tasks.Run(**row) for name in files for row in _jsonl(record.path(name))]
  return sorted((r for r in runs if r.algo == algo and (side is None or r.side == side)),
                key=lambda r: (r.side != 'tfrl', r.side, r.seed))


# -- Formatting ------------------------------------------------------------------------


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
  """A markdown table's lines."""
  return (['| ' + ' | '.join(head) + ' |', '|' + ' --- |' * len(head)] +
          ['| ' + ' | '.join(row) + ' |' for row in rows])


def _interval(values: Sequence[float], statistic: str = SETTINGS.statistic
              ) -> stats.Interval:
  return stats.interval(values, statistic, SETTINGS.confidence, SETTINGS.resamples,
                        SETTINGS.seed)


def _compare(ours: Sequence[float], theirs: Sequence[float], how: str,
             statistic: str = SETTINGS.statistic) -> stats.Interval:
  return stats.compare(ours, theirs, how, statistic, SETTINGS.confidence,
                       SETTINGS.resamples, SETTINGS.seed)


def _cell(values: Sequence[float], unit: str) -> str:
  """The central value [interval] of `values` ('-' without any)."""
  return summary.cell(_interval(values).as_dict(), unit) if values else '-'


def _comparison(ours: Sequence[float], theirs: Sequence[float], how: str) -> str:
  """`ours` against `theirs` ('ratio' or 'difference') with its interval."""
  if not ours or not theirs:
    return '-'
  return summary.cell(_compare(ours, theirs, how).as_dict(), how)


def _fixed(interval: stats.Interval, digits: int) -> str:
  return (f'{interval.point:.{digits}f} [{interval.low:.{digits}f}, '
          f'{interval.high:.{digits}f}]')


def _seeds(seeds: Sequence[int]) -> str:
  return ', '.join(str(s) for s in seeds) or 'none'


def _images(figures: Sequence[Figure], title: str) -> List[str]:
  """Markdown image lines, then a blank line (nothing without figures)."""
  return [f'![{title}]({IMAGE_LINK}{f.name})' for f in figures] + [''] * bool(figures)


def _about(record: Record, facts: Sequence[str] = ()) -> List[str]:
  """How a record was run: its command(s), then its commit, date, protocol, `facts`,
  machine, files and notes."""
  commands = record['command']
  commands = [commands] if isinstance(commands, str) else commands
  lines = ['Command' + 's' * (len(commands) > 1) + ':', '', '```', *commands, '```', '']
  commit = record['commit']
  items = [f'Commit: {commit}' if commit else 'Commit not recorded.',
           f'Date: {record["date"]}', f'Protocol: {record["protocol"]}', *facts]
  if record.get('machine'):
    items.append(f'Machine: {record["machine"]}')
  items.append('Recorded in ' + ', '.join(f'`benchmarks/runs/{f}`' for f in record.files())
               + '.')
  items += record.get('notes', [])
  return lines + [f'- {item}' for item in items]


# -- Records, by kind ------------------------------------------------------------------


def _task(record: Record, algo: str) -> tasks.Task:
  task = tasks.ALGOS[algo]
  if record.get('env_step_budgets'):
    task = dataclasses.replace(task, env_step_budgets=tuple(record['env_step_budgets']))
  return task


def _y_label(task: tasks.Task) -> str:
  return "training games' mean score" if task.returns == 'train' else 'eval return'


def _curves_figure(name: str, title: str, sides: Dict[str, List[Any]],
                   **options: Any) -> Figure:
  """A figure curves.plot draws from each side's curves (one per seed)."""
  inputs = {'plot': 'curves.plot', 'title': title, 'sides': sides, 'options': options,
            'settings': dataclasses.asdict(SETTINGS)}
  return Figure(name + '.png', inputs, lambda path: curves.plot(
      path, title, sides, **options, **dataclasses.asdict(SETTINGS)))


def _solve_time_summary(record: Record) -> Tuple[dict, List[tasks.Run], List[tasks.Run]]:
  """summary.summarize of a solve_time record, its measures filtered; and its runs."""
  algo = record['algo']
  task = _task(record, algo)
  runs = _solve_time_runs(record, record['runs'], algo)
  ours = [r for r in runs if r.side == 'tfrl']
  theirs = [r for r in runs if r.side != 'tfrl']
  peer = (record.get('peer_label') or tasks.peer_name(task)) if theirs else None
  found = summary.summarize(algo, task, peer, ours, theirs,
                            record.get('budget_seconds', 600.0), SETTINGS)
  found['measures'] = [m for m in found['measures'] if _kept(record, m['measure'])]
  return found, ours, theirs


def _kept(record: Record, measure: str) -> bool:
  """Whether a record shows a summary.py measure: all, or those its 'measures' name the
  start of."""
  keep = record.get('measures')
  return not keep or any(measure.startswith(k) for k in keep)


def render_solve_time(record: Record) -> Rendered:
  """summary.py's table of a solve_time task, each seed's values and the curves.

  Args:
    record: a 'solve_time' record.

  Returns:
    Its rendering.
  """
  found, ours, theirs = _solve_time_summary(record)
  sides = [('tfrl', 'tfrl')] + [('peer', 'SB3')] * bool(theirs)
  rows = []
  for seed in sorted({r.seed for r in ours + theirs}):
    row = [str(seed)]
    for measure in found['measures']:
      for side, _ in sides:
        value = dict(zip(measure[side]['seeds'], measure[side]['values'])).get(seed)
        row.append('-' if value is None else summary.number(value, measure['unit']))
    rows.append(row)
  head = ['seed'] + [f'{m["measure"]}: {label}' for m in found['measures']
                     for _, label in sides]
  figures = []
  if record.get('curves'):
    task = _task(record, record['algo'])
    drawn = {'tfrl': [r.extra.get('curve', []) for r in ours]}
    if theirs:
      drawn['SB3'] = [r.extra.get('curve', []) for r in theirs]
    title = (f'{record["algo"]} on {task.env}: tfrl {task.config}.gin' +
             (f' vs {found["peer"]}' if theirs else ''))
    figures.append(_curves_figure(record.name, title, drawn, threshold=task.threshold,
                                  y_label=_y_label(task)))
  profiles = [f for f in [_profiles_figure(record, found, sides)] if f] if theirs else []
  seeds = f'Seeds: tfrl {_seeds([r.seed for r in ours])}' + (
      f'; SB3 {_seeds([r.seed for r in theirs])}' if theirs else '')
  lines = (summary.markdown([found], SETTINGS) + ['', 'Each seed:', ''] +
           _table(head, rows) + [''] + _images(figures, record['title']) +
           (['Performance profiles (rliable\'s score distributions): the fraction of each '
             "side's runs within x (a measure where lower is better; a run that never "
             'reached the target never is) or above x, with its '
             f'{SETTINGS.confidence:.0%} bootstrap band.', ''] +
            _images(profiles, record['title'] + ': performance profiles')
            if profiles else []) +
           _about(record, [seeds]))
  return Rendered(lines, figures + profiles)


def _profiles_figure(record: Record, found: dict, sides: Sequence[Tuple[str, str]]
                     ) -> Optional[Figure]:
  """A figure curves.plot_profiles draws: a panel per measure of a solve_time summary
  that both sides have values of, each side's values of every seed that has one (None
  where no measure has)."""
  panels = [{'label': measure['measure'], 'higher_is_better': measure['higher_is_better'],
             'sides': {label: [v for v in measure[side]['values'] if v is not None]
                       for side, label in sides}}
            for measure in found['measures']]
  panels = [p for p in panels if all(p['sides'].values())]
  if not panels:
    return None
  title = f'{found["algo"]} on {found["env"]}: performance profiles'
  inputs = {'plot': 'curves.plot_profiles', 'title': title, 'panels': panels,
            'settings': dataclasses.asdict(SETTINGS)}
  options = {k: v for k, v in dataclasses.asdict(SETTINGS).items() if k != 'statistic'}
  return Figure(f'{record.name}-profiles.png', inputs,
                lambda path: curves.plot_profiles(path, title, panels, **options))


def _arm_measures(record: Record, task: tasks.Task
                  ) -> List[Tuple[str, Callable[[tasks.Run], Optional[float]], str, str]]:
  """(label, a run's value, comparison, unit) of each table of an arms record."""
  if record.get('to_target'):
    return [('env steps to the target',
             lambda run: run.env_steps if run.solved else math.inf, 'ratio', 'steps'),
            ('seconds to the target',
             lambda run: run.seconds if run.solved else math.inf, 'ratio', 's')]
  frames = task.frames_per_step
  what = 'score' if task.returns == 'train' else 'return'
  return [(f'{what} at {budget * frames:,} {"frames" if frames > 1 else "env steps"}',
           lambda run, budget=budget: summary.return_at(run.extra.get('curve') or [],
                                                        budget),
           'difference', 'return')
          for budget in record['env_step_budgets']]


def _arms_and_peer(record: Record) -> Tuple[List[Tuple[str, List[tasks.Run], str]],
                                            List[tasks.Run]]:
  """Each arm's (name, runs, bindings) and the peer's runs ([] without a peer)."""
  algo = record['algo']
  arms = [(name, _solve_time_runs(record, [file], algo, 'tfrl'), bindings)
          for name, file, bindings in record['arms']]
  peer = record.get('peer')
  peer_runs = (_solve_time_runs(record, peer['runs'], peer.get('algo', algo), peer['side'])
               if peer else [])
  return arms, peer_runs


def render_arms(record: Record) -> Rendered:
  """Each arm's central value and interval, against the baseline arm's and the peer's.

  Args:
    record: an 'arms' record.

  Returns:
    Its rendering.
  """
  task = _task(record, record['algo'])
  arms, peer_runs = _arms_and_peer(record)
  baseline = record.get('baseline', arms[0][0])
  base_runs = next(runs for name, runs, _ in arms if name == baseline)
  peer = record.get('peer')
  lines = []
  for label, value, how, unit in _arm_measures(record, task):
    def values(runs, value=value):
      return [v for v in map(value, runs) if v is not None]

    def each(runs, value=value, unit=unit):
      return ', '.join(f'{r.seed}: {summary.number(v, unit)}'
                       for r, v in zip(runs, map(value, runs)) if v is not None)

    rows = []
    for name, runs, _ in arms:
      ours = values(runs)
      rows.append([name, str(len(ours)), _cell(ours, unit), each(runs),
                   '-' if name == baseline else _comparison(ours, values(base_runs), how)]
                  + ([_comparison(ours, values(peer_runs), how)] if peer else []))
    if peer:
      rows.append([peer['label'], str(len(values(peer_runs))),
                   _cell(values(peer_runs), unit), each(peer_runs), '-', '-'])
    lines += _table(['arm', 'seeds', f'{label}, {CENTRAL} [{CI}]', 'per seed',
                     f'vs {baseline} [{CI}]'] +
                    ([f'vs {peer["label"]} [{CI}]'] if peer else []), rows) + ['']
  lines += ['Arms: ' + '; '.join(
      f'{name}: ' + (f'`{bindings}`' if bindings else 'no bindings')
      for name, _, bindings in arms) + '.', '']
  figures = []
  if record.get('curves'):
    drawn = {name: [r.extra.get('curve', []) for r in runs] for name, runs, _ in arms
             if name in record['curves']}
    if peer:
      drawn[peer['label']] = [r.extra.get('curve', []) for r in peer_runs]
    figures.append(_curves_figure(record.name, record['title'], drawn,
                                  threshold=task.threshold, y_label=_y_label(task)))
  seeds = 'Seeds: ' + '; '.join(f'{name} {_seeds([r.seed for r in runs])}'
                                for name, runs, _ in arms) + (
      f'; {peer["label"]} {_seeds([r.seed for r in peer_runs])}' if peer else '')
  return Rendered(lines + _images(figures, record['title']) + _about(record, [seeds]),
                  figures)


def render_runs(record: Record) -> Rendered:
  """Single solve_time runs side by side, a row each, with summary.py's measures.

  Args:
    record: a 'runs' record.

  Returns:
    Its rendering.
  """
  measures = [m for m in summary.measures(_task(record, record['algo']),
                                         record.get('budget_seconds', 600.0))
              if _kept(record, m.name)]
  rows = []
  for label, file in record['rows']:
    for run in _solve_time_runs(record, [file], record['algo']):
      rows.append([label, run.side, str(run.seed)] + [
          '-' if m.value(run) is None else summary.number(m.value(run), m.unit)
          for m in measures])
  return Rendered(_table(['run', 'side', 'seed'] + [m.name for m in measures], rows) +
                  [''] + _about(record))


# The key of a run's record (offline.py's and hybrid.py's JSON lines) that holds the
# content checksum of the dataset it trained on (tfrl.datasets.rlds.checksum).
CHECKSUM_KEY = 'dataset_checksum'


def _who(runs: Sequence[Tuple[str, Dict[str, Any]]]) -> str:
  """'<label> seeds 0, 1; <label> seed 2' of (label, run) pairs, labels in their order."""
  seeds: Dict[str, List[int]] = {}
  for label, run in runs:
    seeds.setdefault(label, []).append(run['seed'])
  return '; '.join((f'{label} ' if label else '') + ('seed ' if len(each) == 1 else 'seeds ')
                   + _seeds(sorted(each)) for label, each in seeds.items())


def checksum_line(runs: Sequence[Tuple[str, Dict[str, Any]]],
                  described: Optional[str] = None) -> str:
  """The data the runs of one table trained on: its content checksum, from each run's
  record, where they all name the same one; else each checksum with its runs.

  Args:
    runs: (the algorithm's label, or '' where the table has one algorithm; the run's
      record) of each run of the table.
    described: the checksum of the dataset that the page describes beside the table
      (its size and returns), where its description names one.

  Returns:
    A line of markdown. Runs whose record has no checksum are named as such: what they
    trained on is not known, so they do not count as agreeing with any checksum.
  """
  groups: Dict[Optional[str], List[Tuple[str, Dict[str, Any]]]] = {}
  for label, run in runs:
    groups.setdefault(run.get(CHECKSUM_KEY), []).append((label, run))
  recorded = sorted(c for c in groups if c is not None)
  if not recorded:
    return f'Dataset checksum: not recorded by these runs ({_who(runs)}).'
  if len(groups) == 1:
    line = f'Dataset checksum: `{recorded[0]}` (all {len(runs)} runs).'
  else:
    parts = [f'`{c}` ({_who(groups[c])})' for c in recorded]
    if None in groups:
      parts.append(f'not recorded ({_who(groups[None])})')
    line = 'Dataset checksum: not the same for all these runs: ' + '; '.join(parts) + '.'
  if described is not None and [described] != list(groups):
    # The size and returns shown are of that data, not (all) of the runs'.
    line += f' The description above is of the data of checksum `{described}`.'
  return line


def render_hybrid(record: Record) -> Rendered:
  """Hybrid SAC's seeds against the bar: online SAC's return at its env-step budget,
  reached in a third of those env steps (as hybrid.py reports it).

  Args:
    record: a 'hybrid' record.

  Returns:
    Its rendering.
  """
  runs = sorted(_jsonl(record.path(record['runs'])), key=lambda r: r['seed'])
  online = [r.extra['curve'] for r in _solve_time_runs(
      record, [record['online_runs']], 'sac_halfcheetah', 'tfrl')]
  budget = record['online_env_steps']
  third = budget // 3
  at_budget = [v for v in (summary.return_at(c, budget) for c in online) if v is not None]
  bar = _interval(at_budget).point
  steps = [summary.steps_to(run['curve'], bar) for run in runs]
  ours_third = [summary.return_at(run['curve'], third) for run in runs]
  online_third = [v for v in (summary.return_at(c, third) for c in online) if v is not None]
  lines = [checksum_line([('', run) for run in runs]), ''] + _table(
      ['measure', f'hybrid SAC, {CENTRAL} [{CI}]', f'online SAC, {CENTRAL} [{CI}]'],
      [[f'return at {budget:,} env steps (the bar)', '-', _cell(at_budget, 'return')],
       [f'env steps to the bar ({summary.number(bar, "return")})',
        f'{_cell(steps, "steps")}; {sum(s <= third for s in steps)} of {len(runs)} '
        f'seeds within {third:,}', f'{budget:,}'],
       [f'return at {third:,} env steps',
        _cell([v for v in ours_third if v is not None], 'return'),
        _cell(online_third, 'return')]]) + ['']
  ratios, rows = [], []
  for run, to_bar, at_third in zip(runs, steps, ours_third):
    last_steps, _, last = run['curve'][-1]
    online_steps = [summary.steps_to(c, last) for c in online]
    ratios += [s / last_steps for s in online_steps]
    rows.append([str(run['seed']), summary.number(to_bar, 'steps'),
                 '-' if at_third is None else summary.number(at_third, 'return'),
                 f'{summary.number(last, "return")} at {last_steps:,}',
                 ', '.join(summary.number(s, 'steps') for s in online_steps),
                 f'{run["seconds"]:,.0f}'])
  lines += ['Each seed:', ''] + _table(
      ['seed', 'env steps to the bar', f'return at {third:,} env steps',
       'last return (at env steps)', "online SAC's env steps to that return, per seed",
       'seconds'], rows) + ['']
  lines += [f"Online SAC's env steps over hybrid SAC's, to the same return: median "
            f'{summary.number(stats.median(ratios), "ratio")}, range '
            f'{summary.number(min(ratios), "ratio")} to '
            f'{summary.number(max(ratios), "ratio")} over {len(ratios)} pairs.', '']
  figures = []
  if record.get('curves'):
    figures.append(_curves_figure(
        record.name, record['title'],
        {'hybrid SAC': [run['curve'] for run in runs],
         'online SAC': [[p for p in c if p[0] <= budget * 1.1] for c in online]},
        threshold=bar, threshold_label=f"online SAC's return at {budget:,}"))
  settings = {k: v for k, v in runs[0].items()
              if k not in ('seed', 'curve', 'seconds', 'load', 'dataset', CHECKSUM_KEY)}
  facts = [f'Seeds: hybrid {_seeds([r["seed"] for r in runs])}; online SAC: its '
           f'{len(online)} seeds', 'hybrid.py settings: ' + ', '.join(
               f'{k} {v}' for k, v in sorted(settings.items()))]
  return Rendered(lines + _images(figures, record['title']) + _about(record, facts),
                  figures)


# offline.py's line per dataset; since it records checksums, it ends with one.
_DATASET = re.compile(r'dataset (\w+): (\d+) episodes, ([\d,]+) transitions, mean return '
                      r'(-?[\d.]+) \(min (-?[\d.]+), max (-?[\d.]+)\)'
                      r'(?:, checksum ([0-9a-f]+))?')


def _datasets(path: str) -> Dict[str, Dict[str, Any]]:
  """offline.py's printed description of its datasets: name -> size, returns and
  checksum (None where the line has none)."""
  with open(path) as f:
    found = _DATASET.findall(f.read())
  return {name: {'episodes': int(episodes),
                 'transitions': int(transitions.replace(',', '')),
                 'mean': float(mean), 'min': float(low), 'max': float(high),
                 'checksum': checksum or None}
          for name, episodes, transitions, mean, low, high, checksum in found}


def _offline_runs(record: Record, dataset: str) -> Dict[str, List[Dict[str, Any]]]:
  """Algorithm -> its runs on `dataset` at the record's gradient steps, by seed."""
  found = {}
  for algo in record['algos']:
    rows = _jsonl(record.path(record.get('sources', {}).get(algo, record['runs'])))
    chosen = sorted((r for r in rows if r['dataset'] == dataset and r['algo'] == algo
                     and r['grad_steps'] == record['grad_steps'] and r['curve']),
                    key=lambda r: r['seed'])
    if chosen:
      found[algo] = chosen
  return found


def _final(run: Dict[str, Any]) -> float:
  return run['curve'][-1][2]


def render_offline(record: Record) -> Rendered:
  """Per dataset: each algorithm's return after the run's gradient steps, against the
  dataset's mean, tfrl's against each peer's (returns and wall clock), the curves.

  Args:
    record: an 'offline' record.

  Returns:
    Its rendering.

  Raises:
    RecordError: its datasets file does not describe one of its datasets.
  """
  grad_steps, labels = record['grad_steps'], record['labels']
  described = _datasets(record.path(record['datasets_file']))
  lines, figures = [], []
  for dataset, env in record['datasets'].items():
    info = described.get(dataset)
    if info is None:
      raise RecordError(f'{record.meta_path}: {record["datasets_file"]} does not '
                        f'describe {dataset}')
    by_algo = _offline_runs(record, dataset)
    lines += [f'#### {dataset} ({env})', '',
              f'{info["episodes"]} episodes, {info["transitions"]:,} transitions; episode '
              f'returns: mean {info["mean"]:,.1f}, min {info["min"]:,.1f}, max '
              f'{info["max"]:,.1f}.', '']
    if by_algo:
      lines += [checksum_line([(labels[algo], run) for algo, runs in by_algo.items()
                               for run in runs], info['checksum']), '']
    rows = [[labels[algo], str(len(runs)), _cell([_final(r) for r in runs], 'return'),
             ', '.join(f'{r["seed"]}: {summary.number(_final(r), "return")}' for r in runs),
             f'{sum(_final(r) > info["mean"] for r in runs)} of {len(runs)}',
             f'{stats.median([r["seconds"] for r in runs]):,.0f}']
            for algo, runs in by_algo.items()]
    lines += _table(['algorithm', 'seeds',
                     f'return after {grad_steps:,} gradient steps, {CENTRAL} [{CI}]',
                     'per seed', "above the dataset's mean", 'process seconds, median'],
                    rows) + ['']
    rows = [[f'{labels[ours]} against {labels[theirs]}',
             _comparison([_final(r) for r in by_algo[ours]],
                         [_final(r) for r in by_algo[theirs]], 'difference'),
             _comparison([r['seconds'] for r in by_algo[ours]],
                         [r['seconds'] for r in by_algo[theirs]], 'ratio')]
            for ours, theirs in record['comparisons']
            if ours in by_algo and theirs in by_algo]
    if rows:
      lines += _table(['comparison', f'return difference [{CI}]',
                       f'wall clock ratio [{CI}]'], rows) + ['']
    if record.get('curves'):
      figure = _curves_figure(
          f'{record.name}-{dataset}', f'{dataset}: offline, {grad_steps:,} gradient steps',
          {labels[a]: [r['curve'] for r in runs] for a, runs in by_algo.items()},
          threshold=info['mean'], step_label='gradient steps',
          threshold_label='dataset mean return')
      figures.append(figure)
      lines += _images([figure], f'{dataset}, {grad_steps:,} gradient steps')
  return Rendered(lines + _about(record), figures)


def _median_cell(values: Sequence[float], interval: bool = True) -> str:
  """The median over the seeds that have a value, with its interval unless told not
  to; 'n/a' with none."""
  present = [v for v in values if not math.isnan(v)]
  if not present:
    return 'n/a'
  return (_fixed(_interval(present, 'median'), 3) if interval
          else f'{stats.median(present):.3f}')


def _accuracy_matrices(algos: Sequence[str], labels: Dict[str, str],
                       reports: Dict[str, List[Dict[str, Any]]], names: Sequence[str]
                       ) -> List[str]:
  """Each algorithm's accuracy matrix, each cell the median over seeds, after a line
  saying what a row is."""
  lines = ['Accuracy matrix: row i holds each task\'s return at the end of phase i (the '
           'last evaluation at or before the phase\'s end; for the last phase, the run\'s '
           'last), each cell the median over seeds. BWT is the mean over the tasks before '
           'the last of the last row less the diagonal; FWT the mean over the tasks after '
           'the first of the entry above the diagonal less the task\'s return at the first '
           'evaluation ([definitions](../guides/task-sequences.md#forgetting-and-transfer)).',
           '']
  for algo in algos:
    phases = reports[algo][0]['phases']
    rows = [[f'{phase}: {task}'] +
            [_median_cell([r['accuracy_matrix'][phase][column] for r in reports[algo]],
                          interval=False) for column in range(len(names))]
            for phase, task in enumerate(phases)]
    lines += _table([f'{labels[algo]}: end of phase'] + list(names), rows) + ['']
  return lines


def render_task_sequence(record: Record) -> Rendered:
  """Each algorithm's forgetting, backward and forward transfer and what it learned of
  each task in its own phase (median and interval over seeds), the forgetting's ratio,
  the accuracy matrices, each run, the curves. The transfer is computed from each
  run's evaluations (`learners.configuration.transfer`), so runs recorded before
  tasks.json held it give it too.

  Args:
    record: a 'task_sequence' record.

  Returns:
    Its rendering.
  """
  algos, labels, seeds = record['algos'], record['labels'], record['seeds']
  runs = {algo: [_json(record.path(os.path.join(record['runs_dir'], f'{algo}_s{seed}',
                                                'tasks.json'))) for seed in seeds]
          for algo in algos}
  first = runs[algos[0]][0]
  names = list(dict.fromkeys(name for _, name in first['switches']))
  learned = {algo: [task_curves.learned_returns(r) for r in runs[algo]] for algo in algos}
  reports = {algo: [transfer.transfer_report(r['history'], r['switches'])
                    for r in runs[algo]] for algo in algos}
  rows = [['mean forgetting of the tasks trained before the last'] +
          [_median_cell([r['mean_forgetting'] for r in runs[a]]) for a in algos]]
  rows += [[f'{label} ({short})'] +
           [_median_cell([r[key] for r in reports[a]]) for a in algos]
           for key, label, short in (('backward_transfer', 'backward transfer', 'BWT'),
                                     ('forward_transfer', 'forward transfer', 'FWT'))]
  rows += [[f'{name}: best return in its own phase'] +
           [_median_cell([each[name] for each in learned[a]]) for a in algos]
           for name in names]
  rows += [['mean return over the run, mean of the tasks'] +
           [_median_cell([r['mean_return'] for r in runs[a]]) for a in algos]]
  lines = _table([f'measure, median [{CI}] over seeds'] + [labels[a] for a in algos],
                 rows) + ['']
  for ours, theirs in record.get('ratios', []):
    ratio = _compare([r['mean_forgetting'] for r in runs[ours]],
                     [r['mean_forgetting'] for r in runs[theirs]], 'ratio', 'median')
    lines += [f'{labels[ours]} / {labels[theirs]}, mean forgetting (medians): '
              f'{_fixed(ratio, 2)}.', '']
  lines += _accuracy_matrices(algos, labels, reports, names)
  rows = [[labels[algo], str(seed), f'{run["mean_forgetting"]:.3f}',
           f'{report["backward_transfer"]:.3f}', f'{report["forward_transfer"]:.3f}'] +
          [f'{best[n]:.3f} / {run["tasks"][n]["final_return"]:.3f} / '
           f'{run["tasks"][n]["forgetting"]:.3f}' for n in names]
          for algo in algos
          for seed, run, best, report in zip(seeds, runs[algo], learned[algo],
                                             reports[algo])]
  lines += ['Each run (a task: its best return in its own phase / final / forgotten):',
            ''] + _table(['algorithm', 'seed', 'mean forgetting', 'BWT', 'FWT'] + names,
                         rows) + ['']
  switches = [step for step, _ in first['switches'][1:]]
  histories = {labels[a]: [r['history'] for r in runs[a]] for a in algos}
  figure = Figure(record.name + '.png', {'plot': 'task_curves.plot', 'runs': histories,
                                         'names': names, 'switches': switches},
                  lambda path: task_curves.plot(histories, names, path, switches=switches))
  return Rendered(lines + _images([figure], record['title']) +
                  _about(record, [f'Seeds: {_seeds(seeds)} of each']), [figure])


def render_multi_task(record: Record) -> Rendered:
  """Per run: whether the job reached its target, where each task first reached its
  threshold, each task's final return; the curves.

  Args:
    record: a 'multi_task' record.

  Returns:
    Its rendering.
  """
  thresholds = record['thresholds']
  names = list(thresholds)
  rows, histories = [], {}
  for mode in record['modes']:
    for seed in record['seeds']:
      run = _json(record.path(os.path.join(record['runs_dir'],
                                           f'{mode}_s{seed}.summary.json')))
      history = run['history']
      histories.setdefault(mode, []).append(history)
      # As multi_task.py reads a run: in one process the job exits 0 only on a confirmed
      # target; launched, the evaluator's row says so.
      reached = (run['returncode'] == 0 if mode == 'one_process'
                 else any(row.get('reached_target') for row in history))
      cells = []
      for name in names:
        hit = next((row['env_steps'] for row in history
                    if row['task_returns'][name] >= thresholds[name]), None)
        cells.append(('never' if hit is None else f'{hit:,}') +
                     f' / {history[-1]["task_returns"][name]:.3f}')
      rows.append([mode, str(seed), 'reached' if reached else 'not reached',
                   f'{history[-1]["env_steps"]:,}', str(len(history)),
                   f'{run["seconds"]:,.0f}'] + cells)
  lines = ['Per task: the env steps at its first evaluation at its threshold / its final '
           'return.', ''] + _table(
               ['mode', 'seed', 'target', 'env steps', 'evaluations', 'seconds'] +
               [f'{n} ({thresholds[n]:g})' for n in names], rows) + ['']
  figure = Figure(record.name + '.png', {'plot': 'task_curves.plot', 'runs': histories,
                                         'names': names, 'thresholds': thresholds},
                  lambda path: task_curves.plot(histories, names, path,
                                                thresholds=thresholds))
  return Rendered(lines + _images([figure], record['title']) + _about(record), [figure])


def render_pbt(record: Record) -> Rendered:
  """Per seed: the budget B, where the population reached the target, how many of its
  starting points reached it alone, and the criterion (pbt_criterion.py); or, for a
  record of 'modes', each mode's population side by side.

  Args:
    record: a 'pbt' record.

  Returns:
    Its rendering.
  """
  if record.get('modes'):
    return _render_pbt_modes(record)
  rows, met, ratios = [], 0, []
  for seed in record['seeds']:
    directory = os.path.join(record['runs_dir'], f's{seed}')
    tuned = _json(record.path(os.path.join(directory, 'tuned.json')))
    population = _json(record.path(os.path.join(directory,
                                                f'{record["population"]}.json')))
    alone = {member: _json(record.path(os.path.join(directory, f'alone_{member}.json')))
             for member in sorted(population['starts'], key=int)}
    verdict = pbt_criterion.criterion(population, alone)
    met += verdict == 'MET'
    if population['reached']:
      ratios.append(population['env_steps'] / tuned['env_steps'])
    reached = sum(bool(run['reached']) for run in alone.values())
    rows.append([
        str(seed), f'{tuned["env_steps"]:,} ({tuned["train_step"]})',
        (f'member {population["member"]} at {population["env_steps"]:,}'
         if population['reached'] else 'not reached'),
        str(population['copies']), f'{population["seconds"]:,.0f}',
        f'{reached} of {len(alone)} (' + ', '.join(
            f'{run["env_steps"]:,}' if run['reached'] else 'no'
            for run in alone.values()) + ')', verdict])
  lines = _table(['seed', 'budget B: env steps (train steps) of the tuned config',
                  'population: first member at the target (env steps)', 'copies',
                  'population seconds', 'starting points alone at the target within B',
                  'criterion'], rows) + ['']
  lines += [f'Criterion met on {met} of {len(record["seeds"])} seeds. The population '
            "over the tuned config, env steps to the target: " +
            ', '.join(summary.number(r, 'ratio') for r in ratios) +
            (f' (median {summary.number(stats.median(ratios), "ratio")}).'
             if ratios else '.'), '']
  figures = _copied(record)
  return Rendered(lines + _images(figures, record['title']) +
                  _about(record, [f'Seeds: {_seeds(record["seeds"])}']), figures)


def _render_pbt_modes(record: Record) -> Rendered:
  """Per seed, each mode's population under one budget B (same seed, same starting
  points): where its first member reached the target, its copies and seconds; then each
  later mode over the first, per seed and as a median."""
  labels = list(record['modes'])
  rows, ratios = [], {label: {'env steps': [], 'seconds': []} for label in labels[1:]}
  for seed in record['seeds']:
    directory = os.path.join(record['runs_dir'], f's{seed}')
    tuned = _json(record.path(os.path.join(directory, 'tuned.json')))
    runs = {label: _json(record.path(os.path.join(directory, f'{name}.json')))
            for label, name in record['modes'].items()}
    row = [str(seed), f'{tuned["env_steps"]:,}']
    for label, run in runs.items():
      row += [f'member {run["member"]} at {run["env_steps"]:,}' if run['reached']
              else 'not reached', str(run['copies']), f'{run["seconds"]:,.0f}']
    first = runs[labels[0]]
    for label in labels[1:]:
      run = runs[label]
      both = first['reached'] and run['reached']
      for measure, key in (('env steps', 'env_steps'), ('seconds', 'seconds')):
        ratio = run[key] / first[key] if both else math.nan
        if both:
          ratios[label][measure].append(ratio)
        row.append(summary.number(ratio, 'ratio'))
    rows.append(row)
  head = ['seed', 'budget B (env steps)']
  for label in labels:
    head += [f'{label}: first member at the target (env steps)', f'{label}: copies',
             f'{label}: seconds']
  for label in labels[1:]:
    head += [f'{label} / {labels[0]}: env steps', f'{label} / {labels[0]}: seconds']
  lines = _table(head, rows) + ['']
  for label in labels[1:]:
    for measure, values in ratios[label].items():
      lines.append(
          f'{label} over {labels[0]}, {measure} to the target: median '
          f'{summary.number(stats.median(values), "ratio") if values else "n/a"} over the '
          f'{len(values)} of {len(record["seeds"])} seeds where both populations reached '
          'it.')
  lines.append('')
  figures = _copied(record)
  return Rendered(lines + _images(figures, record['title']) +
                  _about(record, [f'Seeds: {_seeds(record["seeds"])}']), figures)


def render_to_target(record: Record) -> Rendered:
  """Per arm (in the order of the file): how many seeds reached the target, each
  measure's central value and interval over seeds (an unsolved seed counts as never),
  and how many were confirmed at their first candidate.

  Args:
    record: a 'to_target' record.

  Returns:
    Its rendering.
  """
  runs = _jsonl(record.path(record['runs']))
  arms = list(dict.fromkeys(run['arm'] for run in runs))
  measures = record['measures']
  rows = []
  for arm in arms:
    mine = sorted((run for run in runs if run['arm'] == arm), key=lambda run: run['seed'])
    row = [arm, f'{sum(run["solved"] for run in mine)} of {len(mine)} '
                f'({_seeds([run["seed"] for run in mine])})']
    for _, field, unit in measures:
      values = [run[field] if run['solved'] else math.inf for run in mine]
      row.append(summary.cell(stats.interval(
          values, SETTINGS.statistic, SETTINGS.confidence, SETTINGS.resamples,
          SETTINGS.seed).as_dict(), unit))
    row.append(str(sum(run['solved'] and len(run['confirmations']) == 1 for run in mine)))
    rows.append(row)
  central = stats.NAMES.get(SETTINGS.statistic, SETTINGS.statistic)
  head = (['arm', 'seeds at the target'] +
          [f'{label}: {central} [{SETTINGS.confidence:.0%} CI]' for label, _, _ in measures] +
          ['confirmed at the first candidate'])
  return Rendered(_table(head, rows) + [''] + _about(record))


def _copied(record: Record) -> List[Figure]:
  """The record's recorded figures (paths from the repository root), to copy."""
  sources = record.get('figures', [])
  return [Figure(f'{record.name}.png' if len(sources) == 1 else
                 f'{record.name}-{os.path.basename(source)}', source=source)
          for source in sources]


def render_output(record: Record) -> Rendered:
  """A benchmark's printed output (a code block) and/or a recorded table, as they are.

  Args:
    record: an 'output' record.

  Returns:
    Its rendering.
  """
  lines = []
  for name in record.files():
    if name.endswith('/'):  # the runs the text was printed from
      continue
    with open(record.path(name)) as f:
      text = f.read().rstrip('\n').split('\n')
    lines += (text if name.endswith('.md') else ['```', *text, '```']) + ['']
  figures = _copied(record)
  return Rendered(lines + _images(figures, record['title']) + _about(record), figures)


RENDER = {'solve_time': render_solve_time, 'arms': render_arms, 'runs': render_runs,
          'hybrid': render_hybrid, 'offline': render_offline,
          'task_sequence': render_task_sequence, 'multi_task': render_multi_task,
          'pbt': render_pbt, 'to_target': render_to_target, 'output': render_output}


def render(record: Record) -> Rendered:
  """A record's markdown under its title (a level-3 heading), and its figures.

  Args:
    record: a record of `load_records`, not superseded.

  Returns:
    Its rendering.

  Raises:
    RecordError: a field or file it needs is missing.
  """
  body = RENDER[record['kind']](record)
  intro = [record['description'], ''] if record.get('description') else []
  return Rendered([f'### {record["title"]}', '', *intro, *body.lines, ''], body.figures)


# -- Pages -----------------------------------------------------------------------------


def _shown(records: Sequence[Record], page: str) -> List[Record]:
  return sorted((r for r in records if page in r.pages and not r.get('superseded')),
                key=lambda r: (r.get('order', 100), r.name))


def _text(lines: Sequence[str]) -> str:
  return '\n'.join(lines).rstrip('\n') + '\n'


def page_text(records: Sequence[Record], page: str, rendered: Dict[str, Rendered]) -> str:
  """A page's fragment: its records in order, or one line saying it has none.

  Args:
    records: every record.
    page: a key of PAGES.
    rendered: record name -> its rendering.

  Returns:
    The markdown.
  """
  shown = _shown(records, page)
  lines = [GENERATED, '']
  if not shown:
    lines.append(f'No recorded run yet: `.venv/bin/python {FIRST_RUN[page]}` makes one.')
  for record in shown:
    lines += rendered[record.name].lines
  return _text(lines)


def changelog_lines(records: Sequence[Record], runs_dir: str) -> List[str]:
  """The runs not shown, newest first: the superseded records and changelog.json's.

  Args:
    records: every record.
    runs_dir: where changelog.json is.

  Returns:
    A markdown list's lines.
  """
  entries = [{'date': r['date'], 'title': r['title'], 'commit': r['commit'],
              'why': r['superseded'], 'files': r.files()}
             for r in records if r.get('superseded')]
  path = os.path.join(runs_dir, CHANGELOG)
  if os.path.exists(path):
    entries += _json(path)['entries']
  lines = []
  for entry in sorted(entries, key=lambda e: (e['date'], e['title']), reverse=True):
    commit = f'tfrl {entry["commit"]}' if entry.get('commit') else 'commit not recorded'
    files = ''.join(f'; `benchmarks/runs/{f}`' for f in entry.get('files', []))
    lines.append(f'- {entry["date"]}: {entry["title"]} ({commit}{files}). '
                 f'{entry["why"]}')
  return lines


def index_text(records: Sequence[Record], rendered: Dict[str, Rendered],
               runs_dir: str) -> str:
  """docs/results/index.md: the pages, the records of no page, the changelog.

  Args:
    records: every record.
    rendered: record name -> its rendering.
    runs_dir: where changelog.json is.

  Returns:
    The markdown.
  """
  lines = [GENERATED, '', '# Benchmark results', '',
           'Every table and figure of these pages is generated from the recorded runs in '
           '`benchmarks/runs/` by `benchmarks/results_pages.py`, each with the command '
           'that made its runs, the commit they ran at and their protocol. Central values '
           f'are the {CENTRAL} over seeds with a {SETTINGS.confidence:.0%} percentile '
           f'bootstrap interval, the one rliable (Agarwal et al. 2021) computes '
           f'({SETTINGS.resamples:,} resamples, seed {SETTINGS.seed}; '
           '`benchmarks/stats.py`). A comparison with a peer also shows each measure\'s '
           "performance profile, rliable's score distribution: the fraction of each "
           "side's runs within or above each value, with its band.", '', '## Algorithms',
           '']
  lines += [f'- [{title}](../algorithms/{page}.md)'
            for page, title in ALGORITHM_PAGES.items()]
  lines += ['', '## Other pages', '']
  lines += [f'- [{title}]({page}.md)' for page, title in OTHER_PAGES.items()]
  lines += ['', '## Other results', '']
  for record in _shown(records, INDEX):
    lines += rendered[record.name].lines
  lines += ['## Changelog', '', 'Runs these pages do not show, newest first, and why.',
            ''] + changelog_lines(records, runs_dir)
  return _text(lines)


def _headline_cells(record: Record, line: Dict[str, Any]) -> Tuple[str, str]:
  """tfrl's and the peer's cells of a record's headline row."""
  kind = record['kind']
  if kind == 'solve_time':
    found, _, _ = _solve_time_summary(record)
    row = next(m for m in found['measures'] if m['measure'] == line['measure'])
    # Runs of different (or unrecorded) evaluation protocols are no comparison.
    caveat = ' (not compared: no common evaluation protocol)' if found['not_compared'] else ''
    return (summary.cell(row['tfrl'], row['unit']),
            f'{found["peer"]}: {summary.cell(row["peer"], row["unit"])}{caveat}')
  if kind == 'arms':
    _, value, _, unit = _arm_measures(record, _task(record, record['algo']))[
        line.get('measure', 0)]
    arms, peer_runs = _arms_and_peer(record)
    ours = next(runs for name, runs, _ in arms if name == line['arm'])
    values = lambda runs: [v for v in map(value, runs) if v is not None]
    return (_cell(values(ours), unit),
            f'{record["peer"]["label"]}: {_cell(values(peer_runs), unit)}')
  if kind == 'offline':
    by_algo = _offline_runs(record, line['dataset'])
    finals = lambda algo: [_final(r) for r in by_algo.get(algo, [])]
    return (_cell(finals(line['algo']), 'return'),
            f'{record["labels"][line["peer"]]}: {_cell(finals(line["peer"]), "return")}')
  raise RecordError(f'{record.meta_path}: no headline from a {kind!r} record')


def headline_table(records: Sequence[Record]) -> List[str]:
  """The README's headline table (and a line saying what it holds): a row per record
  with a 'headline' (algorithm, task, tfrl's central value and interval, the peer's,
  the link to the algorithm's page).

  Args:
    records: every record.

  Returns:
    Its lines.

  Raises:
    RecordError: a headline of a kind that has none.
  """
  rows = []
  for record in sorted((r for r in records
                        if r.get('headline') and not r.get('superseded')),
                       key=lambda r: r['headline']['order']):
    line, page = record['headline'], record.pages[0]
    ours, theirs = _headline_cells(record, line)
    rows.append([line['algorithm'], line['task'], ours, theirs,
                 f'[{ALGORITHM_PAGES[page]}](docs/algorithms/{page}.md)'])
  return ([f'{CENTRAL} over seeds [{CI}]; every result with its command, commit and '
           'protocol: [docs/results](docs/results/index.md) (generated from '
           '`benchmarks/runs/` by `benchmarks/results_pages.py`).', ''] +
          _table(['algorithm', 'task', 'tfrl', 'peer', 'results'], rows))


def with_headline(readme: str, table: Sequence[str]) -> Optional[str]:
  """`readme` with `table` between its headline markers.

  Args:
    readme: README.md's text.
    table: the lines to put between the markers.

  Returns:
    The new text; None where the README lacks either marker.
  """
  start, end = readme.find(HEADLINE_START), readme.find(HEADLINE_END)
  if start < 0 or end < start:
    return None
  return (readme[:start + len(HEADLINE_START)] + '\n' + '\n'.join(table) + '\n' +
          readme[end:])


# -- Writing and checking --------------------------------------------------------------


def _inputs_hash(figure: Figure) -> str:
  """The hash of what draws a figure: its inputs and the plotting code."""
  digest = hashlib.sha256(json.dumps(figure.inputs, sort_keys=True).encode())
  for name in PLOT_CODE:
    with open(os.path.join(BENCHMARKS, name), 'rb') as f:
      digest.update(f.read())
  return digest.hexdigest() + '\n'


def _read(path: str, mode: str = 'r') -> Optional[Any]:
  if not os.path.exists(path):
    return None
  with open(path, mode) as f:
    return f.read()


def _write(path: str, text: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.write(text)


def run(out_dir: str, runs_dir: str, readme: Optional[str], check: bool,
        pages: Optional[Sequence[str]] = None, figures: bool = True) -> List[str]:
  """Writes every output, or with `check` compares them, writing nothing.

  Args:
    out_dir: docs/results/ or another directory.
    runs_dir: the recorded runs.
    readme: the README whose headline markers get the table (None: no README).
    check: compare only.
    pages: only these pages (without the index and the README); None: all of them.
    figures: the figures too (False: the markdown only, which still names them).

  Returns:
    The files that differ(ed) from what the records make, or that they no longer make.

  Raises:
    RecordError: a meta file that cannot be rendered.
  """
  records = load_records(runs_dir)
  shown = [r for r in records if not r.get('superseded') and
           (pages is None or set(r.pages) & set(pages))]
  rendered = {record.name: render(record) for record in shown}
  texts = {f'{page}.md': page_text(records, page, rendered)
           for page in PAGES if pages is None or page in pages}
  if pages is None:
    texts['index.md'] = index_text(records, rendered, runs_dir)
  changed = []
  for relative, text in sorted(texts.items()):
    path = os.path.join(out_dir, relative)
    if _read(path) != text:
      changed.append(path)
      if not check:
        _write(path, text)
  made = set(texts)
  for figure in [f for name in sorted(rendered) for f in rendered[name].figures]:
    if not figures:
      break
    relative = f'{IMAGES}/{figure.name}'
    path = os.path.join(out_dir, relative)
    if figure.source is not None:
      made.add(relative)
      source = os.path.join(REPO, figure.source)
      if _read(source, 'rb') != _read(path, 'rb'):
        changed.append(path)
        if not check:
          os.makedirs(os.path.dirname(path), exist_ok=True)
          shutil.copyfile(source, path)
      continue
    made.update({relative, relative + HASH_SUFFIX})
    key = _inputs_hash(figure)
    if _read(path + HASH_SUFFIX) != key or not os.path.exists(path):
      changed.append(path)
      if not check:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        figure.draw(path)
        _write(path + HASH_SUFFIX, key)  # after the PNG: a failed draw is drawn again
  if pages is None:  # what the records no longer make goes
    for path in sorted(glob.glob(os.path.join(out_dir, '**', '*'), recursive=True)):
      relative = os.path.relpath(path, out_dir)
      if (os.path.isfile(path) and relative not in made and
          (figures or not relative.startswith(IMAGES + os.sep))):
        changed.append(path)
        if not check:
          os.remove(path)
  if readme and pages is None:
    current = _read(readme)
    new = with_headline(current, headline_table(records))
    if new is None:
      print(f'{readme} has no {HEADLINE_START} / {HEADLINE_END} lines: its headline table '
            'is left alone.', file=sys.stderr)
    elif new != current:
      changed.append(readme)
      if not check:
        _write(readme, new)
  return changed


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The command line (see the module docstring).

  Args:
    argv: the arguments (default: sys.argv[1:]).

  Returns:
    The exit status: 0; 1 where --check found a file that differs; 2 where a meta file
    cannot be rendered (the error names it).
  """
  parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  parser.add_argument('--check', action='store_true',
                      help='Write nothing; exit 1 naming every file that differs.')
  parser.add_argument('--runs_dir', default=RUNS_DIR, help='The recorded runs.')
  parser.add_argument('--out_dir', default=OUT_DIR, help='Where the pages go.')
  parser.add_argument('--readme', default=README,
                      help='The README with the headline markers ("" for none).')
  parser.add_argument('--pages', default='',
                      help='Only these pages, comma-separated (no index, no README).')
  parser.add_argument('--no_figures', action='store_true',
                      help='Leave the figures out (the markdown still names them).')
  args = parser.parse_args(argv)
  pages = [p for p in args.pages.split(',') if p] or None
  if pages and set(pages) - set(PAGES):
    parser.error(f'unknown --pages {sorted(set(pages) - set(PAGES))}; choose from '
                 f'{list(PAGES)}')
  try:
    changed = run(args.out_dir, args.runs_dir, args.readme or None, args.check, pages,
                  figures=not args.no_figures)
  except RecordError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  named = [os.path.relpath(p) for p in changed]
  if args.check:
    if changed:
      print('These files differ from what benchmarks/results_pages.py writes (run it to '
            'write them):\n' + '\n'.join(f'  {p}' for p in named))
      return 1
    print(f'results pages: {len(PAGES) + 1} pages up to date.')
    return 0
  print('\n'.join(f'{"wrote" if os.path.exists(p) else "removed"} {p}' for p in named)
        if named else 'results pages: nothing to write.')
  return 0


if __name__ == '__main__':
  sys.exit(main())

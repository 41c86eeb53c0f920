"""The pbt program's body (`learners.pbt` parses its flags, then runs `main`; its
docstring says how a population trains): `Population`, the runner of the members and
the rounds, and the checks of the bounds it searches."""
import dataclasses
import math
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from absl import flags
import numpy as np

from learners.configuration import config
from learners.population import decisions
from learners.population import population
from learners.processes import fork_server
from learners.processes import process
from learners.processes import ray_backend
from tfrl import files
from tfrl import layouts
from tfrl import logs
from tfrl import run_dir
from tfrl.agents import interface

FLAGS = flags.FLAGS
_POLL_S = 0.5
# A stopped population's members each get up to 120 s to save (`_stop_all`).
_STOP_GRACE_S = 150.0
_MEMBER_WAIT_S = 120.0
_MEMBER_STOP_GRACE_S = 100.0  # a launched member's ordered stop, inside _MEMBER_WAIT_S
# Written when a population ends (not when it is stopped): a re-run does not train it again.
FINISHED_FILE = 'finished.json'


def parse_bounds(text: str) -> Dict[str, population.Bound]:
  """'name=low:high[:linear|:int],...' as bounds (log scale unless ':linear').

  Raises:
    ValueError: a malformed entry, named.
  """
  bounds = {}
  for entry in filter(None, (part.strip() for part in text.split(','))):
    name, _, spec = entry.partition('=')
    parts = spec.split(':')
    try:
      low, high = float(parts[0]), float(parts[1])
      options = set(parts[2:])
      if not options <= {'linear', 'int', 'log'}:
        raise ValueError(f'unknown options {sorted(options - {"linear", "int", "log"})}')
      bounds[name.strip()] = population.Bound(low, high, log='linear' not in options,
                                              integer='int' in options)
    except (ValueError, IndexError) as e:
      raise ValueError(f'--bounds entry {entry!r}: want name=low:high[:linear][:int] '
                       f'({e})') from None
  if not bounds:
    raise ValueError('--bounds names no hyperparameter')
  return bounds


def check_bounds(exp, bounds: Mapping[str, population.Bound]) -> None:
  """Checks, before any member starts, that the config's agent has every hyperparameter
  `bounds` names, as its builder declares them (`tfrl.agents.interface.tunable`; a
  builder that declares none is left to its members' own check), and that a bounded
  discount is one the data agrees with.

  Args:
    exp: the parsed config (`learners.configuration.config.parse`).
    bounds: the population's bounds.

  Raises:
    config.ConfigError: a bound the agent cannot take (one line naming both), or
      `gamma` bounded while the transition writer folds n > 1 steps with the config's.
  """
  names = interface.tunable_of(exp.agent_fn)
  builder = getattr(exp.agent_fn, '__name__', repr(exp.agent_fn))
  if names is not None:
    unknown = sorted(set(bounds) - set(names))
    if not names:
      raise config.ConfigError(f'{builder} builds an agent with no hyperparameters a '
                               'population can change')
    if unknown:
      raise config.ConfigError(
          f'--bounds names {", ".join(unknown)}, which {builder} has no hyperparameter '
          f'for; it has: {", ".join(names)}')
  if 'gamma' in bounds:
    layout_class = interface.layout_of(exp.agent_fn)
    settings = {**layouts.bound_settings(layout_class), **(exp.layout_settings or {})}
    n_step = settings.get('n_step', 1)
    if issubclass(layout_class, layouts.TransitionReplay) and n_step > 1:
      raise config.ConfigError(
          f'--bounds gamma: TransitionReplay.n_step = {n_step} folds each transition\'s '
          "rewards with the config's Experiment.gamma, which a member's new gamma would "
          'not change; bound gamma only with n_step = 1')


class MemberFailed(RuntimeError):
  """A member failed in a way that ends the population (the message names the member,
  its error and its log).

  Attributes:
    status: the exit status the runner should end with: the member's own for a failure
      no restart can fix (2: its configuration), else 1.
  """

  def __init__(self, message: str, status: int):
    super().__init__(message)
    self.status = status


# Exit statuses a restart cannot fix: every member runs the same config and disk.
_NOT_RETRIED = {2: 'bad flags or settings', process.EXIT_DISK_FULL: 'disk full'}


@dataclasses.dataclass
class _Member:
  index: int
  root_dir: str
  log_path: str
  process: Any = None  # a subprocess.Popen, or a ray_backend.RayProcess
  restarts: int = 0
  done: bool = False
  returncode: Optional[int] = None


class Population:
  """Runs the members and the rounds (see `learners.pbt`'s docstring)."""

  def __init__(self, root_dir: str, gin_files: Sequence[str], gin_bindings: Sequence[str],
               bounds: Mapping[str, population.Bound], population_size: int = 4,
               ready_interval: int = 50_000, seed: int = 0,
               quantile: float = population.QUANTILE,
               resample_probability: float = population.RESAMPLE_PROBABILITY,
               max_restarts: int = 2,
               python: str = sys.executable,
               backend: Optional['ray_backend.RayBackend'] = None,
               member_program: str = 'train_eval', member_collectors: int = 1,
               overwrite: bool = False, mode: str = 'sync',
               score_window: Optional[int] = None):
    """Args:
      root_dir: the population's directory: member_<i>/ (each member's job) and pbt/.
      gin_files, gin_bindings: the config every member trains.
      bounds: the hyperparameters searched and where (`parse_bounds`).
      population_size: members (>= 2).
      ready_interval: env steps between ready points.
      seed: the population's seed (member i trains with seed * 1000 + i).
      quantile, resample_probability: exploit and explore
        (`learners.population.population`).
      max_restarts: restarts of one member (after a kill or an error) before the
        population fails.
      python: the interpreter that runs the members (on every node).
      backend: a `ray_backend.RayBackend` places the members on a Ray cluster's nodes
        (root_dir on a path every node sees); None: subprocesses of this host.
      member_program: 'train_eval': each member is one process (`learners.pbt_member`);
        'launch': each is a launched job (`learners.launch`: its own Reverb server,
        trainer, collectors and evaluator; the trainer reports,
        `learners.job.trainer_member`).
      member_collectors: collectors of each launched member.
      overwrite: start afresh (`run` deletes the population's records and its members'
        jobs) instead of resuming or, once ended, not training again.
      mode: 'sync': each round is decided once every running member has reported it
        (the others wait at the barrier); 'async': each member's report is decided at
        once, against the other members' latest scores (`population.MODES`).
      score_window: reports a member's score is the mean of (None: the mode's default,
        `population.SCORE_WINDOWS`).

    Raises:
      ValueError: population_size < 2, an unknown member_program or mode,
        member_collectors < 1, score_window < 1.
    """
    if population_size < 2:
      raise ValueError(f'population_size must be >= 2, got {population_size}')
    if member_program not in population.MEMBER_PROGRAMS:
      raise ValueError('member_program must be one of '
                       f'{sorted(population.MEMBER_PROGRAMS)}, got '
                       f'{member_program!r}')
    if member_collectors < 1:
      raise ValueError(f'member_collectors must be >= 1, got {member_collectors}')
    self.member_program, self.member_collectors = member_program, member_collectors
    self.root_dir, self.pbt_dir = root_dir, os.path.join(root_dir, 'pbt')
    self.gin_files, self.gin_bindings = list(gin_files), list(gin_bindings)
    self.bounds, self.ready_interval, self.seed = dict(bounds), ready_interval, seed
    self.quantile, self.resample_probability = quantile, resample_probability
    self.max_restarts, self.python, self.backend = max_restarts, python, backend
    self.overwrite = overwrite
    self.rng = np.random.default_rng(seed)
    self.lineage = population.Lineage(os.path.join(self.pbt_dir, 'lineage.jsonl'))
    self.decider = decisions.Decider(self.pbt_dir, self.lineage, self.bounds, self.rng,
                                     quantile, resample_probability, mode, score_window)
    self.members = [_Member(i, os.path.join(root_dir, f'member_{i}'),
                            os.path.join(self.pbt_dir, f'member_{i}.log'))
                    for i in range(population_size)]
    self._stopping = False  # once set, members that exit have ended, not failed
    self._stop_requested = False  # stopped from outside: the population has not ended
    # Members (and restarts) start as forks of one preloaded process
    # (learners/processes/fork_server.py), which lives until the run ends.
    self._starter = fork_server.ProgramStarter(
        python, os.path.join(self.pbt_dir, 'fork_server.log'))

  def run(self, stop_event: Optional[threading.Event] = None) -> Dict[str, Any]:
    """Runs the population to its end (or, once `stop_event` is set, stops every
    member, which saves); returns best.json's content. A population that already ended
    (and no `overwrite`) is not run again: its best.json's content, with
    `already_finished` set.

    Raises:
      MemberFailed: a member failed in a way no restart fixes, or more than
        max_restarts times.
      tfrl.run_dir.RootDirBusy: another runner holds the population's root_dir (or,
        with `overwrite`, a member's job still holds its own).
    """
    with run_dir.RootDirLock(self.root_dir):  # one runner per population
      if self.overwrite:
        self._start_afresh()
      else:
        path = os.path.join(self.pbt_dir, FINISHED_FILE)
        finished = population.read_json(path)
        if finished is not None and finished.get('config') == self._config():
          logs.progress('The population in %s already ended (best member %s); nothing to '
                        'train. For more, change the config (e.g. raise '
                        'Experiment.num_train_steps); to start over, --overwrite.',
                        self.root_dir, finished['best'].get('best_member'))
          return {**finished['best'], 'already_finished': True}
        if finished is not None:  # asked for something else: the members decide
          logs.progress('The population in %s ended with another config; resuming it.',
                        self.root_dir)
          files.remove_tree(path)
      return self._run(stop_event)

  def _config(self) -> Dict[str, List[str]]:
    """What a finished population is compared with: its gin files and bindings."""
    return {'gin_files': self.gin_files, 'gin_bindings': self.gin_bindings}

  def _start_afresh(self) -> None:
    """--overwrite: deletes the population's records (pbt/) and each member's root_dir
    (checkpoints, exports, end record, a launched member's Reverb checkpoints and
    evaluations), each under the member's own lock, as `run_dir.claim(overwrite=True)`
    deletes one job's under its lock.

    Raises:
      tfrl.run_dir.RootDirBusy: a member's job is still running (named, not deleted
        under it).
    """
    for member in self.members:
      if os.path.isdir(member.root_dir):
        with run_dir.RootDirLock(member.root_dir):
          files.remove_tree(member.root_dir)
        logs.progress('--overwrite: deleted member %d\'s job in %s.', member.index,
                      member.root_dir)
    if os.path.isdir(self.pbt_dir) and os.listdir(self.pbt_dir):
      files.remove_tree(self.pbt_dir)
      logs.progress('--overwrite: deleted the population\'s records in %s.', self.pbt_dir)
    os.makedirs(self.pbt_dir, exist_ok=True)  # the lineage appends to a file in it

  def _run(self, stop_event: Optional[threading.Event]) -> Dict[str, Any]:
    self.decider.resume([m.index for m in self.members])
    for member in self.members:
      self._start(member, first=True)
    try:
      while not all(m.done for m in self.members):
        if stop_event is not None and stop_event.is_set():
          self._stop_requested = True
          self._stop_all('stop requested')
        self._check_processes()
        self.decider.decide([m.index for m in self.members if not m.done])
        time.sleep(_POLL_S)
    finally:
      self._stop_all('the runner is ending')
      self._starter.close()
    best = self._best()
    if not self._stop_requested:  # every member's job ended: the population has
      population.write_json(os.path.join(self.pbt_dir, FINISHED_FILE),
                            {'config': self._config(), 'best': best})
    return best

  def _command(self, member: _Member) -> List[str]:
    bindings = self.gin_bindings + [f'Experiment.seed = {self.seed * 1000 + member.index}']
    if self.member_program == 'launch':
      # The ordered stop gets most of the runner's wait for a stopped member (`_stop_all`):
      # four jobs' programs on one host made a trainer's final export outlast the
      # default's 12 s share.
      module, extra = 'learners.launch', [
          f'--num_collectors={self.member_collectors}', '--status_interval_s=30',
          f'--stop_grace_s={_MEMBER_STOP_GRACE_S:.0f}']
    else:
      module, extra = 'learners.pbt_member', ['--progress_bar=off']
    return ([self.python, '-u', '-m', module, f'--root_dir={member.root_dir}',
             f'--pbt_dir={self.pbt_dir}', f'--member={member.index}',
             f'--ready_interval={self.ready_interval}', *extra] +
            [f'--gin_file={f}' for f in self.gin_files] +
            [f'--gin_bindings={b}' for b in bindings])

  def _start(self, member: _Member, first: bool = False) -> None:
    start_file = os.path.join(population.member_dir(self.pbt_dir, member.index), 'start.json')
    if first and population.read_json(start_file) is None:
      values = population.sample_all(self.bounds, self.rng)
      population.write_json(start_file, {'hyperparameters': values})
      self.lineage.record('start', member.index, env_steps=0, hyperparameters=values)
    os.makedirs(self.pbt_dir, exist_ok=True)
    command, env = self._command(member), dict(os.environ)
    if self.backend is not None:
      member.process = self.backend.start('pbt_member', command, member.log_path, env)
      logs.progress('Member %d started (pid %d on %s, Ray node %s), log %s.', member.index,
                    member.process.pid, member.process.ip, member.process.node_id,
                    member.log_path)
      return
    # Members die with the runner (a killed runner leaves no job behind).
    member.process = self._starter.start(command, member.log_path, env)
    logs.progress('Member %d started (pid %d), log %s.', member.index, member.process.pid,
                  member.log_path)

  def _check_processes(self) -> None:
    for member in self.members:
      if not member.done and member.process.poll() is not None:
        self._exited(member)

  def _exited(self, member: _Member) -> None:
    """A member's process ended: its job's end, or a failure that the member restarts
    from (after a kill: its own checkpoint; after an error: a copy of a top member).

    Raises:
      MemberFailed: a failure a restart cannot fix, or one past max_restarts.
    """
    code = member.process.returncode
    if hasattr(member.process, 'release'):  # a backend's: free its place on the cluster
      member.process.release()
    result = self._member_result(member)
    if code == 0 or result or self._stopping:  # result.json: the job ran to its end
      member.done, member.returncode = True, code
      self.lineage.record('end', member.index, returncode=code, **result)
      if result.get('reached_target'):
        self._stop_all(f'member {member.index} reached the target')
      return
    why = process.EXIT_STATUS_MEANING.get(code, 'killed by a signal' if code < 0
                                          else 'failed with an error')
    if code in _NOT_RETRIED or member.restarts >= self.max_restarts:
      self.lineage.record('failed', member.index, returncode=code)
      said = _error_line(member.log_path)
      raise MemberFailed(
          f'population member {member.index} {why} (exit status {code}) after '
          f'{member.restarts} restarts{": " + said if said else ""}; see '
          f'{member.log_path}', code if code in _NOT_RETRIED else 1)
    member.restarts += 1
    self.lineage.record('restart', member.index, returncode=code)
    if code > 0 and code != process.EXIT_STALLED:  # an error: not its checkpoint again
      self._replace(member)
    logs.progress('Member %d %s (exit status %d); restarting it (%d of %d).', member.index,
                  why, code, member.restarts, self.max_restarts)
    self._start(member)

  def _replace(self, member: _Member) -> None:
    """Gives a member that failed with an error a copy of a top member to take on
    restart (`decisions.Decider.replace`)."""
    source = self.decider.replace(member.index, [m.index for m in self.members])
    logs.progress('Member %d failed with an error: it restarts as a copy of %s.',
                  member.index, 'nobody (no member has reported yet; fresh hyperparameters)'
                  if source is None else f'member {source}')

  def _stop_all(self, why: str) -> None:
    running = [m for m in self.members if m.process is not None and m.process.poll() is None]
    if running and not self._stopping:
      logs.progress('Stopping the population: %s.', why)
    self._stopping = True
    for member in running:
      member.process.send_signal(signal.SIGTERM)
    for member in running:
      try:
        member.process.wait(timeout=_MEMBER_WAIT_S)
      except subprocess.TimeoutExpired:
        member.process.kill()
        member.process.wait()

  def _member_result(self, member: _Member) -> Dict[str, Any]:
    """What the member's job returned at its end (`member_<i>/result.json`), or {}."""
    return population.read_json(os.path.join(
        population.member_dir(self.pbt_dir, member.index), 'result.json')) or {}

  def _best(self) -> Dict[str, Any]:
    """The members' final scores and the best one's policy (best.json), which a run that
    ends with no member scored (every one stopped before its first evaluation) leaves
    as an earlier run wrote it: the population's result is never replaced by none."""
    results = {m.index: self._member_result(m) for m in self.members}
    scores = {i: float(r.get('eval_return', math.nan)) for i, r in results.items()}
    best = population.best_member(scores)
    summary = {'best_member': best, 'scores': {str(i): s for i, s in scores.items()},
               'greedy_policy_dir': None if best is None else os.path.abspath(
                   results[best]['greedy_policy_dir']),
               'lineage': self.lineage.path}
    path = os.path.join(self.pbt_dir, 'best.json')
    previous = population.read_json(path)
    if best is None and previous and previous.get('best_member') is not None:
      logs.progress('No member has a final score this run; %s keeps the earlier result '
                    '(member %s).', path, previous['best_member'])
      return previous
    population.write_json(path, summary)
    return summary


def _error_line(log_path: str) -> Optional[str]:
  """The last 'error: ...' line of a member's log (what it said it failed on), if any."""
  try:
    with open(log_path, errors='replace') as f:
      lines = [line.strip() for line in f if line.startswith('error: ')]
  except OSError:
    return None
  return lines[-1][len('error: '):] if lines else None


def main() -> None:
  """Runs the population the parsed flags describe; prints its best member."""
  try:
    bounds = parse_bounds(FLAGS.bounds or '')
    # The config, and the bounds against its agent, before any member (or Ray cluster).
    check_bounds(config.parse(FLAGS.gin_file, FLAGS.gin_bindings), bounds)
  except ValueError as e:  # config.ConfigError included
    config.fail(str(e))
  backend = ray_backend.from_flags(trainer_gpus=0.0, member_gpus=FLAGS.ray_member_gpus)
  try:
    runner = Population(FLAGS.root_dir, FLAGS.gin_file, FLAGS.gin_bindings,
                        bounds, FLAGS.population_size,
                        FLAGS.ready_interval, FLAGS.seed, FLAGS.quantile,
                        FLAGS.resample_probability, FLAGS.max_restarts, backend=backend,
                        member_program=FLAGS.member_program,
                        member_collectors=FLAGS.member_collectors,
                        overwrite=FLAGS.overwrite, mode=FLAGS.mode,
                        score_window=FLAGS.score_window)
  except ValueError as e:  # bounds, sizes
    config.fail(str(e))
  try:
    # SIGTERM / SIGINT / SIGHUP: stop every member (each saves), then end.
    best = process.run_until_signal(runner.run, 'tfrl-pbt', grace_s=_STOP_GRACE_S)
  except run_dir.RootDirBusy as e:
    config.fail(str(e))
  except MemberFailed as e:  # one line, the member's own error in it
    print(f'error: {e}', file=sys.stderr, flush=True)
    process.exit_now(e.status)
  if best.get('already_finished'):
    print('Already finished.')
  print(f'Best member: {best["best_member"]} (eval return '
        f'{best["scores"].get(str(best["best_member"]), math.nan):.1f}); its policy: '
        f'{best["greedy_policy_dir"]}; lineage: {best["lineage"]}')

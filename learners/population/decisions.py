"""How a population's runner answers its members (`learners.pbt`): the decisions at their
ready points, synchronous or asynchronous (`population.MODES`), and the copy a member
that failed with an error restarts as.

Members and the runner talk through files in the population's directory
(`member_<i>/report_<k>.json`, `decision_<k>.json`, `replacement_<n>.json`:
`learners.population.ready_points`); `Decider` reads the reports and writes the answers,
records each in the lineage and the scores in TensorBoard. The choices themselves
(truncation selection, perturbation) are `learners.population.population`'s.
"""
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from learners.population import population
from tfrl import logs

Report = Dict[str, Any]


class Decider:
  """Answers the members' reports (see the module docstring)."""

  def __init__(self, pbt_dir: str, lineage: population.Lineage,
               bounds: Mapping[str, population.Bound], rng: np.random.Generator,
               quantile: float = population.QUANTILE,
               resample_probability: float = population.RESAMPLE_PROBABILITY,
               mode: str = 'sync', score_window: Optional[int] = None):
    """Args:
      pbt_dir: the population's directory.
      lineage: where starts, reports and copies are recorded.
      bounds: the hyperparameters searched and where.
      rng: the population's random generator (shared with the runner's draws).
      quantile, resample_probability: exploit and explore (`population`).
      mode: 'sync': a round is decided once every running member has reported it;
        'async': each report is decided at once, against the other running members'
        latest scores.
      score_window: reports a member's score is the mean of (None: the mode's default,
        `population.SCORE_WINDOWS`).

    Raises:
      ValueError: an unknown mode, a score_window < 1.
    """
    if mode not in population.MODES:
      raise ValueError(f'mode must be one of {list(population.MODES)}, got {mode!r}')
    self.mode = mode
    self.score_window = population.SCORE_WINDOWS[mode] if score_window is None else score_window
    if self.score_window < 1:
      raise ValueError(f'score_window must be >= 1 report, got {self.score_window}')
    self.pbt_dir, self.lineage, self.bounds, self.rng = pbt_dir, lineage, dict(bounds), rng
    self.quantile, self.resample_probability = quantile, resample_probability
    self.round = 1  # the synchronous round decided next
    self._writer = None

  def report(self, member: int, round_: int) -> Optional[Report]:
    """Member `member`'s report of round `round_`, None before it has made it."""
    return population.read_json(os.path.join(
        population.member_dir(self.pbt_dir, member), f'report_{round_}.json'))

  def latest_reports(self, members: Sequence[int]) -> Dict[int, Report]:
    """The latest report of each of `members` that has made one."""
    latest = {}
    for member in members:
      last = population.last_round(population.member_dir(self.pbt_dir, member), 'report')
      report = self.report(member, last) if last else None
      if report is not None:
        latest[member] = report
    return latest

  def resume(self, members: Sequence[int]) -> None:
    """A resumed population goes on at the first round not every member has a decision
    of (synchronous rounds; an asynchronous member's next report is its own)."""
    while all(population.last_round(population.member_dir(self.pbt_dir, m), 'decision')
              >= self.round for m in members):
      self.round += 1

  def decide(self, running: Sequence[int]) -> None:
    """Answers what the `running` members have reported and is due an answer."""
    if self.mode == 'async':
      for member in running:
        self._decide_member(member, running)
    elif running and all(self.report(m, self.round) is not None for m in running):
      self._decide_round(running)

  def replace(self, member: int, members: Sequence[int]) -> Optional[int]:
    """Writes what member `member`, failed with an error, restarts as
    (`member_<i>/replacement_<n>.json`): a copy of a top member of `members` (its
    latest checkpoint, perturbed hyperparameters), or before any has reported, fresh
    hyperparameters on its own weights. Returns the source member, None for fresh."""
    latest = self.latest_reports(members)
    copy = population.replace_failed(
        member, {i: r['score'] for i, r in latest.items()},
        {i: r['hyperparameters'] for i, r in latest.items()}, self.bounds, self.rng,
        self.quantile, resample_probability=self.resample_probability)
    source = None if copy is None else copy.source
    values = (population.sample_all(self.bounds, self.rng) if copy is None
              else copy.hyperparameters)
    directory = population.member_dir(self.pbt_dir, member)
    number = population.last_round(directory, 'replacement') + 1
    population.write_json(os.path.join(directory, f'replacement_{number}.json'), {
        'action': 'exploit', 'source': source, 'hyperparameters': values,
        'checkpoint': None if copy is None else latest[source]['checkpoint']})
    self.lineage.record('replace', member, source=source, hyperparameters=values,
                        env_steps=latest.get(member, {}).get('env_steps', 0))
    return source

  def _score(self, member: int, round_: int) -> float:
    """Member `member`'s score at its report `round_`: the mean of its last
    `score_window` reported scores up to that one."""
    first = max(1, round_ - self.score_window + 1)
    history = [report['score'] for report in (
        self.report(member, k) for k in range(first, round_ + 1)) if report is not None]
    return population.smoothed(history, self.score_window)

  def _decide_round(self, running: Sequence[int]) -> None:
    """Synchronous: round `self.round`, which every running member has reported."""
    reports = {m: self.report(m, self.round) for m in running}
    scores = {m: self._score(m, self.round) for m in reports}
    decisions = population.exploit_and_explore(
        scores, {m: r['hyperparameters'] for m, r in reports.items()}, self.bounds,
        self.rng, self.quantile, resample_probability=self.resample_probability)
    self._answer({m: (self.round, r) for m, r in reports.items()}, scores, decisions,
                 reports)
    logs.progress('Round %d: scores %s; %s.', self.round, ', '.join(
        f'{m}: {scores[m]:.1f}' for m in sorted(reports)), '; '.join(
            f'{d.member} takes {d.source}' for d in decisions) or 'no copies')
    self.round += 1

  def _decide_member(self, member: int, running: Sequence[int]) -> None:
    """Asynchronous: answers `member`'s next report if it has made it, against the
    latest reports of the running members (those yet to report left out)."""
    round_ = population.last_round(population.member_dir(self.pbt_dir, member),
                                   'decision') + 1
    report = self.report(member, round_)
    if report is None:
      return
    latest = {**self.latest_reports([m for m in running if m != member]), member: report}
    scores = {m: self._score(m, r['round']) for m, r in latest.items()}
    decision = population.exploit_one(
        member, scores, {m: r['hyperparameters'] for m, r in latest.items()}, self.bounds,
        self.rng, self.quantile, resample_probability=self.resample_probability)
    self._answer({member: (round_, report)}, scores, [decision] if decision else [], latest)
    logs.progress('Member %d at ready point %d (%d env steps): score %.1f against %s; %s.',
                  member, round_, report['env_steps'], scores[member],
                  ', '.join(f'{m}: {scores[m]:.1f}' for m in sorted(scores) if m != member)
                  or 'no other score yet',
                  f'takes member {decision.source}' if decision else 'carries on')

  def _answer(self, ready: Mapping[int, Tuple[int, Report]], scores: Mapping[int, float],
              decisions: Sequence[population.Exploit],
              sources: Mapping[int, Report]) -> None:
    """Records the ready members' reports and writes each one's decision file.

    Args:
      ready: member -> (its report's round, the report), for the members decided now.
      scores: the members' scores the decisions ranked (`_score`).
      decisions: the copies to make, one per member at most.
      sources: member -> the report whose checkpoint a copy of it takes.
    """
    for member, (round_, report) in ready.items():
      self.lineage.record('ready', member, round=round_, env_steps=report['env_steps'],
                          score=report['score'], smoothed_score=scores[member],
                          hyperparameters=report['hyperparameters'])
    copies = {d.member: d for d in decisions}
    for member, (round_, report) in ready.items():
      path = os.path.join(population.member_dir(self.pbt_dir, member),
                          f'decision_{round_}.json')
      if member not in copies:
        population.write_json(path, {'action': 'continue'})
        continue
      decision, source = copies[member], sources[copies[member].source]
      self.lineage.record('exploit', member, round=round_, source=decision.source,
                          env_steps=report['env_steps'],
                          source_train_step=source['train_step'],
                          hyperparameters=decision.hyperparameters)
      population.write_json(path, {'action': 'exploit', 'source': decision.source,
                                   'checkpoint': source['checkpoint'],
                                   'hyperparameters': decision.hyperparameters})
    self._summaries({member: report for member, (_, report) in ready.items()})

  def _summaries(self, reports: Mapping[int, Report]) -> None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top (only here: start-up)
    if self._writer is None:
      self._writer = tf.summary.create_file_writer(os.path.join(self.pbt_dir, 'tensorboard'))
    with self._writer.as_default():
      for member, report in reports.items():
        step = report['env_steps']
        tf.summary.scalar(f'member_{member}/score', report['score'], step=step)
        for name, value in report['hyperparameters'].items():
          tf.summary.scalar(f'member_{member}/{name}', value, step=step)
    self._writer.flush()

"""A population of two PPO CartPole members under `learners.pbt`: rounds, copies, the
lineage, a member killed mid-run that resumes, and the best member's policy; a finished
population run again, `--overwrite` (over a population of SAC members, whose round
tunes SAC's learning rates), and configuration errors ended at once."""
import json
import os
import signal
import sys
import threading
import time
import types

import pytest
import tensorflow as tf

import python_runs  # tests/python_runs.py
from learners.configuration import config
from learners.job import trainer_member
from learners.population import population
from learners.population import population_runner
from learners.population import ready_points
from learners.processes import heartbeat
from programs import evaluate_export  # tests/learners/programs.py
from tfrl.agents import hyperparameters as hyperparameters_lib

BINDINGS = ['Experiment.num_train_steps = 24', 'Experiment.eval_interval = 4',
            'Experiment.num_eval_episodes = 2', 'Experiment.target_return = None',
            'Experiment.checkpoint_interval = 4']
BOUNDS = 'learning_rate=1e-4:1e-2,entropy_cost=0:0.02:linear'


# Stands in for the interpreter the runner starts members with: runs the member, except
# member 1's second start (after its kill), which fails with an error once member 0 has
# reported, as a member whose job raised would.
BREAKS_ONCE = """#!{python}
import os, sys, time
args = dict(a[2:].split('=', 1) for a in sys.argv if a.startswith('--') and '=' in a)
starts = os.path.join(args['pbt_dir'], 'starts_of_' + args['member'])
with open(starts, 'a') as f:
  f.write('x')
if args['member'] == '1' and os.path.getsize(starts) == 2:
  report = os.path.join(args['pbt_dir'], 'member_0', 'report_1.json')
  deadline = time.monotonic() + 300
  while not os.path.exists(report) and time.monotonic() < deadline:
    time.sleep(0.2)
  print('error: member 1 broke (a stand-in for an exception in its job)', flush=True)
  sys.exit(1)
os.execv(sys.executable, [sys.executable] + sys.argv[1:])
"""


def test_a_population_copies_records_survives_a_kill_and_an_error_and_names_its_best(
    tmp_path):
  root = str(tmp_path / 'run')
  python = tmp_path / 'breaks_once.py'
  python.write_text(BREAKS_ONCE.format(python=sys.executable))
  python.chmod(0o755)
  runner = population_runner.Population(root, ['ppo_cartpole.gin'], BINDINGS, population_runner.parse_bounds(BOUNDS),
                          population_size=2, ready_interval=2048, seed=0,
                          python=str(python))
  outcome = {}
  thread = threading.Thread(target=lambda: outcome.update(best=runner.run()), daemon=True)
  thread.start()
  # Member 1 is killed (-9) once it has reported its first round: the runner restarts
  # it; that start fails with an error (BREAKS_ONCE), so the runner has it start again
  # as a copy of member 0, the only other member.
  report = os.path.join(population.member_dir(runner.pbt_dir, 1), 'report_1.json')
  deadline = time.monotonic() + 300
  while not os.path.exists(report):
    assert time.monotonic() < deadline and thread.is_alive(), "no first report of member 1"
    time.sleep(0.2)
  runner.members[1].process.send_signal(signal.SIGKILL)
  thread.join(timeout=600)
  assert not thread.is_alive(), 'the population did not end'

  events = population.read(runner.lineage.path)
  kinds = [(e['event'], e['member']) for e in events]
  assert kinds[:2] == [('start', 0), ('start', 1)]
  assert [e['returncode'] for e in events if e['event'] == 'restart'] == [-9, 1], kinds
  assert sorted(k for k in kinds if k[0] == 'end') == [('end', 0), ('end', 1)]
  replace, = [e for e in events if e['event'] == 'replace']
  assert replace['member'] == 1 and replace['source'] == 0, replace
  with open(os.path.join(population.member_dir(runner.pbt_dir, 1),
                         'replacement_1.json')) as f:
    replacement = json.load(f)
  assert replacement['checkpoint'].startswith(os.path.join(root, 'member_0')), replacement
  readies = [e for e in events if e['event'] == 'ready']
  assert {e['round'] for e in readies} >= {1, 2}
  for event in readies:  # each round's report at or past its ready point
    assert event['env_steps'] >= 2048 * event['round']
  # The drawn settings stay inside their bounds, copies included.
  bounds = population_runner.parse_bounds(BOUNDS)
  for event in events:
    for name, value in event.get('hyperparameters', {}).items():
      if name in bounds:
        assert bounds[name].low <= value <= bounds[name].high * (1 + 1e-6), (name, event)
  # Every copy is from a member that scored better in that round, and the copying
  # member reports the decision's settings in its next round.
  history = population.replay(runner.lineage.path)
  for copy in (e for e in events if e['event'] == 'exploit'):
    scores = {e['member']: e['score'] for e in readies if e['round'] == copy['round']}
    assert scores[copy['source']] > scores[copy['member']], copy
    assert copy['hyperparameters'] in [h['hyperparameters'] for h in history[copy['member']]]
    later = [e for e in readies if e['member'] == copy['member'] and
             e['round'] == copy['round'] + 1]
    for event in later:
      for name, value in copy['hyperparameters'].items():
        assert event['hyperparameters'][name] == pytest.approx(value, rel=1e-6)
  assert any(e['event'] == 'exploit' for e in events), kinds

  best = outcome['best']
  with open(os.path.join(runner.pbt_dir, 'best.json')) as f:
    assert json.load(f) == best
  assert best['best_member'] in (0, 1)
  assert best['scores'][str(best['best_member'])] == max(best['scores'].values())
  config.parse(['ppo_cartpole.gin'], BINDINGS)
  played = evaluate_export(best['greedy_policy_dir'], seed=0)
  assert played > 0  # CartPole pays 1 a step: the exported policy loads and plays
  with open(os.path.join(runner.pbt_dir, 'member_1.log')) as f:
    log = f.read()
  assert 'Restored ' in log, log[-3000:]  # the restarted member went on from its checkpoint
  assert 'error: member 1 broke' in log
  assert "Population member 1 took member 0's weights" in log.split('member 1 broke')[1]


def test_bad_bounds_are_refused_in_one_line():
  with pytest.raises(ValueError, match=r"--bounds entry 'learning_rate=1e-3': want "
                     r'name=low:high\[:linear\]\[:int\]'):
    population_runner.parse_bounds('learning_rate=1e-3')
  with pytest.raises(ValueError, match='unknown options'):
    population_runner.parse_bounds('entropy_cost=0:0.1:lin')
  assert population_runner.parse_bounds('target_update_period=100:1000:int:linear') == {
      'target_update_period': population.Bound(100, 1000, log=False, integer=True)}
  with pytest.raises(ValueError, match='population_size must be >= 2'):
    population_runner.Population('/tmp/unused', [], [], population_runner.parse_bounds('learning_rate=1e-4:1e-2'),
                   population_size=1)


FAKE_MEMBER = '''#!/usr/bin/env python3
"""Stands in for `python -m learners.pbt_member` (the runner's command after the
interpreter): member 0 {zero}; member 1 waits for SIGTERM, then ends as a stopped job."""
import json, os, signal, sys, time
args = dict(a[2:].split('=', 1) for a in sys.argv if a.startswith('--') and '=' in a)
directory = os.path.join(args['pbt_dir'], 'member_' + args['member'])
os.makedirs(directory, exist_ok=True)
def finish(reached, status=0):
  with open(os.path.join(directory, 'result.json'), 'w') as f:
    json.dump({{'train_step': 9, 'env_steps': 90, 'eval_return': 1.0 if reached else 0.0,
               'reached_target': reached, 'greedy_policy_dir': directory}}, f)
  sys.exit(status)
if args['member'] == '0':
  {zero_code}
signal.signal(signal.SIGTERM, lambda *_: finish(False))
time.sleep(120)
sys.exit(7)
'''


def fake_population(tmp_path, zero, zero_code, **kwargs):
  """A population of two FAKE_MEMBERs, member 0 running `zero_code`."""
  path = tmp_path / 'fake_member.py'
  path.write_text(FAKE_MEMBER.format(zero=zero, zero_code=zero_code))
  path.chmod(0o755)
  return population_runner.Population(str(tmp_path / 'run'), [], [], population_runner.parse_bounds(BOUNDS),
                        population_size=2, python=str(path), **kwargs)


def test_a_member_that_reaches_the_target_ends_the_population(tmp_path):
  runner = fake_population(tmp_path, 'reaches the target at once',
                           'time.sleep(1); finish(True)')
  best = runner.run()
  assert best['best_member'] == 0
  ends = {e['member']: e for e in population.read(runner.lineage.path)
          if e['event'] == 'end'}
  assert ends[0]['reached_target'] and not ends[1]['reached_target']
  assert runner.members[1].returncode == 0  # stopped by SIGTERM, ended as a stopped job


def test_a_member_failing_past_its_restarts_ends_the_population_with_an_error(tmp_path):
  runner = fake_population(tmp_path, 'fails every time', 'sys.exit(1)', max_restarts=2)
  with pytest.raises(RuntimeError, match=r'population member 0 failed \(see its log\) '
                     r'\(exit status 1\) after 2 restarts; see .*member_0.log'):
    runner.run()
  events = population.read(runner.lineage.path)
  kinds = [(e['event'], e['member']) for e in events]
  assert kinds.count(('restart', 0)) == 2 and ('failed', 0) in kinds
  # Failed with an error before anyone reported: each restart draws fresh settings.
  replaces = [e for e in events if e['event'] == 'replace']
  assert [e['source'] for e in replaces] == [None, None]
  bounds = population_runner.parse_bounds(BOUNDS)
  for event in replaces:
    assert all(bounds[n].low <= v <= bounds[n].high for n, v in
               event['hyperparameters'].items()), event
  assert runner.members[1].process.poll() is not None  # the other member was stopped


def test_bad_settings_end_the_population_without_a_restart(tmp_path):
  runner = fake_population(tmp_path, 'has bad settings', 'sys.exit(2)')
  with pytest.raises(RuntimeError, match=r'population member 0 bad input \(see its log\) '
                     r'\(exit status 2\) after 0 restarts'):
    runner.run()
  kinds = [(e['event'], e['member']) for e in population.read(runner.lineage.path)]
  assert ('restart', 0) not in kinds and ('failed', 0) in kinds


def test_a_member_that_ends_its_budget_short_of_the_target_has_ended_not_failed(tmp_path):
  """train_eval exits 1 when its budget ends short of the target, with its result."""
  runner = fake_population(tmp_path, 'ends short of the target',
                           'time.sleep(1); finish(False, status=1)')
  stop = threading.Event()
  outcome = {}
  thread = threading.Thread(target=lambda: outcome.update(best=runner.run(stop)))
  thread.start()
  deadline = time.monotonic() + 60
  while not runner.members[0].done:
    assert time.monotonic() < deadline and thread.is_alive(), 'member 0 did not end'
    time.sleep(0.1)
  stop.set()
  thread.join(timeout=120)
  kinds = [(e['event'], e['member']) for e in population.read(runner.lineage.path)]
  assert ('restart', 0) not in kinds, kinds
  assert sorted(k for k in kinds if k[0] == 'end') == [('end', 0), ('end', 1)]
  assert outcome['best']['scores'] == {'0': 0.0, '1': 0.0}


def test_a_failed_member_is_replaced_by_a_copy_of_a_top_member(tmp_path):
  runner = population_runner.Population(str(tmp_path / 'run'), [], [], population_runner.parse_bounds(BOUNDS),
                          population_size=4, seed=3)
  scores = {0: 10.0, 1: 50.0, 2: -5.0, 3: 20.0}
  for member, score in scores.items():
    population.write_json(os.path.join(population.member_dir(runner.pbt_dir, member),
                                       'report_1.json'), {
        'round': 1, 'env_steps': 100 * member, 'train_step': member, 'score': score,
        'checkpoint': f'/ckpt/{member}', 'hyperparameters': {
            'learning_rate': 1e-3 * (member + 1), 'entropy_cost': 0.005 * member}})
  runner._replace(runner.members[1])  # the best member failed: the next best is copied
  runner._replace(runner.members[2])
  directory = population.member_dir(runner.pbt_dir, 1)
  first = population.read_json(os.path.join(directory, 'replacement_1.json'))
  assert first['source'] == 3 and first['checkpoint'] == '/ckpt/3', first
  second = population.read_json(os.path.join(population.member_dir(runner.pbt_dir, 2),
                                             'replacement_1.json'))
  assert second['source'] == 1 and second['checkpoint'] == '/ckpt/1', second
  for value, source_value in ((first['hyperparameters']['learning_rate'], 4e-3),
                              (second['hyperparameters']['learning_rate'], 2e-3)):
    assert value == pytest.approx(source_value * 0.8) or value == pytest.approx(
        source_value * 1.2) or 1e-4 <= value <= 1e-2
  runner._replace(runner.members[1])  # a second failure: the next file
  assert population.last_round(directory, 'replacement') == 2
  assert [e['member'] for e in population.read(runner.lineage.path)] == [1, 2, 1]


# Stands in for a member that reports (scores below) and waits for each decision: member
# 0 reports three times before member 1 reports at all, then once more after member 1's
# decision; member 1 reports once member 0 has its third decision. A barrier would hold
# member 0 at its first.
REPORTER = '''#!/usr/bin/env python3
import json, os, sys, time
args = dict(a[2:].split('=', 1) for a in sys.argv if a.startswith('--') and '=' in a)
pbt, member = args['pbt_dir'], args['member']
directory = os.path.join(pbt, 'member_' + member)
def wait_for(path):
  deadline = time.monotonic() + 60
  while not os.path.exists(path):
    if time.monotonic() > deadline:
      print('error: no ' + path, flush=True)
      sys.exit(1)
    time.sleep(0.05)
  time.sleep(0.05)  # written whole (write_json renames into place; this is cheap)
  with open(path) as f:
    return json.load(f)
values = wait_for(os.path.join(directory, 'start.json'))['hyperparameters']
def report(k, score):
  with open(os.path.join(directory, 'report_%d.json' % k), 'w') as f:
    json.dump({'round': k, 'env_steps': 100 * k, 'train_step': k, 'score': score,
               'checkpoint': '/ckpt/%s/%d' % (member, k), 'hyperparameters': values}, f)
  return wait_for(os.path.join(directory, 'decision_%d.json' % k))
if member == '0':
  for k in (1, 2, 3):
    assert report(k, 0.0)['action'] == 'continue'
  wait_for(os.path.join(pbt, 'member_1', 'decision_1.json'))
  print('DECISION ' + json.dumps(report(4, 0.0)), flush=True)
else:
  wait_for(os.path.join(pbt, 'member_0', 'decision_3.json'))
  print('DECISION ' + json.dumps(report(1, 10.0)), flush=True)
  wait_for(os.path.join(pbt, 'member_0', 'decision_4.json'))  # running while it is made
with open(os.path.join(directory, 'result.json'), 'w') as f:
  json.dump({'train_step': 9, 'env_steps': 400, 'eval_return': 0.0,
             'reached_target': False, 'greedy_policy_dir': directory}, f)
'''


def test_an_asynchronous_population_decides_each_report_without_a_barrier(tmp_path):
  path = tmp_path / 'reporter.py'
  path.write_text(REPORTER)
  path.chmod(0o755)
  runner = population_runner.Population(
      str(tmp_path / 'run'), [], [], population_runner.parse_bounds(BOUNDS),
      population_size=2, python=str(path), mode='async')
  runner.run()
  assert [m.returncode for m in runner.members] == [0, 0], [
      open(m.log_path).read()[-2000:] for m in runner.members]
  readies = [(e['member'], e['round'], e['smoothed_score'])
             for e in population.read(runner.lineage.path) if e['event'] == 'ready']
  # Member 0's first three reports were decided before member 1 had reported.
  assert readies == [(0, 1, 0.0), (0, 2, 0.0), (0, 3, 0.0), (1, 1, 10.0), (0, 4, 0.0)]
  with open(runner.members[0].log_path) as f:
    last = json.loads(f.read().split('DECISION ')[-1].splitlines()[0])
  assert last['action'] == 'exploit' and last['source'] == 1, last
  assert last['checkpoint'] == '/ckpt/1/1', last  # member 1's latest report's


@pytest.mark.parametrize('window,copier,source', [(1, 1, 0), (2, 0, 1)])
def test_asynchronous_scores_are_smoothed_over_the_last_reports(tmp_path, window, copier,
                                                                 source):
  """Member 1 scored 100 then -10, member 0 0 and 0: over one report member 1 is the
  bottom, over two (mean 45) member 0 is."""
  runner = population_runner.Population(
      str(tmp_path / 'run'), [], [], population_runner.parse_bounds(BOUNDS),
      population_size=2, mode='async', score_window=window)
  for member, scores in ((0, (0.0, 0.0)), (1, (100.0, -10.0))):
    directory = population.member_dir(runner.pbt_dir, member)
    for k, score in enumerate(scores, start=1):
      population.write_json(os.path.join(directory, f'report_{k}.json'), {
          'round': k, 'env_steps': 100 * k, 'train_step': k, 'score': score,
          'checkpoint': f'/ckpt/{member}/{k}', 'hyperparameters': {
              'learning_rate': 1e-3, 'entropy_cost': 0.01}})
    population.write_json(os.path.join(directory, 'decision_1.json'), {'action': 'continue'})
  runner.decider.decide([0, 1])
  decisions = {m: population.read_json(os.path.join(population.member_dir(
      runner.pbt_dir, m), 'decision_2.json')) for m in (0, 1)}
  assert decisions[source] == {'action': 'continue'}, decisions
  assert decisions[copier]['source'] == source, decisions
  assert decisions[copier]['checkpoint'] == f'/ckpt/{source}/2', decisions


def test_a_mode_or_score_window_out_of_range_is_refused():
  bounds = population_runner.parse_bounds(BOUNDS)
  with pytest.raises(ValueError, match=r"mode must be one of \['sync', 'async'\]"):
    population_runner.Population('/tmp/unused', [], [], bounds, mode='barrier')
  with pytest.raises(ValueError, match='score_window must be >= 1 report'):
    population_runner.Population('/tmp/unused', [], [], bounds, score_window=0)


def test_the_runner_and_its_member_program_import_into_one_process():
  """Both take --ready_interval (a notebook or a test may import both)."""
  from learners import pbt_member  # pylint: disable=g-import-not-at-top
  assert pbt_member.FLAGS['ready_interval'].default == 50_000


def test_a_population_of_launched_jobs_reports_from_its_trainers_and_copies(tmp_path):
  """--member_program=launch: each member is a job of programs (server, trainer, one
  collector, evaluator); its trainer reports the evaluator's returns at the ready points
  and takes the copies, which reach its next report; the launchers end cleanly."""
  root = str(tmp_path / 'run')
  # A longer budget than the one-process test's: the trainer trains on while it waits
  # for an evaluation past its ready point, and then for the other member's report, so
  # its first report can come late (9,472 env steps of a 40-train-step job's 10,496, on a
  # fast machine, which then ended before its second): room for the second round.
  bindings = BINDINGS + ['Experiment.num_train_steps = 72']
  runner = population_runner.Population(root, ['ppo_cartpole.gin'], bindings, population_runner.parse_bounds(BOUNDS),
                          population_size=2, ready_interval=2048, seed=1,
                          member_program='launch', member_collectors=1)
  best = runner.run()

  events = population.read(runner.lineage.path)
  ends = [e for e in events if e['event'] == 'end']
  assert sorted((e['member'], e['returncode']) for e in ends) == [(0, 0), (1, 0)], (
      events, _tails(root))
  readies = [e for e in events if e['event'] == 'ready']
  assert {e['round'] for e in readies} >= {1, 2}, readies
  for event in readies:  # the server's env steps, at or past the ready point
    assert event['env_steps'] >= 2048 * event['round'], event
  copies = [e for e in events if e['event'] == 'exploit']
  assert copies, (events, _tails(root))
  for copy in copies:
    member = copy['member']
    with open(os.path.join(root, f'member_{member}', 'logs', 'train.log')) as f:
      log = f.read()
    assert f"Population member {member} took member {copy['source']}'s weights" in log
    later = [e for e in readies if e['member'] == member and e['round'] == copy['round'] + 1]
    for event in later:  # the copied settings, perturbed, are what it trained with next
      for name, value in copy['hyperparameters'].items():
        assert event['hyperparameters'][name] == pytest.approx(value, rel=1e-6)
  # The evaluator's returns are what the members reported.
  for event in readies:
    with open(os.path.join(root, f'member_{event["member"]}', 'eval', 'results.json')) as f:
      returns = [row['return'] for row in json.load(f)]
    assert event['score'] in returns, event
  assert best['scores'][str(best['best_member'])] == max(best['scores'].values())
  config.parse(['ppo_cartpole.gin'], bindings)
  assert evaluate_export(best['greedy_policy_dir'], seed=0) > 0


def _tails(root: str) -> str:
  """The ends of the members' launcher logs, for a failure's message."""
  text = []
  for member in (0, 1):
    with open(os.path.join(root, 'pbt', f'member_{member}.log')) as f:
      text.append(f'member_{member}.log:\n' + ''.join(f.readlines()[-15:]))
  return '\n'.join(text)


def test_a_launched_member_counts_env_steps_from_its_server_and_reports_a_later_eval(
    tmp_path, monkeypatch):
  """A resumed launched member counts on from its last report (the job's new server
  counts from 0), and reports the evaluator's first result finished after its env steps
  passed the ready point, not an older one."""
  pbt_dir, root = str(tmp_path / 'pbt'), str(tmp_path / 'member_0')
  directory = population.member_dir(pbt_dir, 0)
  population.write_json(os.path.join(directory, 'report_2.json'), {
      'round': 2, 'env_steps': 100_000, 'train_step': 90, 'score': 1.0,
      'checkpoint': 'unused', 'hyperparameters': {'learning_rate': 1e-3}})
  population.write_json(os.path.join(directory, 'applied.json'), {'round': 2})
  inserted = [1000]  # the job's server: items taken in since it started
  monkeypatch.setattr(trainer_member.replay, 'inserted_items',
                      lambda address, table: inserted[0])
  monkeypatch.setattr(trainer_member, '_LOOK_INTERVAL_S', 0.0)
  saved = []
  learner = types.SimpleNamespace(train_step_numpy=95, train_step=tf.Variable(95),
                                  save_checkpoint=lambda: saved.append(1) or 'ckpt-95')
  agent = types.SimpleNamespace(_optimizer=types.SimpleNamespace(
      learning_rate=tf.Variable(1e-3)))
  layout = types.SimpleNamespace(experience_table='queue', env_steps_per_item=64)
  member = trainer_member.TrainerMember(
      ready_points.ReadyPoints(pbt_dir, 0, ready_interval=50_000), root, '127.0.0.1:1',
      layout, heartbeat.Heartbeat(root, 'train'))
  member.start(agent, learner, threading.Event())
  assert member.env_steps() == 100_000
  inserted[0] = 1000 + 700  # 44,800 env steps on: short of 150,000
  assert member.env_steps() == 144_800 and not member.maybe_report(96)
  inserted[0] = 1000 + 800  # past it; the evaluator's last result is older
  results = os.path.join(root, 'eval', 'results.json')
  population.write_json(results, [{'train_step': 94, 'return': -50.0,
                                   'time': time.time() - 5}])
  assert not member.maybe_report(97)
  population.write_json(results, [{'train_step': 94, 'return': -50.0, 'time': 0.0},
                                  {'train_step': 97, 'return': 120.0,
                                   'time': time.time() + 1}])
  population.write_json(os.path.join(directory, 'decision_3.json'), {'action': 'continue'})
  assert member.maybe_report(98)
  report = population.read_json(os.path.join(directory, 'report_3.json'))
  assert (report['env_steps'], report['train_step'], report['score']) == (151_200, 98, 120.0)
  assert report['checkpoint'] == 'ckpt-95' and saved == [1]
  assert member.points.next_round == 4


def test_a_finished_population_is_not_trained_again_and_overwrite_starts_afresh(tmp_path):
  reaches = ('reaches the target at once', 'time.sleep(1); finish(True)')
  first = fake_population(tmp_path, *reaches)
  best = first.run()
  assert best['best_member'] == 0 and 'already_finished' not in best
  best_path = os.path.join(first.pbt_dir, 'best.json')
  events = population.read(first.lineage.path)

  # Run again as it was: nothing starts, and best.json is the first run's.
  again = fake_population(tmp_path, *reaches).run()
  assert again['already_finished'] and again['best_member'] == 0, again
  assert population.read(first.lineage.path) == events  # no member started or ended
  assert population.read_json(best_path) == best

  # --overwrite: the records and the members' jobs go, and the population runs again.
  stale = tmp_path / 'run' / 'member_1' / 'train' / 'stale'
  stale.parent.mkdir(parents=True)
  stale.write_text('a checkpoint of the run before')
  fresh = fake_population(tmp_path, *reaches, overwrite=True)
  best = fresh.run()
  assert not stale.exists() and 'already_finished' not in best
  kinds = [(e['event'], e['member']) for e in population.read(fresh.lineage.path)]
  assert kinds[:2] == [('start', 0), ('start', 1)] and kinds.count(('start', 0)) == 1, kinds
  assert population.read_json(best_path) == best and best['best_member'] == 0


def test_a_run_that_scores_no_member_keeps_the_earlier_best(tmp_path):
  """A stopped re-run whose members end before an evaluation must not replace the
  population's result with an empty one."""
  runner = population_runner.Population(str(tmp_path / 'run'), [], [], population_runner.parse_bounds(BOUNDS),
                          population_size=2)
  earlier = {'best_member': 1, 'scores': {'0': 3.0, '1': 5.0},
             'greedy_policy_dir': '/policies/member_1', 'lineage': runner.lineage.path}
  population.write_json(os.path.join(runner.pbt_dir, 'best.json'), earlier)
  assert runner._best() == earlier
  assert population.read_json(os.path.join(runner.pbt_dir, 'best.json')) == earlier


def test_a_member_with_a_bad_configuration_ends_the_population_with_its_error(tmp_path):
  runner = fake_population(
      tmp_path, 'fails on its configuration',
      "print('error: SacAgent has no hyperparameter entropy_cost', flush=True); "
      'sys.exit(2)')
  start = time.monotonic()
  with pytest.raises(population_runner.MemberFailed, match=r'population member 0 bad input \(see its '
                     r'log\) \(exit status 2\) after 0 restarts: SacAgent has no '
                     r'hyperparameter entropy_cost; see .*member_0.log') as caught:
    runner.run()
  assert caught.value.status == 2
  assert time.monotonic() - start < 30  # no restarts, the other member stopped at once
  kinds = [(e['event'], e['member']) for e in population.read(runner.lineage.path)]
  assert ('restart', 0) not in kinds and ('replace', 0) not in kinds
  assert runner.members[1].process.poll() is not None


def test_real_members_whose_agent_lacks_a_bound_end_the_population_without_restarts(
    tmp_path):
  """Past the program's check (a runner made in Python skips it): each SAC member
  refuses the bound as it builds its agent, exits 2, and the population ends at once."""
  runner = population_runner.Population(str(tmp_path / 'run'), ['sac_pendulum.gin'], SAC_BINDINGS,
                          population_runner.parse_bounds('learning_rate=1e-4:1e-2'), population_size=2)
  start = time.monotonic()
  with pytest.raises(population_runner.MemberFailed, match=r'\(exit status 2\) after 0 restarts: '
                     'SacAgent has no hyperparameter learning_rate a population can '
                     'change; it has: actor_learning_rate') as caught:
    runner.run()
  assert caught.value.status == 2
  assert time.monotonic() - start < 60
  kinds = [e['event'] for e in population.read(runner.lineage.path)]
  assert 'restart' not in kinds and 'replace' not in kinds, kinds


def test_a_launched_member_whose_agent_lacks_a_bound_ends_the_population_too(tmp_path):
  """The trainer exits 2, and so does its launcher: no restart either."""
  runner = population_runner.Population(str(tmp_path / 'run'), ['sac_pendulum.gin'], SAC_BINDINGS,
                          population_runner.parse_bounds('learning_rate=1e-4:1e-2'), population_size=2,
                          member_program='launch')
  with pytest.raises(population_runner.MemberFailed, match=r'\(exit status 2\) after 0 restarts: '
                     r'.*SacAgent has no hyperparameter learning_rate') as caught:
    runner.run()
  assert caught.value.status == 2
  kinds = [e['event'] for e in population.read(runner.lineage.path)]
  assert 'restart' not in kinds and 'replace' not in kinds, kinds


def test_a_member_whose_agent_lacks_a_bounded_hyperparameter_fails_as_configuration(
    tmp_path):
  """Before any training: the start's names are the population's bounds."""
  pbt_dir = str(tmp_path / 'pbt')
  population.write_json(os.path.join(population.member_dir(pbt_dir, 0), 'start.json'),
                        {'hyperparameters': {'learning_rate': 1e-3, 'entropy_cost': 0.01}})
  agent = types.SimpleNamespace(_optimizer=types.SimpleNamespace(
      learning_rate=tf.Variable(1e-3)))
  learner = types.SimpleNamespace(train_step_numpy=0, train_step=tf.Variable(0))
  points = ready_points.ReadyPoints(pbt_dir, 0, ready_interval=100)
  with pytest.raises(hyperparameters_lib.NotTunable, match='has no hyperparameter '
                     'entropy_cost a population can change; it has: learning_rate'):
    points.start(agent, learner, 0, threading.Event())


def test_bounds_the_agent_cannot_take_are_refused_at_configuration():
  sac = config.parse(['sac_pendulum.gin'])
  population_runner.check_bounds(sac, population_runner.parse_bounds(
      'actor_learning_rate=1e-4:1e-2,critic_learning_rate=1e-4:1e-2,gamma=0.9:0.999'))
  with pytest.raises(config.ConfigError, match='--bounds names entropy_cost, '
                     'learning_rate, which create_sac_agent has no hyperparameter for; it '
                     'has: actor_learning_rate, critic_learning_rate, alpha_learning_rate, '
                     'gamma'):
    population_runner.check_bounds(sac, population_runner.parse_bounds('learning_rate=1e-4:1e-2,entropy_cost=0:1:linear'))
  dqn = config.parse(['dqn_cartpole.gin'])  # 5-step transitions
  with pytest.raises(config.ConfigError, match='TransitionReplay.n_step = 5 folds'):
    population_runner.check_bounds(dqn, population_runner.parse_bounds('gamma=0.9:0.999'))


def test_the_program_refuses_bounds_the_agent_cannot_take_before_any_member_starts(
    tmp_path):
  root = tmp_path / 'run'
  result = python_runs.run(
      ['-m', 'learners.pbt', f'--root_dir={root}', '--gin_file=sac_pendulum.gin',
       '--population_size=2', '--bounds=learning_rate=1e-4:1e-2'], timeout=240)
  assert result.returncode == 2, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith('error:')]
  assert errors == ['error: --bounds names learning_rate, which create_sac_agent has no '
                    'hyperparameter for; it has: actor_learning_rate, '
                    'critic_learning_rate, alpha_learning_rate, gamma'], result.stderr
  assert 'Traceback' not in result.stderr
  assert not (root / 'pbt' / 'member_0.log').exists()  # no member started


SAC_BINDINGS = ['Experiment.num_train_steps = 128', 'Experiment.eval_interval = 64',
                'Experiment.num_eval_episodes = 1', 'Experiment.target_return = None',
                'Experiment.checkpoint_interval = 64',
                'Experiment.policy_checkpoint_interval = 128',
                'create_sac_agent.actor_fc_layer_params = (32,)',
                'create_sac_agent.critic_joint_fc_layer_params = (32,)']
SAC_BOUNDS = ('actor_learning_rate=1e-4:1e-2,critic_learning_rate=1e-4:1e-2,'
              'alpha_learning_rate=1e-4:1e-2')


def _assert_a_sac_round(pbt_dir: str) -> None:
  """Two SAC Pendulum members (SAC_BINDINGS, SAC_BOUNDS), one ready point (256 env steps:
  the first evaluation after the 256 random steps), then their ends: each reported the
  SAC learning rates it started with, and the lower scorer took the other's SAC
  checkpoint (weights, the three optimizers)."""
  events = population.read(os.path.join(pbt_dir, 'lineage.jsonl'))
  ends = sorted((e['member'], e['returncode']) for e in events if e['event'] == 'end')
  assert ends == [(0, 0), (1, 0)], events
  starts = {e['member']: e['hyperparameters'] for e in events if e['event'] == 'start'}
  readies = {e['member']: e for e in events if e['event'] == 'ready' and e['round'] == 1}
  assert sorted(readies) == [0, 1], events
  for member, ready in readies.items():  # what the agent's variables held when it reported
    held = {name: ready['hyperparameters'][name] for name in starts[member]}
    assert sorted(held) == ['actor_learning_rate', 'alpha_learning_rate',
                            'critic_learning_rate'], held
    assert held == pytest.approx(starts[member], rel=1e-6)
    assert ready['hyperparameters']['gamma'] == pytest.approx(0.99)  # the config's
  copies = [e for e in events if e['event'] == 'exploit']
  scores = {member: ready['score'] for member, ready in readies.items()}
  if scores[0] != scores[1]:
    assert [c['member'] for c in copies] == [min(scores, key=scores.get)], events
  for copy in copies:
    with open(os.path.join(pbt_dir, f'member_{copy["member"]}.log')) as f:
      assert f"took member {copy['source']}'s weights" in f.read()


def test_the_program_says_an_ended_population_ended_and_overwrite_trains_it_afresh(
    tmp_path):
  root = tmp_path / 'run'
  command = ['-m', 'learners.pbt', f'--root_dir={root}', '--gin_file=sac_pendulum.gin',
             '--population_size=2', '--ready_interval=256', '--seed=0',
             f'--bounds={SAC_BOUNDS}'] + [f'--gin_bindings={b}' for b in SAC_BINDINGS]
  # An ended population of this config, as its runner leaves it.
  ended = {'best_member': 1, 'scores': {'0': -900.0, '1': -300.0},
           'greedy_policy_dir': str(root / 'member_1' / 'policies' / 'greedy_policy'),
           'lineage': str(root / 'pbt' / 'lineage.jsonl')}
  population.write_json(str(root / 'pbt' / 'best.json'), ended)
  population.write_json(str(root / 'pbt' / population_runner.FINISHED_FILE), {
      'config': {'gin_files': ['sac_pendulum.gin'], 'gin_bindings': SAC_BINDINGS},
      'best': ended})
  stale = root / 'member_0' / 'train' / 'stale'
  stale.parent.mkdir(parents=True)
  stale.write_text('a checkpoint of the run before')

  again = python_runs.run(command, timeout=240)
  assert again.returncode == 0, again.stderr[-3000:]
  assert 'Already finished.' in again.stdout and 'Best member: 1' in again.stdout
  assert population.read_json(str(root / 'pbt' / 'best.json')) == ended
  assert stale.exists() and not (root / 'pbt' / 'member_0.log').exists()

  # --overwrite: the population of SAC members runs afresh, its round on SAC's rates.
  fresh = python_runs.run(command + ['--overwrite'], timeout=240)
  assert fresh.returncode == 0, fresh.stderr[-3000:]
  assert 'Already finished' not in fresh.stdout and not stale.exists()
  best = population.read_json(str(root / 'pbt' / 'best.json'))
  assert best['scores'] != ended['scores'] and best['best_member'] in (0, 1), best
  _assert_a_sac_round(str(root / 'pbt'))

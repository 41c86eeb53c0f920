"""learners/train_eval: the one-process job, its config errors, resume, and the demo."""
import collections
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf

from learners import train_eval
from learners.configuration import config
from learners.job import callbacks
from learners.job import one_process_job
from tfrl import export

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = dict(num_envs=4, batch_size=8, initial_collect_steps=64, collect_steps_per_iteration=1,
            train_steps_per_iteration=5, eval_interval=25, num_eval_episodes=2,
            checkpoint_interval=25, policy_checkpoint_interval=25, target_return=None)


def _run_cli(*args, timeout=600):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  return python_runs.run(['-m', 'learners.train_eval', *args], timeout=timeout, env=env)


def _check_the_result_acts_as_its_exports(result, root):
  """The returned result predicts as the exported greedy policy does, on a list or an
  array, one observation or a batch; deterministic=False samples as the collect policy
  (DQN's epsilon is still near 1 after 50 train steps: both actions appear)."""
  assert result.policy_dir == result['greedy_policy_dir']
  observation = [0.01, -0.02, 0.03, 0.0]
  action, state = result.predict(observation)
  assert state is None and np.shape(action) == () and int(action) in (0, 1)
  greedy = export.load_policy(root)  # a job's root_dir: its greedy export
  assert greedy.path == result.policy_dir
  batch = np.tile(np.asarray(observation, np.float32), [200, 1])
  greedy_actions, _ = greedy.predict(batch)
  assert greedy_actions.tolist() == [int(action)] * 200
  sampled, _ = result.predict(batch, deterministic=False)
  assert set(sampled.tolist()) == {0, 1}
  collect = export.load_policy(os.path.join(root, 'policies', 'collect_policy'))
  assert collect.predict(batch)[0].tolist() == greedy_actions.tolist()
  with pytest.raises(ValueError, match='structure of the policy'):
    result.predict({'observation': observation})


@pytest.mark.integration
def test_tiny_run_exports_predicts_and_resumes(tmp_path):
  root = str(tmp_path / 'run')
  first = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=50, **TINY)
  assert first['train_step'] == 50
  assert os.path.isfile(os.path.join(first['greedy_policy_dir'], 'saved_model.pb'))
  assert [h['train_step'] for h in first['history']] == [25, 50]
  _check_the_result_acts_as_its_exports(first, root)

  second = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=100, **TINY)
  assert second['train_step'] == 100
  # Resumed at 50: the first evaluation of the second run comes after step 50.
  assert second['history'][0]['train_step'] == 75
  # And the env steps count on from the first run's (checkpointed with the agent).
  assert first['env_steps'] < second['history'][0]['env_steps'] < second['env_steps']
  assert second['progress'][0]['env_steps'] > first['env_steps']


@pytest.mark.integration
def test_evaluations_on_an_env_step_grid_come_at_the_first_step_past_each_multiple(
    tmp_path):
  """eval_every_env_steps, as SB3 places its evaluations: 4 envs' iterations of 4 env
  steps after a 64-step warm-up reach 100 env steps exactly, then 200 never (184 at the
  step budget, which ends with an evaluation as always)."""
  result = train_eval.run(str(tmp_path / 'grid'), ['dqn_cartpole.gin'], num_train_steps=150,
                          **dict(TINY, eval_interval=1, eval_every_env_steps=100))
  assert [(r['train_step'], r['env_steps']) for r in result['history']] == [
      (45, 100), (150, 184)]


@pytest.mark.integration
def test_progress_lines_between_evaluations_and_a_wall_clock_budget(tmp_path, capsys):
  root = str(tmp_path / 'budget')
  rows = []
  result = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=1_000_000,
                          log_interval=5, max_train_seconds=3.0, on_progress=rows.append,
                          **TINY)
  printed = capsys.readouterr().err.splitlines()
  # Stopped by the budget, long before the step budget, with a last evaluation at the
  # step it stopped at and an export of that step.
  assert 0 < result['train_step'] < 1_000_000
  assert result['history'][-1]['train_step'] == result['train_step']
  assert 3.0 <= result['history'][-1]['seconds'] < 30
  assert export.exported_train_step(result['greedy_policy_dir']) == result['train_step']
  lines = [l.split('] ', 1)[1] for l in printed if '] train step' in l]
  evaluated = [l for l in lines if 'eval return' in l]
  between = [l for l in lines if 'eval return' not in l]
  assert len(evaluated) == len(result['history'])
  assert len(between) > len(evaluated)  # every 5 steps against every 25
  # A figure that does not apply yet (no finished episode) is left out, never 'nan'.
  assert not [l for l in lines if 'nan' in l], lines[:3]
  assert all(re.search(r'\| train return\s+-?[\d.]+ \|', l) for l in lines
             if math.isfinite(rows[lines.index(l)]['train_return'])), lines[:3]
  assert any('budget of 3 s of training is spent' in l for l in printed)
  # The callback got each line's row, and the result keeps them.
  assert rows == result['progress'] and len(rows) == len(lines)
  assert [r['train_step'] for r in rows if r['eval_return'] is not None] == [
      h['train_step'] for h in result['history']]
  assert rows[-1]['train_step'] == result['train_step'] and rows[-1]['env_steps_per_s'] > 0


def test_intervals_must_be_positive():
  with pytest.raises(config.ConfigError, match='Experiment.log_interval = 0: must be an integer >= 1, or None'):
    train_eval.run('unused', ['dqn_cartpole.gin'], log_interval=0)


def _summary_values(directory):
  """{tag: [(step, value)]} from the TF2 event files in a directory."""
  values = collections.defaultdict(list)
  for path in glob.glob(os.path.join(directory, 'events*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        values[value.tag].append((event.step, float(tf.make_ndarray(value.tensor))))
  return values


@pytest.mark.integration
def test_on_policy_trains_on_the_unrolls_the_current_policy_collected(tmp_path):
  # APPO reports each batch's policy lag (train step - acting policy's version) per
  # step. In one process every train call must get the unroll collected since the last
  # update: lag 0, bar each unroll's first step, shared with the unroll before (lag 1).
  # A backlog in the queue (items counted before they landed, or taken out early by the
  # dataset's prefetch) shows up as a lag >= 1 everywhere.
  root = str(tmp_path / 'appo')
  result = train_eval.run(
      root, ['appo_cartpole.gin'], num_envs=4, batch_size=4,
      layout_settings=dict(unroll_length=8),
      collect_steps_per_iteration=8, train_steps_per_iteration=1, num_train_steps=30,
      summary_interval=1, eval_interval=30, num_eval_episodes=1, target_return=None,
      checkpoint_interval=30, policy_checkpoint_interval=30)
  assert result['train_step'] == 30
  values = _summary_values(os.path.join(root, 'train'))
  lag_min = [v for _, v in values['policy_lag/version_diff_min']]
  lag_max = [v for _, v in values['policy_lag/version_diff_max']]
  assert len(lag_min) == 30, sorted(values)
  assert set(lag_min) == {0.0}, lag_min
  assert set(lag_max) <= {0.0, 1.0}, lag_max


def _weights(result):
  return [v.numpy() for v in export.load_policy(result.policy_dir).model_variables]


@pytest.mark.integration
@pytest.mark.parametrize('gin_file, seeds', [('ppo_cartpole.gin', (1, 1, 2)),
                                              ('impala_cartpole.gin', (1, 1))])
def test_deterministic_runs_of_one_seed_repeat_their_weights_and_evaluations(
    tmp_path, gin_file, seeds):
  """The queue layouts hand unrolls over in order: with the seed reaching the networks'
  first weights and the policies' sampling, two runs in one process are the same run;
  another seed is another run."""
  settings = dict(num_train_steps=3, eval_interval=3, num_eval_episodes=2,
                  target_return=None, deterministic=True)
  first, again, *other = [
      train_eval.run(str(tmp_path / f'run{i}'), [gin_file], seed=seed, **settings)
      for i, seed in enumerate(seeds)]
  assert again['eval_return'] == first['eval_return']
  assert again['env_steps'] == first['env_steps']
  assert all(np.array_equal(a, b) for a, b in zip(_weights(first), _weights(again)))
  for run in other:
    assert not all(np.array_equal(a, b) for a, b in zip(_weights(first), _weights(run)))


def test_missing_gin_file_names_it():
  with pytest.raises(config.ConfigError, match='no_such.gin.*not found'):
    config.parse(['no_such.gin'])


def test_a_root_dir_that_is_a_file_is_one_config_error(tmp_path):
  path = tmp_path / 'notes.txt'
  path.write_text('not a job directory')
  with pytest.raises(config.ConfigError, match=r'root_dir = .*notes.txt: is a file; it '
                     'must be a directory'):
    train_eval.run(str(path), ['dqn_cartpole.gin'], **TINY)


def test_unknown_binding_names_it():
  with pytest.raises(config.ConfigError, match='no_such_param'):
    config.parse(['dqn_cartpole.gin'], ['Experiment.no_such_param = 3'])


# The CLI tests check what the command prints, not what it learns: one evaluation
# episode and one epoch per batch (ppo_cartpole.gin's 10 and 20 x 4 minibatches) are
# enough to print every line they look for.
TINY_CLI = ['--gin_file=ppo_cartpole.gin', '--gin_bindings=Experiment.num_train_steps = 8',
            '--gin_bindings=Experiment.eval_interval = 4',
            '--gin_bindings=Experiment.target_return = None',
            '--gin_bindings=Experiment.num_eval_episodes = 1',
            '--gin_bindings=create_ppo_agent.num_epochs = 1']
# What the default output must not show: TensorFlow's CUDA-factory "errors"
# and CPU notices, gym's notice, gin's search misses, TensorFlow's SavedModel INFO
# pages, Reverb's C++ life-cycle lines.
NOISE = ('Unable to register', 'cpu_feature_guard', 'unmaintained', 'Path not found',
         'signature_serialization', 'fingerprint', '[reverb/cc/')


@pytest.mark.integration
def test_cli_prints_its_progress_and_result_and_nothing_else(tmp_path):
  env_run = _run_cli(f'--root_dir={tmp_path}', *TINY_CLI)
  assert env_run.returncode == 0, env_run.stderr[-3000:]
  # The embedded server's exposure warning, once, then progress lines only.
  warning, *lines = env_run.stderr.splitlines()
  assert warning.startswith('WARNING: Reverb server on port '), warning
  # The job's phases log from learners/job/one_process_job.py, the CLI from train_eval.
  assert lines and all(re.match(r'I\d{4} [\d:.]+ (train_eval|one_process_job)\] ', l)
                       for l in lines), lines
  assert [l.split('] ')[1][:14] for l in lines] == (
      ['Training PpoAg'] + ['train step    '] * 2), lines
  assert 'start-up' in lines[0]
  assert env_run.stdout.splitlines()[0].startswith('Trained to step 8 ')
  assert 'Greedy policy exported to: ' in env_run.stdout
  assert not [l for l in lines if any(n in l for n in NOISE)]
  # Run again, the job has nothing more to do: it says so, trains nothing, exits 0.
  again = _run_cli(f'--root_dir={tmp_path}', *TINY_CLI)
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.startswith('Already finished at step 8 '), again.stdout
  assert 'already ended at train step 8 (all its train steps)' in again.stderr
  assert 'Training PpoAg' not in again.stderr


@pytest.mark.integration
def test_a_finished_job_run_again_trains_nothing_unless_asked_for_more(tmp_path, capsys):
  root = str(tmp_path / 'run')
  # Every CartPole episode returns at least 8: the first evaluation reaches 5.
  done = dict(TINY, num_train_steps=1000, target_return=5.0)
  first = train_eval.run(root, ['dqn_cartpole.gin'], **done)
  assert first['reached_target'] and first['train_step'] == 25, first['history']
  checkpoint_dir = os.path.join(root, 'train', 'checkpoints')
  saved = sorted(os.listdir(checkpoint_dir))
  capsys.readouterr()

  again = train_eval.run(root, ['dqn_cartpole.gin'], **done)
  assert again['already_finished'] and again['reached_target']
  assert (again['train_step'], again['env_steps']) == (first['train_step'],
                                                       first['env_steps'])
  assert again['greedy_policy_dir'] == first['greedy_policy_dir']
  assert 'already ended at train step 25 (target 5 reached); nothing to train' in (
      capsys.readouterr().err)
  assert sorted(os.listdir(checkpoint_dir)) == saved  # nothing built, nothing written

  # A higher target than the recorded return, or more steps with none, trains on.
  more = train_eval.run(root, ['dqn_cartpole.gin'], **dict(TINY, num_train_steps=50))
  assert not more.get('already_finished') and more['train_step'] == 50
  assert more['history'][0]['train_step'] == 50  # resumed from the end at 25


@pytest.mark.integration
def test_cli_verbosity_adds_the_library_detail(tmp_path):
  env_run = _run_cli(f'--root_dir={tmp_path}', *TINY_CLI, '--verbosity=0')
  assert env_run.returncode == 0, env_run.stderr[-3000:]
  assert re.search(r'Checkpoint \S+ckpt-8 written', env_run.stderr), env_run.stderr[-3000:]
  assert 'train step       8 |' in env_run.stderr
  # Library detail, never the start-up noise: that is filtered at any verbosity.
  assert 'Unable to register' not in env_run.stderr


@pytest.mark.integration
def test_cli_progress_bar_shows_the_eta_env_steps_per_second_and_eval_return(tmp_path):
  # A terminal gets the bar by default (--progress_bar=auto); a pipe, as here, only
  # when asked.
  env_run = _run_cli(f'--root_dir={tmp_path}', *TINY_CLI, '--progress_bar=on')
  assert env_run.returncode == 0, env_run.stderr[-3000:]
  bars = [b for b in re.split(r'[\r\n]', env_run.stderr) if b.startswith('PpoAgent on Cart')]
  assert bars, env_run.stderr[-3000:]
  assert re.search(r'\| 8/8 \[\d\d:\d\d<\d\d:\d\d, .*env steps [\d,]+ \([\d,]+/s\) \| '
                   r'eval return -?\d+\.\d', bars[-1]), bars[-1]
  # The progress lines still print, whole, above the bar.
  assert len(re.findall(r'^I\d{4} .* one_process_job\] train step', env_run.stderr,
                         re.M)) == 2


@pytest.mark.integration
def test_cli_missing_gin_file_fails_fast(tmp_path):
  result = _run_cli(f'--root_dir={tmp_path}', '--gin_file=no_such.gin', timeout=120)
  assert result.returncode != 0
  assert 'no_such.gin' in result.stderr and 'not found' in result.stderr


@pytest.fixture(scope='module')
def demo_run(tmp_path_factory):
  """Runs exactly what `make demo` runs, once for the module."""
  root = tmp_path_factory.mktemp('demo')
  result = _run_cli(f'--root_dir={root}', '--gin_file=learners/configs/dqn_cartpole.gin')
  return result


@pytest.mark.slow
def test_demo_reaches_475_and_prints_policy_path(demo_run):
  assert demo_run.returncode == 0, demo_run.stderr[-3000:]
  returns = [float(r) for r in re.findall(r'eval return\s+([\d.]+)', demo_run.stderr)]
  assert returns and returns[-1] >= 475.0, returns
  match = re.search(r'Greedy policy exported to: (\S+)', demo_run.stdout)
  assert match and os.path.isfile(os.path.join(match.group(1), 'saved_model.pb'))


@pytest.mark.slow
def test_exported_demo_policy_replays_its_confirmation_in_a_fresh_process(demo_run):
  """The export, in a process with only TensorFlow and gymnasium, plays the 100 episodes
  that confirmed the target, to the confirmation's mean return: it is the confirmed
  policy, served."""
  assert demo_run.returncode == 0, demo_run.stderr[-3000:]
  path = re.search(r'Greedy policy exported to: (\S+)', demo_run.stdout).group(1)
  confirmed = re.findall(r'Confirmation evaluation: ([\d.]+) over 100 episodes \(seeded '
                         r'from (\d+)\)', demo_run.stderr)
  assert confirmed and float(confirmed[-1][0]) >= 475.0, confirmed
  # A serving client: TensorFlow and gymnasium only, the episodes played as tfrl's
  # evaluator plays them (benchmarks/plain_play.py).
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'plain_play.py'),
       f'--policy_dir={path}', f'--seed={confirmed[-1][1]}', '--episodes=100'],
      env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  played = json.loads(re.search(r'^PLAYED (.*)$', result.stdout, re.M).group(1))
  assert not played['tfrl_imported'] and len(played['returns']) == 100, result.stdout
  mean = played['mean']
  assert mean == pytest.approx(float(confirmed[-1][0]), abs=0.1), result.stdout


@pytest.mark.integration
@pytest.mark.parametrize('gin_file,overrides', [
    # sac_pendulum.gin's 4 items of 64 rows with no random steps asked for: the first
    # train call used to wait for ever on MinSize(4) with 1 item in the table.
    ('sac_pendulum.gin', dict(initial_collect_steps=0)),
    # n-step transitions written n - 1 steps late, 3 steps per item, one env per item.
    ('dqn_cartpole.gin', dict(TINY, initial_collect_steps=0, num_envs=4, batch_size=24,
                              layout_settings=dict(n_step=5, steps_per_item=3))),
])
def test_warm_up_fills_the_first_batch_whatever_the_item_layout(tmp_path, gin_file,
                                                               overrides):
  short = dict(num_train_steps=10, eval_interval=10, checkpoint_interval=10,
               policy_checkpoint_interval=10, num_eval_episodes=1, target_return=None)
  result = train_eval.run(str(tmp_path / 'run'), [gin_file], **dict(overrides, **short))
  assert result['train_step'] >= 10  # (and it did not wait for ever)


@pytest.mark.integration
def test_a_run_resumed_after_a_kill_never_exports_older_policies(tmp_path):
  root = str(tmp_path / 'run')
  first = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=50, **TINY)
  path = first['greedy_policy_dir']
  assert export.exported_train_step(path) == 50
  # A restart is killed (-9) right after its restore: the export still holds step 50.
  process = subprocess.Popen(
      [sys.executable, '-m', 'learners.train_eval', f'--root_dir={root}',
       '--gin_file=dqn_cartpole.gin', '--gin_bindings=Experiment.num_train_steps=100000'],
      cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO),
      stderr=subprocess.PIPE, text=True)
  try:
    for line in process.stderr:
      if 'Training DdqnAgent' in line:
        break
    process.kill()
  finally:
    process.kill()
    process.communicate(timeout=60)
  assert 'from train step 50' in line
  policy = export.load_policy(path)
  assert policy.get_train_step() == 50 == export.exported_train_step(path)


@pytest.mark.integration
def test_a_stop_during_an_evaluation_ends_it_and_the_job_saves(tmp_path, capsys):
  """An evaluation of a hundred thousand episodes, told to stop as it begins: the job
  gives it up (unrecorded) and ends as at its budget, with its final saves."""
  import task_envs  # pylint: disable=g-import-not-at-top (tests/learners/task_envs.py)
  task_envs.EVALUATION_STARTED.clear()
  settings = {**TINY, 'eval_interval': 25, 'num_eval_episodes': 100_000}
  result = train_eval.run(str(tmp_path / 'run'), ['dqn_cartpole.gin'],
                          stop_event=task_envs.EVALUATION_STARTED, num_train_steps=1_000,
                          env_name='task_envs:cartpole_flagging_evaluations', **settings)
  assert 'Stopped during an evaluation at train step 25 (not recorded).' in (
      capsys.readouterr().err)
  assert result['history'] == [] and result['train_step'] == 25
  assert export.exported_train_step(result['greedy_policy_dir']) == 25


class _SlowEvaluation(callbacks.Callback):
  """Makes each evaluation outlast the sample timeout, as 20 long LunarLander episodes
  on a loaded machine did (the train step's fetch-ahead sample waits through it)."""

  def on_evaluation(self, row):
    time.sleep(2.5)


@pytest.mark.integration
def test_a_sample_timing_out_during_a_long_evaluation_does_not_end_the_job(
    tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(one_process_job, 'SAMPLE_TIMEOUT_MS', 1000)
  result = train_eval.run(
      str(tmp_path / 'run'), ['ppo_cartpole.gin'], num_envs=4, batch_size=4,
      layout_settings=dict(unroll_length=8), collect_steps_per_iteration=8,
      train_steps_per_iteration=1, num_train_steps=12, eval_interval=4,
      num_eval_episodes=1, target_return=None, checkpoint_interval=12,
      policy_checkpoint_interval=12, callbacks=[_SlowEvaluation()])
  assert result['train_step'] == 12
  # It happened at each of the two evaluations mid-run, and the job went on with a new
  # stream each time. A loaded machine can add more (a save or a collect of over 1 s
  # takes the same path), so the two evaluations set the least, not the count.
  err = capsys.readouterr().err
  lines = err.splitlines()
  evaluations = [i for i, line in enumerate(lines) if '| eval return' in line]
  timeouts = [i for i, line in enumerate(lines) if 'The sample stream timed out' in line]
  assert len(timeouts) >= 2, err[-3000:]
  # Each mid-run evaluation (train steps 4 and 8) is followed by a timeout before the
  # next evaluation: the timed-out stream was the one waiting through it.
  for before, after in zip(evaluations[:2], evaluations[1:3]):
    assert any(before < i < after for i in timeouts), err[-3000:]


def _slow_collects(monkeypatch, after_items):
  """Makes the collect iterations that end with `after_items(items written)` true
  outlast the 1-s sample timeout (a simulator that stalls, a loaded machine)."""
  collect = one_process_job.OneProcessJob.collect

  def slow_collect(job):
    collect(job)
    if after_items(job.writer.items_created):
      time.sleep(1.6)

  monkeypatch.setattr(one_process_job, 'SAMPLE_TIMEOUT_MS', 1000)
  monkeypatch.setattr(one_process_job.OneProcessJob, 'collect', slow_collect)


# A batch of two unrolls (4 envs each), one collected per iteration: between a batch's
# two unrolls the stream holds the first, waiting for the second.
_TWO_ITERATIONS_PER_BATCH = dict(
    num_envs=4, batch_size=8, layout_settings=dict(unroll_length=8),
    collect_steps_per_iteration=8, train_steps_per_iteration=1, eval_interval=100,
    num_eval_episodes=1, target_return=None)


@pytest.mark.integration
def test_unrolls_a_timed_out_stream_took_from_the_queue_are_counted_lost_and_training_goes_on(
    tmp_path, monkeypatch, capsys):
  # Once, the collect after a batch's first unroll stalls: the stream that had taken
  # that unroll times out (Reverb's queue handed it out, and it ends with the stream).
  _slow_collects(monkeypatch, lambda items: items == 3)
  result = train_eval.run(str(tmp_path / 'run'), ['ppo_cartpole.gin'], num_train_steps=6,
                          **_TWO_ITERATIONS_PER_BATCH)
  assert result['train_step'] == 6
  err = capsys.readouterr().err
  assert err.count('The ended sample stream had taken 1 of the collected unrolls') == 1
  assert 'Training on the 1 still queued: 0 train step(s) now.' in err


@pytest.mark.integration
def test_a_job_whose_every_collect_outlasts_the_sample_timeout_still_trains(
    tmp_path, monkeypatch, capsys):
  # Every batch's first unroll waits in a stream through a stalled collect; a stream
  # reopened after a loss has no train call waiting on it, so it ends nothing and the
  # next batch gets through: at worst every other batch is lost, never all of them.
  _slow_collects(monkeypatch, lambda items: items >= 3)
  result = train_eval.run(str(tmp_path / 'run'), ['ppo_cartpole.gin'], num_train_steps=4,
                          **_TWO_ITERATIONS_PER_BATCH)
  assert result['train_step'] == 4
  losses = capsys.readouterr().err.count('The ended sample stream had taken 1 of')
  assert 1 <= losses <= 3

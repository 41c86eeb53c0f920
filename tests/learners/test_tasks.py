"""Task sequences (`learners/configuration/tasks.py`, `Experiment.tasks`): the schedule,
what is refused, evaluation on every task, a resume that goes on with the task it was
on, and the forgetting figures against a hand-computed history."""
import json
import math
import os

import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf

from learners import train_eval
from learners.configuration import tasks
from learners.configuration import validation
from learners.configuration.experiment import Experiment
from test_tensorboard import _tags as event_tags  # tests/learners/test_tensorboard.py

SECOND = 'task_envs:long_pole_cartpole'  # tests/learners/task_envs.py
TINY = dict(num_envs=4, batch_size=8, initial_collect_steps=64, collect_steps_per_iteration=1,
            train_steps_per_iteration=5, eval_interval=25, num_eval_episodes=2,
            checkpoint_interval=25, policy_checkpoint_interval=25, target_return=None)


def test_the_schedule_switches_at_the_configured_env_steps_and_cycles():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=100, cycles=2)
  assert [sequence.index_at(s) for s in (0, 99, 100, 199, 200, 299, 300, 599)] == [
      0, 0, 1, 1, 2, 2, 0, 2]
  assert sequence.index_at(10_000) == 2  # past the end, the last task goes on
  assert sequence.switches() == [(0, 0), (100, 1), (200, 2), (300, 0), (400, 1), (500, 2)]


def test_a_sequence_may_give_each_task_its_own_env_steps():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=(100, 50, 300),
                                cycles=2)
  assert sequence.switches() == [(0, 0), (100, 1), (150, 2), (450, 0), (550, 1), (600, 2)]
  assert [sequence.index_at(s) for s in (99, 100, 149, 150, 449, 450, 600, 10**6)] == [
      0, 1, 1, 2, 2, 0, 2, 2]
  exp = Experiment(tasks=('CartPole-v1', SECOND), task_env_steps=(100, 300))
  assert exp.task_sequence.switches() == [(0, 0), (100, 1)]
  with pytest.raises(ValueError, match=r'gives 3 counts for 2 tasks'):
    Experiment(tasks=('CartPole-v1', SECOND), task_env_steps=(100, 300, 5))
  with pytest.raises(validation.ValidationError, match='or a tuple of integers >= 1'):
    Experiment(tasks=('CartPole-v1', SECOND), task_env_steps=(100, 0))


def test_forgetting_figures_match_a_hand_computed_history():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=100)
  history = [
      {'env_steps': 50, 'task_returns': {'a': 10.0, 'b': 0.0, 'c': 0.0}},
      {'env_steps': 150, 'task_returns': {'a': 40.0, 'b': 20.0, 'c': 0.0}},
      {'env_steps': 250, 'task_returns': {'a': 30.0, 'b': 50.0, 'c': 10.0}},
      {'env_steps': 300, 'task_returns': {'a': 20.0, 'b': 30.0, 'c': 60.0}},
  ]
  report = tasks.forgetting_report(history, sequence)
  a, b, c = (report['tasks'][n] for n in 'abc')
  assert (a['best_return'], a['final_return'], a['forgetting']) == (40.0, 20.0, 20.0)
  assert (b['best_return'], b['final_return'], b['forgetting']) == (50.0, 30.0, 20.0)
  assert c['forgetting'] == 0.0
  # Task a's curve: trapezoids over [50, 150], [150, 250], [250, 300], over a span of 250.
  assert a['mean_return'] == pytest.approx((25 * 100 + 35 * 100 + 25 * 50) / 250)
  # The tasks trained before the last phase's task c: a and b.
  assert report['mean_forgetting'] == 20.0
  assert report['mean_return'] == pytest.approx(
      (a['mean_return'] + b['mean_return'] + c['mean_return']) / 3)
  assert report['switches'] == [(0, 'a'), (100, 'b'), (200, 'c')]


def test_mean_forgetting_counts_only_tasks_trained_before_the_current_one():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=100)
  history = [{'env_steps': 120, 'task_returns': {'a': 5.0, 'b': 1.0, 'c': 9.0}}]
  report = tasks.forgetting_report(history, sequence)
  assert report['mean_forgetting'] == 0.0  # a only: its best is its last
  assert math.isnan(tasks.forgetting_report(
      [{'env_steps': 10, 'task_returns': {'a': 1.0, 'b': 1.0, 'c': 1.0}}],
      sequence)['mean_forgetting'])  # still on the first task: nothing to forget yet


# Three phases of 100 env steps: a, then b, then c. The evaluation at 100 is exactly at
# the switch: it has seen no step of b, so it closes phase 0.
TRANSFER_HISTORY = [
    {'env_steps': 20, 'task_returns': {'a': 1.0, 'b': 2.0, 'c': 0.5}},
    {'env_steps': 60, 'task_returns': {'a': 5.0, 'b': 3.0, 'c': 1.0}},
    {'env_steps': 100, 'task_returns': {'a': 8.0, 'b': 4.0, 'c': 2.0}},
    {'env_steps': 150, 'task_returns': {'a': 6.0, 'b': 7.0, 'c': 3.0}},
    {'env_steps': 180, 'task_returns': {'a': 5.0, 'b': 9.0, 'c': 4.0}},
    {'env_steps': 260, 'task_returns': {'a': 4.0, 'b': 6.0, 'c': 8.0}},
    {'env_steps': 320, 'task_returns': {'a': 3.0, 'b': 5.0, 'c': 10.0}},  # c goes on
]


def test_transfer_figures_match_a_hand_computed_history():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=100)
  report = tasks.forgetting_report(TRANSFER_HISTORY, sequence)
  assert report['phases'] == ['a', 'b', 'c']
  # Rows: the evaluations at 100 (exactly at the switch), 180 and 320 (the run's last).
  assert report['accuracy_matrix'] == [[8.0, 4.0, 2.0], [5.0, 9.0, 4.0], [3.0, 5.0, 10.0]]
  assert report['baseline_returns'] == [1.0, 2.0, 0.5]  # the first evaluation, at 20
  # BWT: a and b at the end against at the end of their own phases.
  assert report['backward_transfer'] == pytest.approx(((3 - 8) + (5 - 9)) / 2)
  # FWT: b at the end of a's phase, c at the end of b's, each against the baseline.
  assert report['forward_transfer'] == pytest.approx(((4 - 2) + (4 - 0.5)) / 2)
  json.dumps(report)  # tasks.json holds it


def test_transfer_of_a_run_still_in_its_first_phase_is_nan():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=100)
  report = tasks.forgetting_report(TRANSFER_HISTORY[:2], sequence)
  matrix = np.array(report['accuracy_matrix'])
  assert matrix[0].tolist() == [5.0, 3.0, 1.0]
  assert np.isnan(matrix[1:]).all()  # phases the run did not reach
  assert math.isnan(report['backward_transfer'])
  assert math.isnan(report['forward_transfer'])


def test_a_last_evaluation_exactly_at_a_switch_closes_the_phase_before():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=100)
  report = tasks.forgetting_report(TRANSFER_HISTORY[:3], sequence)
  assert report['accuracy_matrix'][0] == [8.0, 4.0, 2.0]
  assert np.isnan(report['accuracy_matrix'][1]).all()
  # Phase 0 is over, so b's forward transfer is measured; nothing trained after a yet.
  assert report['forward_transfer'] == pytest.approx(4 - 2)
  assert math.isnan(report['backward_transfer'])
  # One step into b: a's backward transfer is now measured (from the same returns).
  later = TRANSFER_HISTORY[:3] + [{'env_steps': 101, 'task_returns': {'a': 7.0, 'b': 4.5,
                                                                       'c': 2.0}}]
  report = tasks.forgetting_report(later, sequence)
  assert report['backward_transfer'] == pytest.approx(7 - 8)
  assert report['accuracy_matrix'][1] == [7.0, 4.5, 2.0]


def test_transfer_over_cycles_measures_each_task_from_its_first_phase():
  sequence = tasks.TaskSequence(('a', 'b'), env_steps_per_task=100, cycles=2)
  history = [
      {'env_steps': 50, 'task_returns': {'a': 1.0, 'b': 1.0}},
      {'env_steps': 100, 'task_returns': {'a': 6.0, 'b': 2.0}},
      # No evaluation in phase 1 (b) or 2 (a).
      {'env_steps': 400, 'task_returns': {'a': 4.0, 'b': 9.0}},
  ]
  report = tasks.forgetting_report(history, sequence)
  assert report['phases'] == ['a', 'b', 'a', 'b']
  matrix = np.array(report['accuracy_matrix'])
  assert matrix.shape == (4, 2)
  assert matrix[0].tolist() == [6.0, 2.0] and matrix[3].tolist() == [4.0, 9.0]
  assert np.isnan(matrix[1:3]).all()
  # a, from the end of its first phase; b, trained in the last phase, is not counted.
  assert report['backward_transfer'] == pytest.approx(4 - 6)
  assert report['forward_transfer'] == pytest.approx(2 - 1)


def test_a_phase_without_an_evaluation_leaves_its_terms_out():
  sequence = tasks.TaskSequence(('a', 'b', 'c'), env_steps_per_task=100)
  history = [row for row in TRANSFER_HISTORY if not 100 < row['env_steps'] <= 200]
  report = tasks.forgetting_report(history, sequence)
  assert np.isnan(report['accuracy_matrix'][1]).all()
  assert report['backward_transfer'] == pytest.approx(3 - 8)  # b's own end is missing
  assert report['forward_transfer'] == pytest.approx(4 - 2)  # so is c's start
  with pytest.raises(ValueError, match='at least one evaluation'):
    tasks.forgetting_report([], sequence)


@pytest.mark.parametrize('settings,message', [
    (dict(tasks=('CartPole-v1', SECOND)), 'set Experiment.task_env_steps'),
    (dict(tasks=('CartPole-v1', 'CartPole-v1'), task_env_steps=10), 'names a task twice'),
    (dict(tasks=('CartPole-v1', SECOND), task_env_steps=10, dataset_dir='/data'),
     'a dataset holds one'),
])
def test_task_settings_that_do_not_fit_are_refused(settings, message):
  with pytest.raises(ValueError, match=message):
    Experiment(**settings)


@pytest.mark.parametrize('settings,message', [
    (dict(task_target_returns=(1.0, 2.0)), r'one per task \(0 tasks\)'),
    (dict(tasks=('CartPole-v1', SECOND), task_mode='multi_task', num_envs=4,
          batch_size=4, task_target_returns=(1.0,)), r'one per task \(2 tasks\)'),
    (dict(tasks=('CartPole-v1', SECOND), task_mode='multi_task', num_envs=4,
          batch_size=4, task_target_returns=(1.0, 2.0), target_return=3.0),
     'two targets: set one'),
])
def test_per_task_targets_that_do_not_fit_are_refused(settings, message):
  with pytest.raises(ValueError, match=message):
    Experiment(**settings)


def test_a_per_task_target_needs_every_task_at_its_threshold():
  target = Experiment(tasks=('CartPole-v1', SECOND), task_mode='multi_task', num_envs=4,
                      batch_size=4, target_return=None,
                      task_target_returns=(100.0, 20.0)).target
  result = lambda a, b: {'AverageReturn': (a + b) / 2,
                         'task_returns': {'CartPole-v1': a, SECOND: b}}
  assert target.reached(result(100.0, 20.0))
  assert not target.reached(result(500.0, 19.0))  # a mean of 259.5 is not enough
  assert str(target) == f'CartPole-v1 100, {SECOND} 20'
  mean = Experiment(tasks=('CartPole-v1', SECOND), task_env_steps=10,
                    target_return=60.0).target
  assert mean.reached(result(100.0, 20.0)) and not mean.reached(result(90.0, 20.0))


def test_a_target_at_the_optimum_is_reached_by_its_float32_sum():
  """Six rewards of 0.1 summed in float32 read 0.6000000238... or 0.59999996: both
  reach a target of exactly 0.6; a return a rounding step lower than that does not."""
  target = tasks.Target(mean_return=0.6)
  just_below = float(np.float32(0.6) - np.float32(0.6) * np.float32(1e-7))
  for value in (float(np.sum(np.full(6, 0.1, np.float32))), just_below, 0.6):
    assert target.reached({'AverageReturn': value}), value
  assert not target.reached({'AverageReturn': 0.5999})
  assert tasks.Target(mean_return=475.0).reached({'AverageReturn': 474.9999})
  assert not tasks.Target(mean_return=475.0).reached({'AverageReturn': 474.99})
  assert tasks.Target(per_task={'a': 0.6}).reached({'task_returns': {'a': just_below}})


def test_an_unknown_task_id_is_refused_naming_the_field():
  with pytest.raises(validation.ValidationError, match=r"Experiment.tasks = 'NoSuchEnv-v0'"):
    Experiment(tasks=('CartPole-v1', 'NoSuchEnv-v0'), task_env_steps=10)


def test_tasks_whose_specs_differ_are_refused_naming_both(tmp_path):
  with pytest.raises(ValueError, match=r"'Acrobot-v1' has another observation spec than "
                                       r"'CartPole-v1'"):
    train_eval.run(str(tmp_path), ['dqn_cartpole.gin'], num_train_steps=10,
                   tasks=('CartPole-v1', 'Acrobot-v1'), task_env_steps=100, **TINY)


def _task_lines(printed):
  return [line.split('] ', 1)[1] for line in printed.splitlines()
          if '] Training on task' in line]


def test_a_sequence_evaluates_every_task_switches_and_resumes_on_its_task(tmp_path, capsys):
  root = str(tmp_path / 'sequence')
  settings = dict(tasks=('CartPole-v1', SECOND), task_env_steps=80, **TINY)
  # 64 warm-up env steps, then 4 per iteration (5 train steps): step 25 at 84 env steps.
  first = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=25, **settings)
  lines = _task_lines(capsys.readouterr().err)
  assert lines == ['Training on task 1 of 2, CartPole-v1, from env step 0.',
                   'Training on task 2 of 2, task_envs:long_pole_cartpole, from env step 80.']
  row = first['history'][-1]
  assert set(row['task_returns']) == {'CartPole-v1', SECOND}
  assert row['eval_return'] == pytest.approx(sum(row['task_returns'].values()) / 2)
  assert set(first['tasks']['tasks']) == {'CartPole-v1', SECOND}
  tags = event_tags(os.path.join(root, 'eval'))
  assert tags[f'eval/{SECOND}/AverageReturn'] == len(first['history'])
  with open(os.path.join(root, 'tasks.json')) as f:
    written = json.load(f)
  assert written['history'][-1]['task_returns'] == row['task_returns']
  assert [tuple(s) for s in written['switches']] == [(0, 'CartPole-v1'), (80, SECOND)]
  # Resumed past the switch, the job trains on the second task from its first line.
  second = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=50, **settings)
  assert _task_lines(capsys.readouterr().err) == [
      f'Training on task 2 of 2, {SECOND}, from env step {first["env_steps"]}.']
  assert second['history'][0]['env_steps'] > first['env_steps']


def test_separate_programs_refuse_a_task_sequence(tmp_path):
  from programs import program_env  # pylint: disable=g-import-not-at-top
  result = python_runs.run(
      ['-m', 'learners.train', f'--root_dir={tmp_path}',
       '--gin_file=dqn_cartpole.gin', "--gin_bindings=Experiment.tasks=('CartPole-v1', "
       "'Acrobot-v1')", '--gin_bindings=Experiment.task_env_steps=10'],
      timeout=300, env=program_env())
  assert result.returncode == 2, result.stderr[-2000:]
  assert 'error: Experiment.tasks: a task sequence runs in one process' in result.stderr


def test_multi_task_splits_the_sub_envs_over_the_tasks():
  exp = Experiment(tasks=('CartPole-v1', SECOND), task_mode='multi_task', num_envs=4,
                   batch_size=4)
  env = exp.make_env(collect=False)
  try:
    lengths = [sub.unwrapped.length for sub in env.vector_env.envs]
  finally:
    env.close()
  assert lengths == [0.5, 1.0, 0.5, 1.0]  # CartPole's pole, then the long one, in turn


def test_multi_task_trains_on_every_task_at_once_and_evaluates_each(tmp_path, capsys):
  root = str(tmp_path / 'multi')
  # A per-task target the first evaluation reaches (a random CartPole lasts 8+ steps):
  # the job stops there, confirmed, and its export records each task's return.
  result = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=50,
                          tasks=('CartPole-v1', SECOND), task_mode='multi_task',
                          **TINY,
                          task_target_returns=(5.0, 5.0))
  printed = capsys.readouterr().err
  assert not _task_lines(printed)  # no switches
  assert 'on 2 tasks at once (CartPole-v1, task_envs:long_pole_cartpole)' in printed
  row = result['history'][-1]
  assert set(row['task_returns']) == {'CartPole-v1', SECOND}
  assert result['reached_target'] and result['train_step'] == 25
  report = result['tasks']
  assert set(report['tasks']) == {'CartPole-v1', SECOND}
  assert 'mean_forgetting' not in report and 'switches' not in report
  exported = tf.saved_model.load(result['greedy_policy_dir'])
  metadata = exported.get_metadata()
  assert [n.decode() for n in metadata['task_names'].numpy()] == ['CartPole-v1', SECOND]
  assert metadata['task_returns'].numpy() == pytest.approx(
      [row['task_returns']['CartPole-v1'], row['task_returns'][SECOND]])


def test_multi_task_needs_envs_shared_equally():
  with pytest.raises(ValueError, match='make num_envs a multiple of the number of tasks'):
    Experiment(tasks=('CartPole-v1', SECOND), task_mode='multi_task', num_envs=5,
               batch_size=5)


def _first_observation(exp, **make):
  env = exp.make_env(collect=False, **make)
  try:
    return env.reset().observation
  finally:
    env.close()


def test_the_task_index_input_tells_each_env_its_task():
  settings = dict(tasks=('CartPole-v1', SECOND), task_env_steps=100, num_envs=4,
                  batch_size=4, task_index_input=True)
  second = _first_observation(Experiment(**settings), task=1)
  assert list(second['task']) == [1, 1, 1, 1]
  assert second['observation'].shape == (4, 4)  # CartPole's, under its own key
  mixed = _first_observation(Experiment(**settings, task_mode='multi_task'))
  assert list(mixed['task']) == [0, 1, 0, 1]
  # Without it the observation is the env's own.
  assert _first_observation(Experiment(**{**settings, 'task_index_input': False}),
                            task=1).shape == (4, 4)


def test_a_job_told_its_task_trains_and_exports(tmp_path):
  result = train_eval.run(str(tmp_path / 'told'), ['ppo_cartpole.gin'], num_train_steps=2,
                          eval_interval=2, num_eval_episodes=1, target_return=None,
                          tasks=('CartPole-v1', SECOND), task_env_steps=256,
                          task_index_input=True)
  assert result['train_step'] == 2
  assert set(result['history'][-1]['task_returns']) == {'CartPole-v1', SECOND}


def test_the_task_index_input_needs_tasks():
  with pytest.raises(ValueError, match='set Experiment.tasks too'):
    Experiment(task_index_input=True)


LAUNCHED_TASKS = "Experiment.tasks = ('CartPole-v1', 'CartPole-v0')"  # 500 and 200 steps


# A multi-task job under tfrl-launch (collector k on task k, every evaluation on both
# tasks, the per-task target, TensorBoard and the status line): test_ray_launch.py runs
# one on a two-node Ray cluster (the launcher's code is the local one's), and
# benchmarks/multi_task.py's smoke run one locally (tests/test_benchmarks_run.py).


def test_multi_task_launch_needs_a_collector_per_task(tmp_path):
  # pylint: disable=g-import-not-at-top
  from learners.configuration import config
  from learners.processes import launcher
  # pylint: enable=g-import-not-at-top
  with pytest.raises(config.ConfigError, match='use --num_collectors=2 or more'):
    launcher.Launcher(str(tmp_path), ['dqn_cartpole.gin'], [
        LAUNCHED_TASKS, "Experiment.task_mode = 'multi_task'"], num_collectors=1)


def test_tfrl_eval_plays_a_sequence_export_on_every_task(tmp_path):
  from programs import program_env  # pylint: disable=g-import-not-at-top
  tasks = "Experiment.tasks = ('CartPole-v1', 'CartPole-v0')"
  result = train_eval.run(str(tmp_path / 'seq'), ['ppo_cartpole.gin'],
                          [tasks, 'Experiment.task_env_steps = 256'], num_train_steps=1,
                          eval_interval=1, num_eval_episodes=1, target_return=None)
  evaluated = python_runs.run(
      ['-m', 'learners.eval', f'--root_dir={tmp_path / "eval"}',
       '--gin_file=ppo_cartpole.gin', f'--gin_bindings={tasks}',
       '--gin_bindings=Experiment.task_env_steps=256', '--num_episodes=2',
       f'--saved_model_dir={result["greedy_policy_dir"]}'],
      timeout=300, env=program_env())
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  line = next(l for l in evaluated.stderr.splitlines() if 'average return' in l)
  assert 'over 4 episodes | CartPole-v1 ' in line and ' | CartPole-v0 ' in line, line

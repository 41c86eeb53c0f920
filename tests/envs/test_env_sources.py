"""Envs made from a function, a 'module:function' path or an env object
(`tfrl.envs.sources`), not only from a registered id: in `tfrl.envs.make`, in env worker
processes, and as a job's `Experiment.env_name` (in Python and from a program's flags).
`corridor_env` is a module of the user's own, with an env class nobody registered.
"""
import os

import numpy as np
import pytest

import python_runs  # tests/python_runs.py

from learners import train_eval
from tfrl import actors
from tfrl import envs
from tfrl import export
import corridor_env  # tests/envs, on sys.path under pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


def _walk_right(env, num_envs):
  """Steps every env right until the end of the corridor; returns the last TimeStep."""
  env.reset()
  for _ in range(corridor_env.LENGTH - 1):
    time_step = env.step(np.ones([num_envs], np.int64))
  return time_step


@pytest.mark.parametrize('source', [
    corridor_env.Corridor, corridor_env.make_corridor, 'corridor_env:make_corridor',
    corridor_env.Corridor(),
], ids=['class', 'function', 'module_function', 'env_object'])
def test_make_takes_a_function_a_path_or_an_env_object(source):
  env = envs.make(source, num_envs=3, seed=0)
  try:
    assert env.observation_spec().shape.as_list() == [corridor_env.LENGTH]
    last = _walk_right(env, 3)
    assert last.reward.tolist() == [1.0] * 3 and np.all(last.is_last())
  finally:
    env.close()


def test_an_env_object_is_a_template_each_env_copies():
  template = corridor_env.Corridor()
  env = envs.make(template, num_envs=2, seed=0)
  try:
    _walk_right(env, 2)
  finally:
    env.close()
  assert template._position == 0  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='takes no constructor arguments'):
    envs.make(template, render_mode='rgb_array')


def test_env_workers_take_a_module_function_and_refuse_what_cannot_be_sent():
  env = envs.make('corridor_env:make_corridor', num_envs=4, num_workers=2, seed=0)
  try:
    assert _walk_right(env, 4).reward.tolist() == [1.0] * 4
  finally:
    env.close()
  with pytest.raises(ValueError, match='cannot be sent to env worker processes.*'
                                       "'module:function'"):
    envs.make(lambda: corridor_env.Corridor(), num_envs=2, num_workers=1)


@pytest.mark.parametrize('source, message', [
    ('corridor_env:no_such_function', 'neither registers the gymnasium id'),
    ('no_such_module_q:make', "cannot import 'no_such_module_q'"),
    (lambda: 'not an env', 'returned str, not a gymnasium.Env'),
    (42, 'must be a gymnasium id'),
])
def test_a_bad_source_names_the_problem(source, message):
  with pytest.raises(ValueError, match=message):
    envs.make(source, num_envs=1)


@pytest.mark.integration
def test_a_job_on_an_unregistered_env_class_learns_and_exports(tmp_path):
  result = train_eval.run(str(tmp_path / 'corridor'), ['ppo_cartpole.gin'],
                          env_name=corridor_env.Corridor, target_return=0.9,
                          num_train_steps=300)
  assert result['reached_target'], result['history'][-3:]
  env = envs.make(corridor_env.Corridor, num_envs=5, seed=1)
  played = actors.Evaluator(env, export.load_policy(result['greedy_policy_dir']), 5,
                            seed=1).run()
  env.close()
  assert played["AverageReturn"] == pytest.approx(corridor_env.BEST_RETURN, abs=1e-4)


@pytest.mark.integration
def test_a_program_takes_a_module_function_from_its_flags(tmp_path):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
             PYTHONPATH=os.pathsep.join([REPO, HERE]))
  process = python_runs.run(
                ['-m', 'learners.train_eval', f'--root_dir={tmp_path / "run"}', '--gin_file=ppo_cartpole.gin', "--gin_bindings=Experiment.env_name = 'corridor_env:make_corridor'", '--gin_bindings=Experiment.num_train_steps = 4', '--gin_bindings=Experiment.eval_interval = 4', '--gin_bindings=Experiment.target_return = None'],
                timeout=300,
                env=env)
  assert process.returncode == 0, process.stderr[-3000:]
  assert 'on corridor_env:make_corridor from train step 0' in process.stderr

"""One job per root_dir, the run's lineage, and falling back past unreadable checkpoints.

A second job on a root_dir is refused naming the holder; a stale
lock is taken; restore finds checkpoints without the `checkpoint` state file and falls
back past an unreadable newest one; a from-scratch job never replaces another run's
exports unless told to (--overwrite); a failed checkpoint write leaves no ckpt-N_temp.
"""
import glob
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

import python_runs  # tests/python_runs.py

from learners import train_eval
from tfrl import checkpoints
from tfrl import export
from tfrl import run_dir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Learner checkpoints every 25 train steps (the restores below name them). The policy
# checkpoints' interval is past every budget here: a new job's first policy checkpoint
# exports the three SavedModels, and the end exports them again, so each run exports
# once (at its end) instead of twice; what is checked is which step each export holds.
TINY = dict(num_envs=4, batch_size=8, initial_collect_steps=64, collect_steps_per_iteration=1,
            train_steps_per_iteration=5, eval_interval=25, num_eval_episodes=1,
            checkpoint_interval=25, policy_checkpoint_interval=1000, target_return=None)
TIMEOUT_S = 300  # a TF program's start-up on a loaded 2-core machine: "did not hang"


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)


def _checkpoint_dir(root):
  return os.path.join(root, 'train', 'checkpoints')


@pytest.mark.integration
def test_second_lock_is_refused_naming_the_holder_and_a_stale_one_is_taken(tmp_path,
                                                                             caplog):
  root = str(tmp_path)
  with run_dir.RootDirLock(root):
    # flock conflicts between open file descriptions, in one process too.
    with pytest.raises(run_dir.RootDirBusy) as busy:
      run_dir.RootDirLock(root)
  message = str(busy.value)
  assert '\n' not in message
  assert f'PID {os.getpid()}' in message and socket.gethostname() in message
  assert 'since ' in message and root in message

  # A holder killed with SIGKILL leaves its record but not its flock: stale, taken.
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time; from tfrl import run_dir; '
       f'run_dir.RootDirLock({root!r}); print("held", flush=True); time.sleep(600)'],
      cwd=REPO, env=_env(), stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(run_dir.RootDirBusy, match=f'PID {holder.pid}'):
      run_dir.RootDirLock(root)
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=TIMEOUT_S)
  with run_dir.RootDirLock(root) as lock:
    assert json.load(open(lock.path))['pid'] == str(os.getpid())
  assert f'PID {holder.pid}' in caplog.text and 'stale' in caplog.text


def test_run_id_is_created_once_and_reused(tmp_path):
  first = run_dir.run_id(str(tmp_path))
  assert len(first) == 32 and run_dir.run_id(str(tmp_path)) == first
  assert run_dir.new_run_id(str(tmp_path)) != first


def test_stale_checkpoint_temporaries_are_removed(tmp_path):
  os.makedirs(tmp_path / 'ckpt-32_temp')
  (tmp_path / 'ckpt-32.index').write_text('')
  removed = checkpoints.remove_stale_temporaries(str(tmp_path))
  assert removed == [str(tmp_path / 'ckpt-32_temp')]
  assert sorted(os.listdir(tmp_path)) == ['ckpt-32.index']


@pytest.mark.integration
def test_programs_refuse_a_root_dir_another_job_holds(tmp_path):
  """train_eval and tfrl-launch beside a held root_dir: exit 2, one line naming it."""
  root = str(tmp_path / 'run')
  with run_dir.RootDirLock(root):
    for program in ('train_eval', 'launch'):
      done = python_runs.run(
                 ['-m', f'learners.{program}', f'--root_dir={root}', '--gin_file=dqn_cartpole.gin'],
                 timeout=TIMEOUT_S,
                 env=_env())
      errors = [l for l in done.stderr.splitlines() if l.startswith('error:')]
      assert done.returncode == 2, (program, done.stderr[-2000:])
      assert len(errors) == 1 and f'PID {os.getpid()}' in errors[0], done.stderr[-2000:]
      assert not os.path.exists(os.path.join(root, 'train')), program


@pytest.mark.integration
def test_resume_without_state_file_fallback_and_lineage(tmp_path, capfd):
  root = str(tmp_path / 'run')
  ckpt_dir = _checkpoint_dir(root)
  greedy = os.path.join(root, 'policies', 'greedy_policy')
  first = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=100, **TINY)
  assert first['train_step'] == 100 and export.exported_train_step(greedy) == 100
  run_id = run_dir.run_id(root)
  assert export.exported_run_id(greedy) == run_id
  assert [os.path.basename(p) for p in checkpoints.checkpoint_prefixes(ckpt_dir)] == [
      'ckpt-100', 'ckpt-75', 'ckpt-50']

  # The state file and the newest checkpoint deleted: resumes from ckpt-75, not step 0,
  # and keeps the trained step-100 export until it passes step 100 itself.
  os.remove(os.path.join(ckpt_dir, 'checkpoint'))
  for path in glob.glob(os.path.join(ckpt_dir, 'ckpt-100.*')):
    os.remove(path)
  os.makedirs(os.path.join(ckpt_dir, 'ckpt-125_temp'))  # a failed write's leftover
  capfd.readouterr()
  second = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=100, **TINY)
  assert 'ckpt-75 at train step 75' in capfd.readouterr().err
  assert second['history'][0]['train_step'] == 100  # evaluated after resuming at 75
  assert export.exported_run_id(greedy) == run_id == run_dir.run_id(root)
  assert not glob.glob(os.path.join(ckpt_dir, '*_temp'))

  # A truncated newest checkpoint: named, moved aside, the next one restored.
  data = glob.glob(os.path.join(ckpt_dir, 'ckpt-100.data-*'))[0]
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 2)
  third = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=125, **TINY)
  err = capfd.readouterr().err
  assert f'Restored {os.path.join(ckpt_dir, "ckpt-75")} because ' in err
  assert f'{os.path.join(ckpt_dir, "ckpt-100")} (' in err and 'could not be read' in err
  assert os.path.exists(os.path.join(ckpt_dir, 'unreadable', 'ckpt-100.index'))
  assert third['history'][0]['train_step'] == 100
  assert export.exported_train_step(greedy) == 125

  # No checkpoint left: a from-scratch job would replace the trained export. Refused
  # (exit 2 on the command line) unless --overwrite.
  for path in glob.glob(os.path.join(ckpt_dir, 'ckpt-*')):
    os.remove(path)
  with pytest.raises(run_dir.RootDirNotResumable, match='--overwrite'):
    train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=25, **TINY)
  assert export.exported_train_step(greedy) == 125
  cli = python_runs.run(
            ['-m', 'learners.train_eval', f'--root_dir={root}', '--gin_file=dqn_cartpole.gin', '--gin_bindings=Experiment.num_train_steps=25'],
            timeout=TIMEOUT_S,
            env=_env())
  assert cli.returncode == 2 and 'error: root_dir ' in cli.stderr, cli.stderr[-2000:]
  assert 'no checkpoint to resume from' in cli.stderr

  fresh = train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=25, overwrite=True,
                         **TINY)
  assert fresh['train_step'] == 25 and export.exported_train_step(greedy) == 25
  assert export.exported_run_id(greedy) == run_dir.run_id(root) != run_id

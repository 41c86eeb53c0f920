r"""What a cluster does to a job, measured: signals, hangs, frozen processes, a held or
damaged root_dir and bad input, each run as a user would run it, with its exit status,
how long it took and what it left behind.

    python benchmarks/reliability.py --trials=3
    python benchmarks/reliability.py --only='kill -9' --trials=10

Prints one line per trial and a summary per scenario (its figures: docs/results/index.md,
"Reliability"). The job is DQN on CartPole with the test suite's
small settings (tests/learners/programs.py: SMALL), one collector.

`--only` picks bad-input rows too, by their name after 'bad input ':
`--only='eval missing saved_model_dir'` runs that row alone (the test suite's smoke
run, tests/test_benchmarks_run.py).
"""
import argparse
import glob
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, 'tests', 'learners')
sys.path[:0] = [REPO, TESTS]
from programs import SMALL, final_state, gin_args  # pylint: disable=g-import-not-at-top,wrong-import-position

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=os.pathsep.join([REPO, TESTS]))
HANGS = ['import faulty_env', 'Experiment.env_name = "tfrl_test/CartPoleThatHangs-v0"']


def _start(program: str, root: str, *args: str, **env: str) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, '-m', f'learners.{program}', f'--root_dir={root}',
                           *args], cwd=REPO, env=dict(ENV, **env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _beat(root: str, name: str) -> dict:
  try:
    with open(os.path.join(root, 'status', f'{name}.json')) as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def _until_trained(job: subprocess.Popen, root: str, steps: int, timeout_s: float = 300):
  deadline = time.monotonic() + timeout_s
  while _beat(root, 'train').get('counters', {}).get('train_step', 0) < steps:
    if job.poll() is not None or time.monotonic() > deadline:
      raise RuntimeError(f'the job ended or never reached train step {steps}: '
                         f'{job.communicate()[1][-2000:]}')
    time.sleep(0.3)


def _end(job: subprocess.Popen, timeout_s: float = 300):
  """(exit status, seconds until it ended, stdout, stderr)."""
  start = time.monotonic()
  out, err = job.communicate(timeout=timeout_s)
  return job.returncode, time.monotonic() - start, out, err


def _trainer_last_step(root: str) -> int:
  with open(os.path.join(root, 'logs', 'train.log')) as f:
    found = re.findall(r'Trainer stopped at train step (\d+)', f.read())
  return int(found[-1]) if found else -1


def _job_left(root: str) -> int:
  """Processes still running with `root` on their command line."""
  out = subprocess.run(['pgrep', '-f', '--', f'--root_dir={root}'], capture_output=True, text=True)
  return len(out.stdout.split())


def _saved_at_last_step(root: str) -> str:
  state, last = final_state(root), _trainer_last_step(root)
  ok = last > 0 and state['checkpoint'] == last and state['greedy_policy'] == last
  return f'final save at last step {last}: {"yes" if ok else "NO " + str(state)}'


def signal_to_launch(root: str, sig: int) -> tuple:
  job = _start('launch', root, *gin_args(SMALL), '--num_collectors=1',
               '--gin_bindings=Experiment.policy_checkpoint_interval=64')
  _until_trained(job, root, random.choice([64, 96, 128, 160]))
  job.send_signal(sig)
  status, took, _, _ = _end(job)
  return status, took, f'{_saved_at_last_step(root)}; processes left {_job_left(root)}'


def signal_to_train_eval(root: str) -> tuple:
  job = _start('train_eval', root, *gin_args(SMALL + ['Experiment.num_train_steps=100000']))
  deadline = time.monotonic() + 300
  while not glob.glob(os.path.join(root, 'train', 'checkpoints', 'ckpt-*.index')):
    assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-2000:]
    time.sleep(0.3)
  job.send_signal(signal.SIGTERM)
  status, took, out, _ = _end(job)
  stopped = re.findall(r'Stopped by a signal at train step (\d+)', out)
  state = final_state(root)
  ok = stopped and state['checkpoint'] == state['greedy_policy'] == int(stopped[0])
  return status, took, f'final save at the step it printed: {"yes" if ok else "NO"}'


def kill_9_of_launch(root: str) -> tuple:
  job = _start('launch', root, *gin_args(SMALL), '--num_collectors=1')
  _until_trained(job, root, 32)
  job.kill()
  job.communicate()
  start = time.monotonic()
  while _job_left(root) and time.monotonic() - start < 120:
    time.sleep(0.1)
  return -9, time.monotonic() - start, f'children left after: {_job_left(root)}'


def hung_env_under_launch(root: str) -> tuple:
  job = _start('launch', root, *gin_args(SMALL + HANGS + ['Experiment.env_step_timeout_s=0']),
               '--num_collectors=1', '--stall_timeout_s=8', '--status_interval_s=5',
               TFRL_TEST_HANG_AT_STEP='300')
  status, took, out, _ = _end(job)
  named = re.search(r'collect_0 stalled \(env step, \d+ s\)', out)
  return status, took, f'named: {named.group(0) if named else "NO"}; {_saved_at_last_step(root)}'


def hung_env_in_train_eval(root: str) -> tuple:
  job = _start('train_eval', root, *gin_args(SMALL + HANGS + ['Experiment.env_step_timeout_s=5']),
               TFRL_TEST_HANG_AT_STEP='300')
  status, took, _, err = _end(job)
  said = [l for l in err.splitlines() if l.startswith('error:')]
  return status, took, said[0][:110] if said else 'NO error line'


def sigstop_under_launch(root: str, name: str) -> tuple:
  job = _start('launch', root, *gin_args(SMALL), '--num_collectors=1', '--stall_timeout_s=6',
               '--status_interval_s=2')
  _until_trained(job, root, 64)
  os.kill(_beat(root, name)['pid'], signal.SIGSTOP)
  status, took, out, _ = _end(job)
  named = re.search(rf'{name} (not answering|stalled) \(\d+ s\)', out)
  return status, took, (f'named: {named.group(0).strip() if named else "NO"}; '
                        f'{_saved_at_last_step(root)}')


def second_job_on_a_held_root_dir(root: str) -> tuple:
  first = _start('train_eval', root, *gin_args(SMALL + ['Experiment.num_train_steps=100000']))
  deadline = time.monotonic() + 300
  while not os.path.exists(os.path.join(root, 'job.lock')) or not open(
      os.path.join(root, 'job.lock')).read():
    assert first.poll() is None and time.monotonic() < deadline
    time.sleep(0.2)
  try:
    second = _start('train_eval', root, *gin_args(SMALL))
    status, took, _, err = _end(second)
  finally:
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
  said = [l for l in err.splitlines() if l.startswith('error:')]
  return status, took, said[0][:110] if said else 'NO error line'


def truncated_newest_checkpoint(root: str) -> tuple:
  args = gin_args(SMALL + ['Experiment.num_train_steps=128', 'Experiment.target_return=None'])
  _end(_start('train_eval', root, *args))
  data = sorted(glob.glob(os.path.join(root, 'train', 'checkpoints', 'ckpt-128.data-*')))[0]
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 2)
  status, took, out, err = _end(_start(
      'train_eval', root, *gin_args(SMALL + ['Experiment.num_train_steps=160',
                                             'Experiment.target_return=None'])))
  said = re.search(r'Restored \S+ because \S+', out + err)
  return status, took, said.group(0).replace(root, 'R') if said else 'NO fallback line'


def bad_input(root: str, chosen=lambda label: True) -> list:
  """(label, exit status, seconds, error line) per bad value whose label is `chosen`."""
  holder = socket.socket()
  holder.bind(('0.0.0.0', 0))
  holder.listen()
  busy = holder.getsockname()[1]
  a_file = os.path.join(root, 'a_file')
  os.makedirs(root, exist_ok=True)
  open(a_file, 'w').close()
  cases = [
      ('train_eval num_envs = 0', 'train_eval', ['--gin_bindings=Experiment.num_envs = 0']),
      ("train_eval num_envs = 'four'", 'train_eval',
       ["--gin_bindings=Experiment.num_envs = 'four'"]),
      ('launch batch_size = -1', 'launch', ['--gin_bindings=Experiment.batch_size = -1']),
      ('launch unknown env id', 'launch', ["--gin_bindings=Experiment.env_name = 'CartPol-v1'"]),
      ('train_eval root_dir at a file', 'train_eval', [], a_file),
      ('launch busy port', 'launch', [f'--port={busy}']),
      ('reverb_server busy port', 'reverb_server', [f'--port={busy}']),
      ('eval missing saved_model_dir', 'eval', [f'--saved_model_dir={root}/nothing']),
  ]
  rows = []
  for label, program, extra, *at in cases:
    if not chosen(label):
      continue
    job = _start(program, at[0] if at else os.path.join(root, 'job'),
                 '--gin_file=dqn_cartpole.gin', *extra)
    status, took, _, err = _end(job)
    said = [l for l in err.splitlines() if l.startswith('error:')]
    rows.append((label, status, took, said[0][:100] if said else 'NO error line'))
  holder.close()
  return rows


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--trials', type=int, default=3, help='trials per timed scenario')
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--only', default=None,
                      help='run only the scenarios whose name contains this text '
                           "('bad input' for the bad-input rows)")
  args = parser.parse_args()
  random.seed(args.seed)
  scenarios = [
      ('SIGTERM to tfrl-launch', lambda r: signal_to_launch(r, signal.SIGTERM), args.trials),
      ('SIGHUP to tfrl-launch', lambda r: signal_to_launch(r, signal.SIGHUP), 1),
      ('SIGTERM to train_eval', signal_to_train_eval, args.trials),
      ('kill -9 of tfrl-launch (s until no child)', kill_9_of_launch, args.trials),
      ('hung env under tfrl-launch (stall 8 s)', hung_env_under_launch, 1),
      ('hung env in train_eval (env step timeout 5 s)', hung_env_in_train_eval, 1),
      ('SIGSTOP of the Reverb server (stall 6 s)',
       lambda r: sigstop_under_launch(r, 'reverb_server'), 1),
      ('SIGSTOP of collect_0 (stall 6 s)', lambda r: sigstop_under_launch(r, 'collect_0'), 1),
      ('second train_eval on a held root_dir', second_job_on_a_held_root_dir, 1),
      ('truncated newest checkpoint', truncated_newest_checkpoint, 1),
  ]
  def chosen(name: str) -> bool:
    return not args.only or args.only in name

  scenarios = [s for s in scenarios if chosen(s[0])]
  for name, run, trials in scenarios:
    times, statuses = [], []
    for _ in range(trials):
      root = os.path.join(tempfile.mkdtemp(prefix='tfrl_reliability_'), 'job')
      status, took, what = run(root)
      times.append(took)
      statuses.append(status)
      print(f'  {name}: exit {status} in {took:.1f} s; {what}', flush=True)
    print(f'{name}: exit statuses {statuses}; {min(times):.1f}-{max(times):.1f} s '
          f'(median {statistics.median(times):.1f})', flush=True)
  def bad_input_chosen(label: str) -> bool:
    return chosen(f'bad input {label}')

  for label, status, took, said in bad_input(tempfile.mkdtemp(prefix='tfrl_bad_'),
                                             bad_input_chosen):
    print(f'bad input | {label} | exit {status} | {took:.1f} s | {said}', flush=True)


if __name__ == '__main__':
  main()

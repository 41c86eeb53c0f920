"""Time to solve: tfrl's train_eval vs Stable-Baselines3 (RL-Zoo settings), seed by seed.

For each algorithm and seed, runs tfrl's one-process program as a subprocess,

    .venv/bin/python -m learners.train_eval --root_dir=<tmp> \
        --gin_file=learners/configs/<config>.gin --gin_bindings=Experiment.seed=<seed>

and, for DQN, PPO, SAC, PPO on Pendulum and the LSTM PPO on masked CartPole, the peer
`benchmarks/peers/sb3_solve.py` with the same seed in the peer's own virtual environment
(benchmarks/peers/.venv, created here from benchmarks/peers/requirements.txt when
missing: stable-baselines3 2.9.2, sb3-contrib 2.9.2, torch 2.13.0 CPU). It then prints,
per algorithm, each seed's seconds / env steps / solved on both sides, and a markdown
table (docs/results/ shows it) of each measure's median or IQM over seeds with its 95% bootstrap
interval on both sides and their comparison (benchmarks/summary.py, stats.py), also
written as JSON (--summary_json).

Algorithms (`--algos`; tfrl config, env, threshold, peer; the peer's settings are
RL-Zoo's, listed in sb3_solve.py):
  dqn              dqn_cartpole, CartPole-v1, 475; SB3 DQN.
  ppo              ppo_cartpole, CartPole-v1, 475; SB3 PPO.
  sac              sac_pendulum, Pendulum-v1, -200; SB3 SAC.
  ppo_pendulum     ppo_pendulum, Pendulum-v1, -200; SB3 PPO with RL-Zoo's tuned
                   Pendulum-v1 settings (hyperparams/ppo.yml): 4 envs x 1,024 steps,
                   gamma 0.9, GAE lambda 0.95, 10 epochs, lr 1e-3, clip 0.2, gSDE
                   (sde_sample_freq 4), 1e5 steps. RL-Zoo gives this entry no `normalize`
                   (no VecNormalize; only its PendulumNoVel-v1 LSTM entry has one), so the
                   peer runs without; tfrl's config has no gSDE (a state-independent
                   Gaussian, tanh-squashed) and scales rewards by 0.1.
  ppo_lstm_masked  ppo_lstm_cartpole_masked, CartPole-v1 with only the cart position and
                   the pole angle (observation entries 0, 2), 475; sb3-contrib
                   RecurrentPPO with RL-Zoo's CartPoleNoVel-v1 settings
                   (hyperparams/ppo_lstm.yml: 8 envs x 32 steps, batch 256, gamma 0.98,
                   GAE lambda 0.8, 20 epochs, lr lin_1e-3, clip lin_0.2, LSTM 64 for the
                   actor and another for the critic, heads pi [64] / vf [64], ReLU,
                   VecNormalize of observations and rewards, 1e5 steps) on the same
                   masked env (a gymnasium wrapper keeping entries 0 and 2). Its
                   evaluation carries the LSTM state across steps and uses the training
                   env's VecNormalize statistics, frozen.
  dqn_lunarlander  dqn_lunarlander, LunarLander-v3 (the 'box2d' extra), 200 over 20
                   episodes; SB3 DQN with RL-Zoo's LunarLander settings (dqn.yml: lr
                   6.3e-4, batch 128, buffer 50k, target every 250 steps, 1e5 steps).
  ppo_lunarlander  ppo_lunarlander, LunarLander-v3, 200 over 20 episodes; SB3 PPO with
                   RL-Zoo's LunarLander settings (ppo.yml: 16 envs x 1,024 steps,
                   batch 64, 4 epochs, gamma 0.999, GAE 0.98, entropy 0.01, 1e6 steps).
  ppo_minigrid     ppo_minigrid_doorkey, MiniGrid-DoorKey-5x5-v0, 0.9 over 20 episodes;
                   SB3 PPO with RL-Zoo's MiniGrid settings (FlatObsWrapper, VecNormalize,
                   8 envs x 128 steps, batch 64, 10 epochs, lr 2.5e-4).
  dqn_per, impala, clear, appo   tfrl only (see below).

Tasks judged on budgets (no threshold): each side trains for
`--budget_seconds` (tfrl: `Experiment.max_train_seconds`; SB3: its time cap), ends
with one more evaluation, and the table gives the return at that point, the return at
each of the task's env-step budgets (interpolated between the evaluations either side
of it, where the run got that far: summary.return_at), and env steps (Atari: frames, 4 per step) per second of training.
  sac_halfcheetah, ppo_halfcheetah   HalfCheetah-v5 (the 'mujoco' extra), evaluated
                   every ~10k / ~20k env steps; env-step budgets 50k and 150k / 200k and
                   1M; SB3 SAC and PPO with RL-Zoo's MuJoCo settings.
  ppo_pong, ppo_breakout, dqn_pong, dqn_breakout   ALE Pong-v5 / Breakout-v5 (the
                   'atari' extra): the training games' mean raw score (last 100 games),
                   as Atari results are usually given, logged on both sides every ~10k
                   env steps; tfrl evaluates only at the end. SB3 PPO and DQN with
                   RL-Zoo's Atari settings. Both sides train on RL-Zoo's AtariWrapper
                   (life loss terminal, FIRE on reset, sign-clipped rewards: tfrl's
                   terminal_on_life_loss, fire_reset, clip_reward; 4 frames) and
                   report whole games' raw scores.
  impala_pong, impala_breakout, appo_breakout   the same, tfrl only (no SB3 IMPALA or
                   APPO).

--curves_dir=DIR also writes each algo's learning curves (eval return against env
steps and against seconds side by side; per side the central value over seeds with its
95% band, each seed faint beneath; benchmarks/curves.py) to DIR/solve_time_<algo>.png.

How each side counts (like for like): one evaluation protocol (`tasks.Protocol`, the
task's), recorded with every run; summary.py compares only runs whose protocols agree.
  grid      each side evaluates at its first step at or past each multiple of the task's
            `eval_every_env_steps` (tfrl: `Experiment.eval_every_env_steps`; SB3:
            `--eval_freq`), env steps counting the random warm-up on both sides.
  episodes  `eval_episodes` (10; LunarLander and MiniGrid 20) per evaluation, greedy, on
            min(episodes, 10) envs whose sub-env i resets with the evaluation's seed + i,
            a new seed per evaluation from the experiment seed's evaluation stream
            (`tfrl.seeding`; the peer loads the same module), so both sides play the
            same start states and no two experiment seeds share one.
  success   an evaluation at the threshold, then a confirmation: the mean over 100
            fresh episodes (the confirmation stream) at the threshold too, else
            training goes on. Solved at the end of that confirmation: its env steps,
            and its wall clock from the first train step (tfrl: after the agent, the
            Reverb server and the random warm-up; SB3: from the start of
            `model.learn`), evaluations and confirmations INCLUDED on both sides.
            tfrl's figures come from train_eval's final line ('Trained to step N (E env
            steps) in S s; ...', exit 0), its curve from the progress lines. Where the
            peer trains on VecNormalize'd envs (ppo_lstm_masked), the statistics are
            copied into its eval envs before each evaluation (counted in its time) and
            its returns are the raw env's.
  budgets   tasks without a threshold evaluate on the same grid with no confirmation;
            Atari tasks are judged on the training games' scores on both sides.
  Neither side counts process start-up (imports, TF/torch initialisation, graph building
  before the first step); the "proc s" column gives each subprocess's whole wall clock as
  a diagnostic.

Seeds: `--seeds`, else each task's own count from 0 (`Task.seeds`: 5 where one run
costs under 3 minutes, 3 otherwise). Central values (`--statistic`: IQM as rliable, the
default, or the median) are over all seeds, an unsolved seed counting as never solved
(infinite time and env steps): an IQM is finite only when every seed left after its
trim solved (with 3 seeds nothing is trimmed), a median when more than half did.
Intervals: 95% percentile bootstrap over seeds (`--confidence`,
`--bootstrap_resamples`, `--bootstrap_seed`); the comparison is tfrl / peer for times,
env steps and rates and tfrl - peer for returns, each side resampled on its own. Target:
tfrl reaches the threshold on every seed, and its central wall clock
and env steps are at or below SB3's; its returns at or above. The verdict says too
whether the comparison's interval clears parity. IMPALA, CLEAR, APPO and prioritized
DQN have no SB3 peer: tfrl's figures only. Each run is capped (`--max_seconds` of
training, 8 minutes, plus `--startup_seconds` for the process to start); the 1-minute
load average is recorded before and after every run, since the machine may be shared.
The script always exits 0 (it is a measurement).

`--jobs=N` runs N at once, each pinned to one CPU: on this 2-core machine the long tasks
(HalfCheetah, Atari), judged per env step, take half the time. Per env step nothing
changes (each side's data and updates do not depend on its speed; tfrl's replay
ratio is held by Reverb's rate limiter); seconds and rates are then one-CPU figures on
both sides, not comparable with runs on every CPU.

torch's thread count matters on a shared 2-core machine: with its default (one intra-op
thread per core) SB3's times swing several-fold with the other processes' load (PPO
seed 2: 4.3 s and 9.7 s for the same 15,000 env steps in two runs), and
`--peer_torch_threads=1` gives SB3 steadier and mostly faster times. It also changes
SB3's numerics, hence sometimes the env steps at which a seed solves.

Run (from the repository root):

    .venv/bin/python benchmarks/solve_time.py
    .venv/bin/python benchmarks/solve_time.py --algos=ppo --seeds=0
    .venv/bin/python benchmarks/solve_time.py --algos=impala,appo --skip_peer
    .venv/bin/python benchmarks/solve_time.py --algos=dqn,ppo,sac --peer_torch_threads=1
    .venv/bin/python benchmarks/solve_time.py --algos=ppo_pendulum,ppo_lstm_masked \\
        --peer_torch_threads=1
    .venv/bin/python benchmarks/solve_time.py --algos=sac_halfcheetah,ppo_halfcheetah \\
        --budget_seconds=600 --peer_torch_threads=1 --curves_dir=benchmarks/curves
    .venv/bin/python benchmarks/solve_time.py --algos=sac_halfcheetah --jobs=2 \\
        --budget_seconds=1600 --peer_torch_threads=1   # two runs at once, one CPU each
    .venv/bin/python benchmarks/solve_time.py --algos=dqn --report_from=runs.jsonl \\
        --statistic=median --curves_dir=benchmarks/curves   # re-report recorded runs

Results: docs/results/, written by benchmarks/results_pages.py from the runs kept in
benchmarks/runs/ (a <name>.meta.json beside each says how they were made).
"""
import concurrent.futures
import dataclasses
import datetime
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional, Tuple

from absl import app
from absl import flags

import common  # benchmarks/common.py
import curves  # benchmarks/curves.py
import stats  # benchmarks/stats.py
import summary  # benchmarks/summary.py
from tasks import ALGOS, CONTRIB_PEERS, Run, Task, peer_name  # benchmarks/tasks.py

REPO = common.REPO
PEERS = os.path.join(REPO, 'benchmarks', 'peers')
PEER_SCRIPT = os.path.join(PEERS, 'sb3_solve.py')
PEER_REQUIREMENTS = os.path.join(PEERS, 'requirements.txt')

FLAGS = flags.FLAGS
flags.DEFINE_list('algos', list(ALGOS), f'Subset of {",".join(ALGOS)}.')
flags.DEFINE_list('seeds', [], 'Seeds (Experiment.seed; SB3 seed); default: each '
                  "task's own count from 0 (Task.seeds: 5, or 3 for the long tasks).")
flags.DEFINE_bool('skip_peer', False, 'Run tfrl only (no SB3, no peer venv).')
flags.DEFINE_bool('skip_tfrl', False,
                  "Run the peer only: to add a side's runs at another budget (e.g. "
                  "SB3 needs longer to reach a task's env-step budget), reported with "
                  "the others through --report_from.")
flags.DEFINE_float('max_seconds', 480.0,
                   'Training time cap per run (s) of the tasks with a threshold.')
flags.DEFINE_float('budget_seconds', 600.0,
                   'The wall-clock budget (s of training) of the tasks without a '
                   'threshold (HalfCheetah, Atari): each side trains this long.')
flags.DEFINE_float('startup_seconds', 120.0,
                   'Allowance on top of max_seconds for process start-up before a run '
                   'is killed.')
flags.DEFINE_string('tfrl_python', os.path.join(REPO, '.venv', 'bin', 'python'),
                    "tfrl's interpreter.")
flags.DEFINE_string('peer_venv', os.path.join(PEERS, '.venv'),
                    "The SB3 peer's virtual environment (created when missing).")
flags.DEFINE_integer('peer_torch_threads', 0,
                     "SB3's torch intra-op threads (0: torch's default, one per core).")
flags.DEFINE_string('json_out', None, 'Also write every run as one JSON line here.')
flags.DEFINE_string('report_from', None,
                    'Run nothing: print the tables (and with --curves_dir, the curves) of '
                    'the runs in this --json_out file, for --algos; --budget_seconds and '
                    '--max_seconds as they were run.')
flags.DEFINE_string('curves_dir', None,
                    'Write each algo\'s learning curves (both sides, every seed) to '
                    '<curves_dir>/solve_time_<algo>.png.')
flags.DEFINE_list('env_step_budgets', [],
                  "Replace the selected tasks' env-step budgets (the points both sides' "
                  'returns are read at), e.g. to read runs that stopped short of them.')
flags.DEFINE_integer('peer_max_env_steps', 0,
                     "Stop SB3's runs once they have this many env steps (0: no cap), for "
                     'comparisons at equal env steps; stop tfrl there with '
                     '--tfrl_gin_bindings="Experiment.num_train_steps = N".')
flags.DEFINE_integer('jobs', 1,
                     'Runs at a time. 1: one after another, each with every CPU, tfrl and '
                     "SB3 interleaved per seed. N > 1: N runs at once, each pinned to a CPU "
                     "of its own (taskset), so per-env-step figures come N times sooner and "
                     'seconds are one-CPU figures on both sides (the runs are recorded with '
                     'their CPU).')
flags.DEFINE_string('pause_file', None,
                    'While this file exists, no new run starts (the one under way '
                    'finishes): a way to borrow a shared machine between runs without '
                    'slowing a timed one down.')
flags.DEFINE_enum('statistic', stats.STATISTIC, sorted(stats.STATISTICS),
                  'The central value over seeds in the summary and the curves '
                  '(stats.py: iqm cuts int(n/4) seeds from each end, none of 3).')
flags.DEFINE_float('confidence', stats.CONFIDENCE, "The bootstrap intervals' coverage.")
flags.DEFINE_integer('bootstrap_resamples', stats.RESAMPLES, 'Bootstrap resamples.')
flags.DEFINE_integer('bootstrap_seed', stats.SEED,
                     "The bootstrap's generator seed (the same runs give the same "
                     'intervals).')
flags.DEFINE_string('summary_json',
                    os.path.join(REPO, 'runs', 'solve_time_summary.json'),
                    'Write the summary (per task and measure: both sides\' values per '
                    'seed, central values, intervals, comparison) here; empty: do not.')
flags.DEFINE_multi_string('tfrl_gin_bindings', [],
                          "Extra gin bindings for tfrl's runs (to try a setting against "
                          'the peer without editing the .gin file).')


def _run_process(cmd: List[str], timeout: float, env=None, cpu: Optional[int] = None):
  """Runs cmd in its own process group; returns (rc or None on timeout, out, err, s).

  With `cpu`, the process and all it starts run on that CPU only (taskset sets the
  affinity before the program starts, so TensorFlow's and torch's thread pools size
  themselves to it).

  Not learners.launch's child start: a run here is waited on to its end under a cap,
  and at the cap its whole process group (the program and anything it started) is
  killed at once; nothing is stopped in order.
  """
  with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
    if cpu is not None:
      cmd = ['taskset', '--cpu-list', str(cpu), *cmd]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err, env=env,
                            start_new_session=True)
    try:
      rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)  # this run's own process group only
      proc.wait()
      rc = None
    seconds = time.perf_counter() - start
    out.seek(0)
    err.seek(0)
    return rc, out.read(), err.read(), seconds


# -- The peer's venv --------------------------------------------------------------------


def peer_python() -> str:
  return os.path.join(FLAGS.peer_venv, 'bin', 'python')


def ensure_peer_venv() -> None:
  """Creates the peer venv from requirements.txt if missing (or if the file changed)."""
  common.ensure_venv(FLAGS.peer_venv, PEER_REQUIREMENTS)


def peer_versions(contrib: bool = False) -> str:
  """The peer venv's versions; sb3-contrib's too where `contrib` (a peer uses it)."""
  code = ('import stable_baselines3, torch, gymnasium; '
          'print(f"stable-baselines3 {stable_baselines3.__version__}, torch '
          '{torch.__version__}, gymnasium {gymnasium.__version__}", end="")')
  if contrib:
    code += ('; import sb3_contrib; '
             'print(f", sb3-contrib {sb3_contrib.__version__}", end="")')
  rc, out, err, _ = _run_process([peer_python(), '-c', code], timeout=120)
  return out.strip() if rc == 0 else f'unknown ({err.strip()[-200:]})'


# -- tfrl -------------------------------------------------------------------------------

_STARTUP = re.compile(r'\(start-up ([0-9.]+) s\)')
_FINAL = re.compile(r'Trained to step (\d+) \((\d+) env steps\) in ([0-9.]+) s; '
                    r'last eval return (\S+)\.')
_EVAL = re.compile(r'train step\s+(\d+) \| env steps\s+(\d+) \| eval return\s+(\S+) \|'
                   r'.*\|\s*([0-9.]+) s')
# The progress lines between evaluations (`log_interval`): the training episodes'
# return. (An evaluation's line also has one, but its clock includes the evaluation.)
_PROGRESS = re.compile(r'train step\s+(\d+) \| env steps\s+(\d+) \| '
                       r'train return\s+(\S+) \|.*\|\s*([0-9.]+) s')


def _training_cap(task: Task) -> float:
  """Seconds of training a run of `task` gets: its budget, or the time-to-solve cap."""
  return FLAGS.budget_seconds if task.threshold is None else FLAGS.max_seconds


def _process_cap(task: Task) -> float:
  """When a run's process is killed: its training, start-up, and for budget tasks the
  final evaluation (a greedy Atari policy that never serves plays until ALE's 27,000
  step limit: a minute and more)."""
  final_evaluation = 300.0 if task.threshold is None else 0.0
  return _training_cap(task) + FLAGS.startup_seconds + final_evaluation


def run_tfrl(algo: str, seed: int, cpu: Optional[int] = None) -> Run:
  task = ALGOS[algo]
  gin_file = os.path.join('learners', 'configs', task.config + '.gin')
  root_dir = tempfile.mkdtemp(prefix=f'solve_time_{algo}_{seed}_')
  protocol = task.protocol
  bindings = [f'Experiment.seed={seed}', *_protocol_settings(protocol, 'tfrl'),
              *task.bindings, *FLAGS.tfrl_gin_bindings]
  if task.threshold is None:
    bindings.append(f'Experiment.max_train_seconds={FLAGS.budget_seconds}')
  cmd = [FLAGS.tfrl_python, '-m', 'learners.train_eval', f'--root_dir={root_dir}',
         f'--gin_file={gin_file}'] + [f'--gin_bindings={b}' for b in bindings]
  # This checkout's tfrl and learners first, whatever else the interpreter has installed
  # (`-m` from REPO puts it on sys.path too; PYTHONPATH makes it explicit).
  pythonpath = [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=os.pathsep.join(pythonpath))
  # A binding that changes the evaluations makes another protocol: recorded, so that
  # summary.py does not compare the run with the peer's.
  overrides = [b for b in FLAGS.tfrl_gin_bindings if any(
      form.split('=')[0] in b for form in _PROTOCOL_SETTINGS['tfrl'].values())]
  run = Run('tfrl', algo, seed, load_start=common.load_1min(),
            extra={'protocol': {**protocol.as_dict(),
                                **({'tfrl_overrides': overrides} if overrides else {})}})
  try:
    rc, out, err, run.process_seconds = _run_process(cmd, _process_cap(task), env=env,
                                                     cpu=cpu)
  finally:
    shutil.rmtree(root_dir, ignore_errors=True)
  run.load_end = common.load_1min()
  if task.returns == 'train':
    points = [(int(p[0]), int(p[1]), p[2], float(p[3])) for p in _PROGRESS.findall(err)]
  else:
    points = [(int(e[0]), int(e[1]), e[2], float(e[3])) for e in _EVAL.findall(err)]
  points = [(step, env_steps, float(ret), seconds) for step, env_steps, ret, seconds in points]
  run.extra['curve'] = [(env_steps, seconds, ret) for _, env_steps, ret, seconds in points]
  if task.threshold is None:
    _set_budget_results(run, run.extra['curve'])
  final = _FINAL.search(out)
  if task.threshold is not None:
    # Solved: an evaluation at the threshold that its confirmation repeated (exit 0),
    # timed to the end of that confirmation, as SB3's runs are; else the last evaluation.
    run.solved = rc == 0 and final is not None
    run.evals = len(points)
    if run.solved:
      run.extra['train_steps'], run.env_steps = int(final.group(1)), int(final.group(2))
      run.seconds, run.eval_return = float(final.group(3)), float(final.group(4))
    elif points:
      run.extra['train_steps'], run.env_steps, run.eval_return, run.seconds = points[-1]
  startup = _STARTUP.search(err)
  if startup:
    run.extra['startup_seconds'] = float(startup.group(1))
  if rc is None:
    run.note = f'killed at the cap ({_process_cap(task):.0f} s)'
  elif rc != 0:
    tail = [l for l in (err.strip().splitlines() or ['']) if l.strip()][-1:] or ['']
    run.note = (f'not confirmed: {tail[0][:150]}' if final else
                f'failed (exit {rc}): {tail[0][:150]}')
  return run


# Each field of an evaluation protocol (tasks.Protocol) as tfrl's gin binding and as
# sb3_solve.py's argument.
_PROTOCOL_SETTINGS = {'tfrl': {'eval_every_env_steps': 'Experiment.eval_every_env_steps={}',
                               'eval_episodes': 'Experiment.num_eval_episodes={}',
                               'confirm_episodes': 'Experiment.num_confirm_episodes={}'},
                      'SB3': {'eval_every_env_steps': '--eval_freq={}',
                              'eval_episodes': '--n_eval_episodes={}',
                              'confirm_episodes': '--confirm_episodes={}'}}


def _protocol_settings(protocol, side: str) -> List[str]:
  """`side`'s ('tfrl' or 'SB3') settings for an evaluation protocol: those of its fields
  that apply (none of a 'train' protocol's)."""
  return [form.format(getattr(protocol, field))
          for field, form in _PROTOCOL_SETTINGS[side].items()
          if getattr(protocol, field) is not None]


def _set_budget_results(run: Run, curve) -> None:
  """A budget run's figures from its curve of (env steps, seconds, return): the return
  and env steps at its end (the wall-clock budget). Its returns at the env-step budgets
  are read off the curve when reported (summary.return_at)."""
  if not curve:
    return
  run.env_steps, run.seconds, run.eval_return = curve[-1]
  run.evals = len(curve)


# -- SB3 --------------------------------------------------------------------------------


def run_peer(algo: str, seed: int, cpu: Optional[int] = None) -> Run:
  task = ALGOS[algo]
  cmd = [peer_python(), PEER_SCRIPT, f'--algo={task.peer}', f'--seed={seed}',
         f'--max_seconds={_training_cap(task)}',
         f'--torch_threads={FLAGS.peer_torch_threads}',
         f'--max_env_steps={FLAGS.peer_max_env_steps}',
         *_protocol_settings(task.protocol, 'SB3'), *task.peer_args]
  run = Run('SB3', algo, seed, load_start=common.load_1min())
  rc, out, err, run.process_seconds = _run_process(cmd, _process_cap(task), cpu=cpu)
  run.load_end = common.load_1min()
  result = None
  for line in out.splitlines():
    if line.startswith('{'):
      result = json.loads(line)
  if result is None:
    tail = [l for l in err.strip().splitlines() if l.strip()][-1:] or ['']
    run.note = ('killed at the cap' if rc is None else
                f'failed (exit {rc}): {tail[0][:150]}')
    return run
  run.extra = {k: result.get(k) for k in ('eval_seconds', 'seconds_excluding_eval',
                                          'stopped_by', 'versions', 'torch_threads',
                                          'startup_seconds', 'protocol')}
  run.extra['curve'] = [(h['env_steps'], h['seconds'], h['eval_return'])
                        for h in result.get('history', ())]
  if task.threshold is None:
    _set_budget_results(run, run.extra['curve'])
    return run
  run.solved = bool(result['solved'])
  run.seconds = result['seconds']
  run.env_steps = result['env_steps']
  run.eval_return = result['eval_return']
  run.evals = result['evals']
  if not run.solved:
    run.note = f'not solved (stopped by {result["stopped_by"]})'
  return run


# -- Report -----------------------------------------------------------------------------


def _fmt_s(x: Optional[float]) -> str:
  if x is None:
    return '-'
  return 'unsolved' if math.isinf(x) else f'{x:.1f}'


def _fmt_steps(x: Optional[int]) -> str:
  return '-' if x is None else f'{x:,}'


def _row(run: Optional[Run]) -> str:
  if run is None:
    return ''
  solved = 'yes' if run.solved else 'NO'
  return (f'{_fmt_s(run.seconds):>8} {_fmt_steps(run.env_steps):>10} {solved:>6} '
          f'{run.evals if run.evals is not None else "-":>5} '
          f'{run.process_seconds:7.1f} {run.load_start:5.2f}->{run.load_end:<5.2f}')


def _title(algo: str, judged_on: str) -> str:
  task = ALGOS[algo]
  return (f'{algo} on {task.env} ({judged_on}): tfrl learners/configs/{task.config}.gin' +
          (f' vs {peer_name(task)}' if task.peer else ' (no SB3 peer)'))


def _notes(runs: List[Run]) -> List[str]:
  return [f'  note: {run.side} seed {run.seed}: {run.note}' for run in runs if run.note]


def report(algo: str, tfrl_runs: List[Run], peer_runs: List[Run]) -> List[str]:
  """The table of a task, by how it is judged (time to solve, or budgets)."""
  if ALGOS[algo].threshold is None:
    return report_budgets(algo, tfrl_runs, peer_runs)
  return report_time_to_solve(algo, tfrl_runs, peer_runs)


def _seed_table(head: str, row, tfrl_runs: List[Run], peer_runs: List[Run]) -> List[str]:
  """The header and one line per seed, tfrl's run beside SB3's, then the runs' notes."""
  lines = [f'{"seed":<6} tfrl {head}' + (f'  | SB3 {head}' if peer_runs else '')]
  by_seed = {r.seed: r for r in peer_runs}
  for run in tfrl_runs:
    line = f'{run.seed:<6}      {row(run)}'
    if peer_runs:
      line += f'  |     {row(by_seed.get(run.seed))}'
    lines.append(line)
  return lines + _notes(tfrl_runs + peer_runs)


def report_time_to_solve(algo: str, tfrl_runs: List[Run],
                         peer_runs: List[Run]) -> List[str]:
  lines = [_title(algo, f'threshold {ALGOS[algo].threshold:g}')]
  head = f'{"s":>8} {"env steps":>10} {"solved":>6} {"evals":>5} {"proc s":>7} {"load 1m":>12}'
  lines += _seed_table(head, _row, tfrl_runs, peer_runs)
  for run in peer_runs:
    if 'eval_seconds' in run.extra:
      lines.append(f'  SB3 seed {run.seed}: {run.extra["eval_seconds"]:.1f} s of the '
                   f'{_fmt_s(run.seconds)} s in evaluation')
  solved = [f'{sum(r.solved for r in runs)}/{len(runs)}'
            for runs in (tfrl_runs, peer_runs)]
  lines.append(f'seeds solved: tfrl {solved[0]}' +
               (f', SB3 {solved[1]}' if peer_runs else ''))
  return lines


def _fmt_return(x: Optional[float]) -> str:
  return '-' if x is None else f'{x:.2f}' if abs(x) < 10 else f'{x:.1f}'


def _steps_per_s(run: Run) -> Optional[float]:
  return run.env_steps / run.seconds if run.env_steps and run.seconds else None


def _budget_row(run: Optional[Run], task: Task) -> str:
  if run is None:
    return ''
  curve = run.extra.get('curve') or []
  at_steps = ''.join(f' {_fmt_return(summary.return_at(curve, n)):>9}'
                     for n in task.env_step_budgets)
  rate = _steps_per_s(run)
  return (f'{_fmt_return(run.eval_return):>9}{at_steps} {_fmt_steps(run.env_steps):>10} '
          f'{"-" if rate is None else f"{rate * task.frames_per_step:,.0f}":>9} '
          f'{_fmt_s(run.seconds):>7} {run.load_start:5.2f}->{run.load_end:<5.2f}')


def _steps_label(task: Task, env_steps: int) -> str:
  """'40,000 env steps', or for Atari '2,000,000 frames'."""
  if task.frames_per_step > 1:
    return f'{env_steps * task.frames_per_step:,} frames'
  return f'{env_steps:,} env steps'


def report_budgets(algo: str, tfrl_runs: List[Run], peer_runs: List[Run]) -> List[str]:
  """Per seed: the return reached at the wall-clock budget and at each env-step budget
  (frames for Atari); env steps (frames) per second of training."""
  task = ALGOS[algo]
  what = 'training games\' mean score' if task.returns == 'train' else 'eval return'
  budgets = ', '.join([f'{FLAGS.budget_seconds:g} s of training'] +
                      [_steps_label(task, n) for n in task.env_step_budgets])
  lines = [_title(algo, f'{what} after {budgets}')]
  rate = 'frames/s' if task.frames_per_step > 1 else 'steps/s'
  at_steps = ''.join(f' {"@" + _short(n * task.frames_per_step):>9}'
                     for n in task.env_step_budgets)
  head = (f'{"return":>9}{at_steps} {"env steps":>10} {rate:>9} {"s":>7} '
          f'{"load 1m":>12}')
  return lines + _seed_table(head, lambda run: _budget_row(run, task), tfrl_runs,
                             peer_runs)


def _short(n: int) -> str:
  """50000 -> '50k', 2000000 -> '2M': a column's head."""
  return f'{n / 1e6:g}M' if n >= 1_000_000 else f'{n / 1e3:g}k'


def wait_while_paused() -> None:
  """Holds the next run while --pause_file exists, saying so once."""
  if not FLAGS.pause_file or not os.path.exists(FLAGS.pause_file):
    return
  print(f'  paused: {FLAGS.pause_file} exists ...', flush=True)
  while os.path.exists(FLAGS.pause_file):
    time.sleep(5)
  print('  resumed', flush=True)


def _settings() -> summary.Settings:
  return summary.Settings(FLAGS.statistic, FLAGS.confidence, FLAGS.bootstrap_resamples,
                          FLAGS.bootstrap_seed)


def plot_curves(algo: str, tfrl_runs: List[Run], peer_runs: List[Run]) -> None:
  """Writes --curves_dir/solve_time_<algo>.png: both sides' central curves over seeds
  with their bands, against env steps and against seconds."""
  os.makedirs(FLAGS.curves_dir, exist_ok=True)
  task = ALGOS[algo]
  png = curves.plot(
      os.path.join(FLAGS.curves_dir, f'solve_time_{algo}.png'),
      f'{algo} on {task.env}: tfrl {task.config}.gin' + (
          f' vs {peer_name(task)}' if peer_runs else ''),
      {'tfrl': [r.extra.get('curve', []) for r in tfrl_runs],
       **({'SB3': [r.extra.get('curve', []) for r in peer_runs]} if peer_runs else {})},
      task.threshold,
      y_label='training games\' mean score' if task.returns == 'train' else
      'eval return', **dataclasses.asdict(_settings()))
  print(f'  curves: {png}', flush=True)


def seeds_for(algo: str) -> List[int]:
  """The seeds a task runs: --seeds where given, else 0 .. Task.seeds - 1."""
  if FLAGS.seeds:
    return [int(s) for s in FLAGS.seeds]
  return list(range(ALGOS[algo].seeds))


def finish(results: List[Tuple[str, List[Run], List[Run]]], header: dict) -> None:
  """Prints each task's per-seed table, then one markdown table of every task's
  central values with their intervals (docs/results/ shows it); writes --summary_json and,
  with --curves_dir, the curves.

  Args:
    results: (algo, tfrl's runs, the peer's runs) per task.
    header: what was run, recorded in the JSON.
  """
  settings, summaries = _settings(), []
  for algo, tfrl_runs, peer_runs in results:
    task = ALGOS[algo]
    if FLAGS.curves_dir:
      plot_curves(algo, tfrl_runs, peer_runs)
    print()
    print('\n'.join(report(algo, tfrl_runs, peer_runs)))
    summaries.append(summary.summarize(
        algo, task, peer_name(task) if peer_runs else None, tfrl_runs, peer_runs,
        FLAGS.budget_seconds, settings))
  print()
  print(f'Summary: {stats.NAMES[settings.statistic]} over seeds, '
        f'{settings.confidence:.0%} percentile bootstrap intervals ({settings.resamples:,} resamples, seed {settings.seed}); '
        'a time or env steps to a target is "never" where too few seeds reached it')
  print('\n'.join(summary.markdown(summaries, settings)))
  if FLAGS.summary_json:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.summary_json)), exist_ok=True)
    summary.write_json(FLAGS.summary_json, summaries, settings, header)
    print(f'Summary written to {os.path.abspath(FLAGS.summary_json)}')


def report_from_json(path: str) -> None:
  """Reports the runs recorded in `path` (one JSON Run a line), in the order of
  --algos; a run that is missing (an interrupted series) is just absent."""
  with open(path) as f:
    runs = [Run(**json.loads(line)) for line in f if line.strip()]
  results = []
  for algo in FLAGS.algos:
    tfrl_runs = [r for r in runs if r.algo == algo and r.side == 'tfrl']
    peer_runs = [r for r in runs if r.algo == algo and r.side != 'tfrl']
    if tfrl_runs:
      results.append((algo, tfrl_runs, peer_runs))
  finish(results, {'report_from': os.path.abspath(path), 'argv': sys.argv,
                   'budget_seconds': FLAGS.budget_seconds})


def planned_runs(seeds: dict, with_peer: bool) -> List[Tuple[str, int, str]]:
  """(algo, seed, side) of every run, in the order they start."""
  planned = []
  for algo in FLAGS.algos:
    for seed in seeds[algo]:
      # Alternate which side goes first, so a change in the machine's load over time
      # does not always fall on the same side.
      order = ['tfrl', 'SB3'] if seed % 2 == 0 else ['SB3', 'tfrl']
      planned += [(algo, seed, side) for side in order
                  if (side == 'tfrl' and not FLAGS.skip_tfrl) or
                  (side != 'tfrl' and with_peer and ALGOS[algo].peer)]
  return planned


def run_one(algo: str, seed: int, side: str, cpu: Optional[int] = None) -> Run:
  """One side's run; with `cpu`, pinned to it."""
  run = run_tfrl(algo, seed, cpu) if side == 'tfrl' else run_peer(algo, seed, cpu)
  run.extra['training_cap_seconds'] = _training_cap(ALGOS[algo])
  if cpu is not None:
    run.extra['cpu'] = cpu
  print(f'  {algo} seed {seed} {run.side}: solved={run.solved} '
        f'seconds={_fmt_s(run.seconds)} env_steps={_fmt_steps(run.env_steps)} '
        f'evals={run.evals} proc={run.process_seconds:.1f} s '
        f'load {run.load_start:.2f}->{run.load_end:.2f}'
        + (f' cpu {cpu}' if cpu is not None else '')
        + (f' ({run.note})' if run.note else ''), flush=True)
  return run


def run_all(planned: List[Tuple[str, int, str]], json_out) -> List[Run]:
  """Runs `planned`, one at a time or --jobs at once (each on a CPU of its own, the
  next run starting on the CPU the last one freed); each run goes to `json_out` as it
  ends."""
  lock = threading.Lock()
  free_cpus = queue.Queue()  # a run takes a CPU from here and gives it back
  for cpu in sorted(os.sched_getaffinity(0))[:FLAGS.jobs] if FLAGS.jobs > 1 else [None]:
    free_cpus.put(cpu)

  def start(job):
    cpu = free_cpus.get()
    try:
      run = run_one(*job, cpu=cpu)
    finally:
      free_cpus.put(cpu)
    with lock:
      if json_out:
        json_out.write(json.dumps(dataclasses.asdict(run)) + '\n')
        json_out.flush()
    return run

  runs = []
  with concurrent.futures.ThreadPoolExecutor(max(1, FLAGS.jobs)) as pool:
    futures = []
    for job in planned:
      wait_while_paused()
      if FLAGS.jobs <= 1:
        runs.append(start(job))
        continue
      futures.append(pool.submit(start, job))
      # Do not queue ahead of the pool: the next run starts when a CPU is free, so a
      # --pause_file set meanwhile holds it.
      while sum(not f.done() for f in futures) >= FLAGS.jobs:
        time.sleep(1)
    runs += [f.result() for f in futures]
  return runs


def main(argv):
  del argv
  common.check_choices('algos', FLAGS.algos, tuple(ALGOS))
  if FLAGS.env_step_budgets:
    budgets = tuple(int(n) for n in FLAGS.env_step_budgets)
    for algo in FLAGS.algos:
      ALGOS[algo] = dataclasses.replace(ALGOS[algo], env_step_budgets=budgets)
  if FLAGS.report_from:
    report_from_json(FLAGS.report_from)
    return
  if FLAGS.jobs > len(os.sched_getaffinity(0)):
    raise app.UsageError(f'--jobs={FLAGS.jobs} is more than the '
                         f'{len(os.sched_getaffinity(0))} CPUs this process may use')
  with_peer = not FLAGS.skip_peer and any(ALGOS[a].peer for a in FLAGS.algos)
  if with_peer:
    ensure_peer_venv()
  git = subprocess.run(['git', 'describe', '--always', '--dirty'], cwd=REPO,
                       capture_output=True, text=True).stdout.strip()
  date = f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC'
  seeds = {algo: seeds_for(algo) for algo in FLAGS.algos}
  header = [
      f'Time to solve: algos={",".join(FLAGS.algos)} seeds=' +
      (','.join(FLAGS.seeds) if FLAGS.seeds else "each task's own (Task.seeds)") +
      f', {os.cpu_count()} CPUs, cap {FLAGS.max_seconds:g} s of training per run, '
      f'budget {FLAGS.budget_seconds:g} s for the tasks without a threshold',
      f'  date: {date}; tfrl at {git}; ' +
      (f'{FLAGS.jobs} runs at a time, each pinned to one CPU' if FLAGS.jobs > 1 else
       'one run at a time, on every CPU'),
  ]
  if with_peer:
    contrib = any(ALGOS[a].peer in CONTRIB_PEERS for a in FLAGS.algos)
    header.append(f'  peer venv: {peer_versions(contrib)}; torch threads: '
                  f'{FLAGS.peer_torch_threads or "default (one per core)"}')
  header.append(common.load_line('start'))
  for line in header:
    print(line, flush=True)
  json_out = open(FLAGS.json_out, 'a') if FLAGS.json_out else None
  runs = run_all(planned_runs(seeds, with_peer), json_out)
  results = [(algo, [r for r in runs if r.algo == algo and r.side == 'tfrl'],
              [r for r in runs if r.algo == algo and r.side != 'tfrl'])
             for algo in FLAGS.algos]
  print(common.load_line('end'))
  if FLAGS.skip_tfrl:  # nothing to compare here: the runs are in --json_out
    if json_out:
      json_out.close()
    return
  finish(results, {'date': date, 'git': git, 'argv': sys.argv, 'seeds': seeds,
                   'cpus': os.cpu_count(), 'max_seconds': FLAGS.max_seconds,
                   'budget_seconds': FLAGS.budget_seconds,
                   'peer_torch_threads': FLAGS.peer_torch_threads, 'jobs': FLAGS.jobs})
  if json_out:
    json_out.close()


if __name__ == '__main__':
  app.run(main)

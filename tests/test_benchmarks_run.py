"""Every script in benchmarks/ runs, for a second or so, with smoke-sized flags.

The benchmarks are absl apps with module-level flags that nothing else imports, so a
function that moved or was renamed under them (as `process.die_with_parent` once did)
broke them only for the next person to run one. Here each runs as `python script.py
...` would (a fork of the tests' preloaded process, tests/python_runs.py), two at a
time (the machine's two cores), and must exit 0 and print its figure. The helper
modules that the scripts import (common, curves, stats, summary, tasks; task_curves
draws in both task scripts' runs, pbt_criterion judges pbt_lunarlander's) are imported
together in one more run; a new script in
benchmarks/ must get a smoke run here (`test_every_script_has_a_smoke_run`).

The peers' SB3 venv (benchmarks/peers) is never built: solve_time.py and startup.py
run with --skip_peer, and scaling.py measures tfrl only.
"""
import concurrent.futures
import dataclasses
import os
import re
import subprocess
import sys
import time
from typing import Dict, List

import pytest

import python_runs  # tests/python_runs.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(REPO, 'benchmarks')
HELPERS = ('common', 'curves', 'd3rlpy_data', 'pbt_criterion', 'plain_play', 'stats', 'summary',
           'task_curves', 'tasks', 'tfrl_leaves')
TIMEOUT_S = 300  # one script, on a loaded 2-core machine
# train_eval runs of a few train steps, for solve_time.py and startup.py.
TINY_TRAIN_EVAL = [f'--tfrl_gin_bindings={b}' for b in (
    'Experiment.num_train_steps=64', 'Experiment.eval_interval=32',
    'Experiment.num_eval_episodes=1', 'Experiment.initial_collect_steps=64')]
SMOKE_ARGS: Dict[str, List[str]] = {
    'atari_throughput': ['--paths=raw,raw-envpool', '--seconds=0.5', '--rounds=1'],
    'collect_throughput': ['--paths=tfrl,raw', '--seconds=0.5', '--num_envs=4'],
    'learner_throughput': ['--paths=tfrl,ceiling,tfrl-autotune', '--seconds=0.3', '--rounds=1',
                           '--iterations=4', '--small_iterations=2', '--fill_steps=8'],
    'pixel_bytes': ['--env_steps=64', '--num_envs=4', '--unroll_length=4'],
    # One run of 128 train steps whose first evaluation meets a target any policy
    # reaches, confirmed on 2 episodes; its export plays 4 fresh ones in a plain client.
    'demo_plays': ['--seeds=0', '--episodes=4', '--target=0',
                   '--gin_bindings=Experiment.num_train_steps=64,Experiment.eval_interval=64,'
                   'Experiment.num_eval_episodes=1,Experiment.initial_collect_steps=64,'
                   'Experiment.target_return=0.0,Experiment.num_confirm_episodes=2'],
    'ppo_compile': ['--epochs=1'],
    # One seed, two train steps: four train_eval processes (two per mode).
    'determinism': ['--seeds=0', '--train_steps=2', '--eval_episodes=1'],
    'layer_norm': ['--seconds=0.1', '--rounds=1', '--iterations=2', '--batch=16'],
    'reliability': ['--only=eval missing saved_model_dir'],
    'replay_independence': ['--steps=16', '--buffers=128', '--seconds=0.2', '--rounds=1',
                            '--sample_batches=2'],
    # The window must see two variable pushes on a loaded machine: one per 16 train steps
    # (the config's 128 took a 4 s window, the trainer and the collector busy all of it).
    'scaling': ['--systems=tfrl', '--configs=1c+trainer', '--seconds=2', '--settle_s=0',
                '--grace_s=10', '--ready_timeout_s=240',
                '--tfrl_gin_bindings=Experiment.train_steps_per_iteration=16'],
    # Two runs at once, each pinned to a CPU (--jobs): the path the long tasks take.
    'solve_time': ['--skip_peer', '--algos=dqn', '--seeds=0,1', '--jobs=2',
                   f'--tfrl_python={sys.executable}', *TINY_TRAIN_EVAL],
    'startup': ['--skip_peer', '--algos=dqn', '--seeds=0',
                f'--tfrl_python={sys.executable}', *TINY_TRAIN_EVAL],
    # One timed start-up of make demo's config, stopped at its first train step.
    'startup_phases': ['--runs=1'],
    # Compares the committed pages with what the recorded runs make; writes nothing.
    'results_pages': ['--check'],
    # Both ways of running three tasks at once, one train step each: 3 envs (one per task)
    # in the one-process job and in each of the launched run's 3 collectors (these bindings
    # come after --launch_num_envs'), a batch of 3 unrolls (96 env steps), and a queue of
    # two batches, which keeps the launched collectors from running thousands of env steps
    # ahead of the trainer's one step. What is left is the programs' start-up and saves.
    'multi_task': ['--seeds=0', '--timeout_s=240', '--launch_stop_grace_s=120',
                   '--gin_bindings=Experiment.num_train_steps=1,Experiment.eval_interval=1,'
                   'Experiment.num_eval_episodes=1,Experiment.num_envs=3,'
                   'Experiment.batch_size=3,SequenceQueue.queue_capacity=6'],
    # CLEAR through all three tasks: 6 train steps of 128 env steps each (4 envs' 32-step
    # unrolls; batches of 4 fresh and 4 replayed), a task switch every 128, an evaluation
    # of the three every 2 (the impala_clear notebook's test takes both configs through
    # the sequence).
    'task_sequence': ['--seeds=0', '--algos=clear', '--gin_bindings=Experiment.task_env_steps=128,'
                      'Experiment.num_train_steps=6,Experiment.eval_interval=2,'
                      'Experiment.num_eval_episodes=1,Experiment.num_envs=4,'
                      'Experiment.batch_size=8'],
    # A target any policy reaches at its first evaluation: the three stages run through.
    # LunarLander's mixed set from two DQN jobs of 8 train steps (targets any policy
    # reaches; one iteration of 8, not the config's 256), 2 episodes each, and tfrl's CQL on
    # it for 10 gradient steps, one evaluation of an episode (a barely trained greedy lander
    # can hover for 1,000 steps), the set's 4 episodes fed as 4 envs' streams (the feeder
    # wants an episode per env) (no d3rlpy).
    'offline': ['--seeds=0', '--skip_peer', '--datasets=lunarlander_mixed', '--grad_steps=10',
                '--eval_interval=10', '--half_return=-100000', '--trained_return=-100000',
                '--mixed_episodes=2', '--data_job_bindings=Experiment.num_train_steps=8,'
                'Experiment.train_steps_per_iteration=8,Experiment.initial_collect_steps=64,'
                'Experiment.eval_interval=8,Experiment.num_eval_episodes=1',
                '--train_bindings=Experiment.num_envs=4,'
                'Experiment.train_steps_per_iteration=10,Experiment.num_eval_episodes=1'],
    # One seed on a tiny HalfCheetah medium-replay set (made first, in the runs fixture):
    # 64 train steps on the dataset alone, then two iterations of 64 at one per env step;
    # evaluations (1,000-step episodes) at train steps 128 and 192.
    'hybrid': ['--seeds=0', '--jobs=1', '--env_steps=320', '--warmup_steps=256', '--utd=1',
               '--dataset_only_steps=64',
               '--eval_every=128', '--train_bindings=Experiment.num_eval_episodes=1'],
    # Two arms of PPO on CartPole (the script's default task, HalfCheetah, spends the run
    # in MuJoCo's 1,000-step evaluation episodes), one at a time: 2 train steps of 256 env
    # steps each, an evaluation after each, either side of the 400-step budget.
    'ablation': ['--algo=ppo', '--seeds=0', '--jobs=1', '--env_step_budgets=400',
                 '--budget_seconds=120', '--arm=config:',
                 '--arm=normalized: Experiment.normalize_reward = True',
                 f'--tfrl_python={sys.executable}',
                 *[f'--tfrl_gin_bindings={b}' for b in (
                     # An evaluation after each train step (about 252 env steps), so
                     # one falls either side of the 400-step budget.
                     'Experiment.num_train_steps=2', 'Experiment.eval_every_env_steps=200',
                     'Experiment.num_eval_episodes=1', 'create_ppo_agent.num_epochs=2')]],
    # A target any policy reaches (one episode of a policy trained 2 steps can fall below
    # -2,000): the tuned run reaches it at its first evaluation (train step 2, ~510 env
    # steps: B); each member reaches a ready point there too (every 256 env steps), so the
    # population's round (a report each, a copy) runs before it ends at the target.
    'pbt_lunarlander': ['--seeds=0', '--population_size=2', '--ready_interval=256',
                        '--gin_bindings=Experiment.eval_interval=2,Experiment.num_eval_episodes'
                        '=1,Experiment.target_return=-100000.0,Experiment.num_train_steps=8,'
                        'Experiment.num_confirm_episodes=1,'
                        # 256-step batches, 4 envs' 64-step unrolls (the config's are 16 x
                        # 1,024 steps).
                        'Experiment.num_envs=4,Experiment.batch_size=4,'
                        'SequenceQueue.unroll_length=64,'
                        'Experiment.collect_steps_per_iteration=64,'
                        'create_ppo_agent.num_minibatches=4'],
}
NUMBER = r'[0-9][0-9,]*(?:\.[0-9]+)?'
# A dataset's content checksum (tfrl.datasets.rlds.checksum), named where first printed
# and matched again (?P=checksum) wherever a run names the data it trained on.
CHECKSUM = r'(?P<checksum>[0-9a-f]{16})'
# What each run must print: a regex whose unnamed groups are figures that must be > 0.
EXPECTED = {
    'atari_throughput': rf'(?m)^raw\s+({NUMBER})\s+({NUMBER})\s+random actions(?:.*\n)*?'
                        rf'^raw-envpool\s+({NUMBER})\s+({NUMBER})\s+the raw path on EnvPool',
    'collect_throughput': rf'measured tfrl: ({NUMBER}) env steps/s.*\n.*'
                          rf'measured raw: ({NUMBER}) env steps/s',
    'learner_throughput': rf'(?m)^tfrl K=4\s+({NUMBER})\s(?:.*\n)*?'
                          rf'tfrl / ceiling \(K=4\)\s+({NUMBER})%(?:.*\n)*?'
                          rf'tfrl / tfrl-autotune\s+({NUMBER})%',
    'pixel_bytes': rf'(?m)^sequence \| ({NUMBER}) \| ({NUMBER}) \| .*\n(?:.*\n)*?'
                   rf'transition \| ({NUMBER}) \| ({NUMBER}) \|',
    'demo_plays': rf'(?m)^seed 0: confirmed at train step ({NUMBER}) .* \| confirmation '
                  rf'{NUMBER} over 2 \| fresh: mean ({NUMBER}) over 4, (?:.*\n)*?^exports at '
                  rf'the target on 4 fresh episodes: (1) of 1 runs',
    'ppo_compile': rf'(?m)^while loop\s+(4)\s.*\n^unrolled\s+(4)\s.*\n.*compile time: '
                   rf'({NUMBER})x',
    'layer_norm': rf'(?m)^layer: tfrl / keras ({NUMBER})x\n(?:.*\n)*?^sac: tfrl / keras '
                  rf'({NUMBER})x',
    'reliability': r'bad input \| eval missing saved_model_dir \| exit ([1-9]\d*) \| '
                   rf'({NUMBER}) s \| error: --saved_model_dir: No SavedModel',
    'replay_independence': rf'(?m)^whole\s+({NUMBER})\s.*\n(?:.*\n)*?'
                           rf'^writer, vector steps/s: whole ({NUMBER})',
    'scaling': rf'tfrl\s+\[1 collector \+ trainer\]: ({NUMBER}) env steps/s, '
               rf'({NUMBER}) train steps/s',
    # A one-episode evaluation after 32 train steps can reach 475 by chance (seed 0 did,
    # once): either verdict.
    'solve_time': rf'(?s)(?=.*dqn seed 1 tfrl: solved=(?:True|False) [^\n]* cpu [01]\b)'
                  rf'.*dqn seed 0 tfrl: solved=(?:True|False) seconds={NUMBER} '
                  rf'env_steps=({NUMBER}) evals=([1-9]\d*) proc=({NUMBER}) s '
                  rf'load {NUMBER}->{NUMBER} cpu [01]\b',
    'multi_task': rf'(?m)^one_process seed 0: target NOT reached \(exit 1\) at ({NUMBER}) '
                  rf'env steps, ([1-9]\d*) evaluations(?:.*\n)*?^launch      seed 0: target '
                  rf'NOT reached \(exit 0\) at ({NUMBER}) env steps(?:.*\n)*?^Curves: ',
    # The run's evaluations, its transfer figures (NaN when every evaluation falls in the
    # last phase, as here) and their median.
    'task_sequence': r'(?m)^clear   seed 0: ([1-9]\d*) evaluations.*\n'
                     r'^clear   seed 0: BWT (?:-?\d+\.\d{3}|nan), FWT (?:-?\d+\.\d{3}|nan); '
                     r'accuracy matrix(?:.*\n)*?^clear   BWT, median: (?:.*\n)*?^Curves: ',
    'offline': rf'(?m)^dataset lunarlander_mixed: .*, checksum {CHECKSUM}$(?:.*\n)*?'
               rf'^done lunarlander_mixed tfrl_cql seed 0: .* \(dataset checksum (?P=checksum)\)$'
               rf'(?:.*\n)*?^lunarlander_mixed \(LunarLander-v3\): ([1-9]\d*) episodes, ({NUMBER}) '
               rf'transitions, mean return -?{NUMBER}, checksum (?P=checksum)\n'
               rf'(?:.*\n)*?^  tfrl CQL .* \| ({NUMBER}) s\n(?:.*\n)*?^  Curves: ',
    'hybrid': rf'(?m)^dataset halfcheetah_medium_replay: .*checksum {CHECKSUM}$(?:.*\n)*?'
              rf'^done hybrid SAC seed 0: .* \(dataset checksum (?P=checksum)\)$(?:.*\n)*?'
              rf"online SAC's return at 150,000 env steps \(3 seeds, [^)]*\): ({NUMBER}) \["
              rf'(?:.*\n)*?  dataset halfcheetah_medium_replay, checksum (?P=checksum)\n'
              rf'(?:.*\n)*?  env steps to {NUMBER}, IQM \[95% CI\]: .*\(bar: <= [0-9,]+; '
              r'[01] of 1 seeds within it\)\n(?:.*\n)*?  seconds per run, median: '
              rf'({NUMBER})\n  Curves: ',
    # A starting point alone reaches the smoke run's target a few env steps either side of
    # B (the collectors' timing): any count of the two is a figure.
    'pbt_lunarlander': rf'(?m)^seed 0: budget B = ({NUMBER}) env steps per run .*\| sync '
                       rf'population: member \d at ({NUMBER}) env steps, \d+ copies, .* '
                       r'starting points alone: [0-2] of 2 reached within B(?:.*\n)*?'
                       r'^population best member / tuned config, env steps to the target: '
                       rf'({NUMBER})(?:.*\n)*?^Curves: ',
    'ablation': rf'(?m)^config seed 0 \(({NUMBER}) s\): ppo seed 0 tfrl: .*'
                rf'env_steps=({NUMBER})(?:.*\n)*?^\| config \| (1) \| -?{NUMBER} \['
                rf'(?:.*\n)*?^\| normalized \| (1) \| -?{NUMBER} \[',
    'results_pages': r'results pages: ([1-9]\d*) pages up to date',
    'startup': rf'dqn seed 0 tfrl: start-up ({NUMBER}) s, train inf s, process '
               rf'({NUMBER}) s; import tensorflow ({NUMBER}) s(?:.*\n)*tfrl start-up / import '
               rf'tensorflow: median ({NUMBER}) s / ({NUMBER}) s = ({NUMBER})x   target <= '
               r'1\.5x   (?:PASS|MISS)',
    'startup_phases': rf'(?m)^Learner compile\s+({NUMBER})\n(?:.*\n)*?^start-up \(from '
                      rf'/proc\)\s+({NUMBER})\n^import tensorflow alone\s+({NUMBER})\n'
                      rf'(?:.*\n)*?^floor \(.*\) / import tensorflow: {NUMBER} s / '
                      rf'{NUMBER} s = ({NUMBER})x',
    # Both modes repeat a PPO run of one seed exactly.
    'determinism': r'(?m)^deterministic=False median train .* (1) of 1 seeds repeated their '
                   r'run\n(?:.*\n)*^deterministic=True  median train .* (1) of 1 seeds '
                   rf'repeated their run\n^deterministic / default train seconds: ({NUMBER})x',
}


@dataclasses.dataclass
class Run:
  returncode: int
  output: str
  seconds: float


def _run(commands: List[List[str]], cwd: str, tmp_dir: str) -> Run:
  """Runs `python <args>` for each of `commands` in turn (the first that fails ends
  the run), each as a fork of the tests' preloaded process (tests/python_runs.py)."""
  # TMPDIR: what a script leaves in tempfile's directory goes with the test's tmp_path.
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1', TMPDIR=tmp_dir)
  start = time.monotonic()
  returncode, output = 0, ''
  for args in commands:
    try:
      # A fork server of its own: the Python programs a script runs (common.run_python)
      # skip TensorFlow's imports too.
      done = python_runs.run(args, timeout=TIMEOUT_S, env=env, cwd=cwd,
                             stderr_to_stdout=True, with_fork_server=True)
      returncode, output = done.returncode, output + done.stdout
    except subprocess.TimeoutExpired:
      returncode, output = -1, f'{output}timed out after {TIMEOUT_S} s: {args[:1]}'
    if returncode:
      break
  return Run(returncode, output, time.monotonic() - start)


@pytest.fixture(scope='module')
def runs(tmp_path_factory) -> Dict[str, Run]:
  """Every script's smoke run and the helpers' import, two at a time."""
  jobs = {name: ([[os.path.join(BENCHMARKS, f'{name}.py'), *args]], REPO)
          for name, args in SMOKE_ARGS.items()}
  # solve_time.py writes its summary under runs/ by default: into the tmp dir instead.
  summary = tmp_path_factory.mktemp('solve_time') / 'summary.json'
  jobs['solve_time'][0][0].append(f'--summary_json={summary}')
  # task_sequence.py writes its runs and its PNG under benchmarks/ by default: tmp too.
  sequences = tmp_path_factory.mktemp('task_sequence')
  jobs['task_sequence'][0][0].extend([f'--runs_dir={sequences}',
                                   f'--png={sequences}/curves.png'])
  multi_task = tmp_path_factory.mktemp('multi_task')
  jobs['multi_task'][0][0].extend([f'--runs_dir={multi_task}', f'--png={multi_task}/curves.png'])
  offline = tmp_path_factory.mktemp('offline')
  jobs['offline'][0][0].extend([f'--data_dir={offline}/data', f'--runs_dir={offline}/runs',
                             f'--json_out={offline}/runs.jsonl', f'--png_dir={offline}'])
  # hybrid.py trains on offline.py's medium-replay set: first a tiny one (SAC stopped at
  # its first evaluation, once each env has played one 1,000-step episode). The target
  # any policy reaches is confirmed on one episode, not the default 100 (100,000 MuJoCo
  # steps: 39 of the data job's 74 s).
  hybrid = tmp_path_factory.mktemp('hybrid')
  make_data = [os.path.join(BENCHMARKS, 'offline.py'), '--stages=datasets',
               '--datasets=halfcheetah_medium_replay', f'--data_dir={hybrid}/data',
               '--medium_return=-100000', '--data_job_bindings=Experiment.num_train_steps=64,'
               'Experiment.initial_collect_steps=4096,Experiment.eval_interval=64,'
               'Experiment.num_eval_episodes=1,Experiment.num_confirm_episodes=1']
  jobs['hybrid'][0][0].extend([f'--data_dir={hybrid}/data', f'--hybrid_out={hybrid}/runs.jsonl',
                               f'--hybrid_runs_dir={hybrid}/runs', f'--png={hybrid}/curves.png'])
  jobs['hybrid'][0].insert(0, make_data)
  jobs['ablation'][0][0].append(f'--out_dir={tmp_path_factory.mktemp("ablation")}')
  jobs['demo_plays'][0][0].append(f'--runs_dir={tmp_path_factory.mktemp("demo_plays")}')
  populations = tmp_path_factory.mktemp('pbt')
  jobs['pbt_lunarlander'][0][0].extend([f'--runs_dir={populations}',
                                     f'--png={populations}/curves.png'])
  jobs['helpers'] = ([['-c', f'import {", ".join(HELPERS)}']], BENCHMARKS)
  tmp_dir = str(tmp_path_factory.mktemp('benchmarks_tmp'))
  # The longest first, so that the two threads end together.
  order = ['multi_task', 'hybrid', 'pbt_lunarlander', 'offline', 'scaling', 'ablation',
           'layer_norm', 'atari_throughput', 'ppo_compile', 'determinism', 'task_sequence',
           'solve_time', 'replay_independence', 'demo_plays', 'startup', 'startup_phases',
           'learner_throughput', 'reliability',
           'pixel_bytes', 'collect_throughput', 'results_pages', 'helpers']
  assert sorted(order) == sorted(jobs)
  start = time.monotonic()
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = {name: pool.submit(_run, *jobs[name], tmp_dir) for name in order}
    results = {name: future.result() for name, future in futures.items()}
  print(f'benchmark smoke runs: {time.monotonic() - start:.1f} s in all; ' + ', '.join(
      f'{name} {run.seconds:.1f} s' for name, run in results.items()))
  return results


def test_every_script_has_a_smoke_run():
  scripts = {name[:-3] for name in os.listdir(BENCHMARKS) if name.endswith('.py')}
  assert scripts == set(SMOKE_ARGS) | set(HELPERS)
  assert set(EXPECTED) == set(SMOKE_ARGS)


# The bound on the tests that set the runs up: each command's TIMEOUT_S, two at a time
# (hybrid's job is two commands). Every command is already killed at its own bound, so
# this only backs those up; pytest's 900 s for a test with its fixtures is less than the
# runs' sum on a loaded machine (they took 744 s with one core kept busy).
RUNS_TIMEOUT_S = TIMEOUT_S * (len(SMOKE_ARGS) + 3) // 2


@pytest.mark.timeout(RUNS_TIMEOUT_S)
def test_helpers_import(runs):
  assert runs['helpers'].returncode == 0, runs['helpers'].output[-3000:]


@pytest.mark.timeout(RUNS_TIMEOUT_S)
@pytest.mark.parametrize('name', sorted(SMOKE_ARGS))
def test_benchmark_runs_and_prints_its_figures(runs, name):
  run = runs[name]
  assert run.returncode == 0, f'{name} exited {run.returncode}:\n{run.output[-3000:]}'
  found = re.search(EXPECTED[name], run.output)
  assert found, f'{name} printed no figure like {EXPECTED[name]!r}:\n{run.output[-3000:]}'
  named = set(found.re.groupindex.values())  # a checksum, not a figure
  figures = [float(group.replace(',', '')) for i, group in enumerate(found.groups(), 1)
             if i not in named]
  assert all(figure > 0 for figure in figures), (name, found.group(0))

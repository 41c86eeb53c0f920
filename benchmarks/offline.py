"""Offline RL on datasets tfrl makes itself, against d3rlpy on the same data.

Three stages (--stages, in this order):

  datasets  Makes each dataset under --data_dir (a dataset whose directory exists is
            kept), each also as <name>.npz for d3rlpy (benchmarks/d3rlpy_data.py):
            - halfcheetah_medium_replay: every episode SAC (sac_halfcheetah.gin)
              collected until its eval return reached --medium_return, about a third
              of its final return (D4RL's "medium-replay"; `Experiment.record_dir`):
              about 36,000 transitions, where D4RL's v2 set holds about 202,000 (the
              replay of a SAC trained to D4RL's medium policy), sized for this 2-core
              machine (about five minutes of SAC, against half an hour for 202,000 env
              steps). --medium_replay_env_steps=202000 records SAC's first ~202,000 env
              steps instead (docs/guides/datasets.md, "Making benchmark datasets");
            - halfcheetah_medium: --medium_episodes episodes of that SAC's collect
              (stochastic) policy (D4RL's "medium"): 200,000 transitions against
              D4RL's 1,000,000;
            - lunarlander_mixed: DQN (dqn_lunarlander.gin) trained to --half_return
              (half-trained) and, from scratch, to 200 (trained); --mixed_episodes
              episodes of the half-trained greedy policy and as many of the trained one
              with epsilon 0.3, merged (`tfrl.datasets.rlds.merge`): about 89,000
              transitions (D4RL has no LunarLander set).
            The data jobs run with --data_seed and `Experiment.deterministic = True`.
            Each dataset's description (data_dir/datasets.json, and the printed
            `dataset <name>: ...` line) ends with its content checksum
            (`tfrl.datasets.rlds.checksum`); every training run's --json_out line
            carries the checksum of the dataset it trained on (`dataset_checksum`), and
            the report prints it beside each dataset.
  train     Per dataset, algorithm and seed, --grad_steps gradient steps with an
            evaluation every --eval_interval: tfrl's CQL (cql_halfcheetah.gin,
            cql_lunarlander.gin) and, on HalfCheetah, IQL (iql_halfcheetah.gin), and
            d3rlpy's CQL and IQL (HalfCheetah) or DiscreteCQL (LunarLander), with the
            same networks, rates and batch size (DATASETS below feeds both sides). One JSON line per run goes to --json_out; a run
            already there on the dataset as it is now (its checksum) is not run again.
  report    Each dataset's mean episode return; each algorithm's return after
            --grad_steps (median and 95% bootstrap interval over seeds); tfrl's CQL
            against each peer and tfrl's IQL against d3rlpy's (difference of returns, ratio of wall clock, with
            intervals); curves against gradient steps and seconds (--png_dir).

d3rlpy runs in its own venv (peers/.venv-d3rlpy, from peers/d3rlpy_requirements.txt),
one torch thread, like tfrl's side pinned to one CPU where --jobs=2 runs two at once.

    .venv/bin/python benchmarks/offline.py --seeds=0,1,2 --jobs=2

Results: docs/results/, written by benchmarks/results_pages.py from the runs kept in
benchmarks/runs/ (a <name>.meta.json beside each says how they were made).
"""
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import common  # pylint: disable=g-bad-import-order (puts the repository on sys.path)
from absl import app
from absl import flags
import numpy as np

import curves  # benchmarks/curves.py
import d3rlpy_data  # benchmarks/d3rlpy_data.py
import stats  # benchmarks/stats.py

REPO = common.REPO
PEERS = os.path.join(REPO, 'benchmarks', 'peers')

flags.DEFINE_list('stages', ['datasets', 'train', 'report'], 'What to do, in order.')
flags.DEFINE_list('datasets', ['halfcheetah_medium', 'halfcheetah_medium_replay',
                               'lunarlander_mixed'], 'Datasets to make and train on.')
flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds of each algorithm on each dataset.')
flags.DEFINE_list('algos', ['tfrl_cql', 'tfrl_iql', 'd3rlpy_cql', 'd3rlpy_iql',
                            'd3rlpy_discrete_cql'],
                  'Algorithms to train (each on the datasets it applies to).')
flags.DEFINE_string('data_dir', os.path.join(REPO, 'runs', 'offline_data'),
                    'Where the datasets (and the jobs that make them) go.')
flags.DEFINE_string('runs_dir', os.path.join(REPO, 'runs', 'offline'),
                    'Where the training runs write (root_dirs, logs).')
flags.DEFINE_string('json_out', os.path.join(REPO, 'benchmarks', 'runs', 'offline.jsonl'),
                    'One line per training run (read by the report).')
flags.DEFINE_string('png_dir', os.path.join(REPO, 'benchmarks', 'curves'),
                    'Where offline_<dataset>.png goes (empty: no curves).')
flags.DEFINE_integer('grad_steps', 50_000, 'Gradient steps of each training run.')
flags.DEFINE_list('hidden', [], "Every network's hidden widths on both sides, e.g. 256,256 "
                  "(d3rlpy's default); empty: each dataset's own (DATASETS).")
flags.DEFINE_integer('eval_interval', 5_000, 'Gradient steps between evaluations.')
flags.DEFINE_integer('jobs', 2, 'Runs at a time (each pinned to one CPU when 2).')
flags.DEFINE_float('medium_return', 2_000.0, "SAC's eval return that ends the HalfCheetah "
                   "data job (tfrl's SAC ends near 6,000 at 150k env steps).")
flags.DEFINE_integer('medium_replay_env_steps', 0, "With N > 0, the HalfCheetah data job "
                     "runs to about N env steps instead of stopping at --medium_return "
                     "(202000: D4RL's halfcheetah-medium-replay size).")
flags.DEFINE_integer('medium_episodes', 200, 'Episodes of the medium policy.')
flags.DEFINE_float('half_return', 100.0, "The half-trained DQN's eval return.")
flags.DEFINE_float('trained_return', 200.0, "The trained DQN's eval return.")
flags.DEFINE_integer('mixed_episodes', 100, 'Episodes of each LunarLander policy.')
flags.DEFINE_integer('data_seed', 0, "The data jobs' Experiment.seed (their recordings' too).")
flags.DEFINE_list('data_job_bindings', [], 'Extra gin bindings for the data jobs.')
flags.DEFINE_list('train_bindings', [], "Extra gin bindings for tfrl's CQL runs.")
flags.DEFINE_bool('skip_peer', False, 'Train tfrl only (no d3rlpy venv).')
flags.DEFINE_integer('timeout_s', 4 * 3600, 'Longest a single job may take.')
FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A dataset, the env it is played on, and the settings both sides train with."""
  env: str
  tfrl_config: str
  peers: Tuple[str, ...]
  hidden: Tuple[int, ...]
  # The tfrl bindings that take `hidden` (d3rlpy: one encoder for every network).
  network_bindings: Tuple[str, ...]
  batch_size: int
  eval_episodes: int
  # (tfrl gin binding, d3rlpy_offline.py flag, value) for the other shared settings.
  shared: Tuple[Tuple[str, str, float], ...]
  # tfrl's algorithms on it (its CQL always).
  tfrl_algos: Tuple[str, ...] = ('tfrl_cql',)


_HALFCHEETAH = dict(
    env='HalfCheetah-v5', tfrl_config='cql_halfcheetah.gin',
    peers=('d3rlpy_cql', 'd3rlpy_iql'), hidden=(256, 256, 256),
    network_bindings=('create_cql_sac_agent.actor_fc_layer_params',
                      'create_cql_sac_agent.critic_joint_fc_layer_params'),
    batch_size=256, eval_episodes=10,
    shared=(('create_cql_sac_agent.actor_learning_rate', 'actor_lr', 1e-4),
            ('create_cql_sac_agent.critic_learning_rate', 'critic_lr', 3e-4),
            ('create_cql_sac_agent.alpha_learning_rate', 'temp_lr', 1e-4),
            ('create_cql_sac_agent.cql_alpha', 'conservative_weight', 5.0)),
    tfrl_algos=('tfrl_cql', 'tfrl_iql'))
DATASETS = {
    'halfcheetah_medium': Dataset(**_HALFCHEETAH),
    'halfcheetah_medium_replay': Dataset(**_HALFCHEETAH),
    'lunarlander_mixed': Dataset(
        env='LunarLander-v3', tfrl_config='cql_lunarlander.gin',
        peers=('d3rlpy_discrete_cql',), hidden=(256, 256),
        network_bindings=('create_dqn_agent.fc_layer_params',), batch_size=256,
        eval_episodes=20,
        shared=(('create_dqn_agent.learning_rate', 'learning_rate', 1e-4),
                ('create_dqn_agent.cql_alpha', 'alpha', 1.0),
                ('create_dqn_agent.target_update_period', 'target_update_interval', 1000))),
}
# tfrl's IQL: iql_halfcheetah.gin holds d3rlpy_offline.py's IQL settings; each run binds
# its networks' widths, its length (the actor's cosine) and the dataset's return range.
IQL_NETWORK_BINDINGS = ('create_iql_agent.actor_fc_layer_params',
                        'create_iql_agent.critic_joint_fc_layer_params',
                        'create_iql_agent.value_fc_layer_params')
# The peers each tfrl algorithm is compared with (None: every peer on the dataset).
PEERS_OF = {'tfrl_cql': None, 'tfrl_iql': ('d3rlpy_iql',)}
LABELS = {'tfrl_cql': 'tfrl CQL', 'tfrl_iql': 'tfrl IQL', 'd3rlpy_cql': 'd3rlpy CQL',
          'd3rlpy_iql': 'd3rlpy IQL',
          'd3rlpy_discrete_cql': 'd3rlpy DiscreteCQL'}


def hidden(dataset: str) -> Tuple[int, ...]:
  """The networks' hidden widths on `dataset`: --hidden, else the dataset's own."""
  return tuple(int(w) for w in FLAGS.hidden) or DATASETS[dataset].hidden


def ran_on(record: Dict[str, Any], checksum: str) -> bool:
  """Whether a run's record says it trained on the data of `checksum`.

  Args:
    record: a run's JSON line (offline.py's --json_out, hybrid.py's --hybrid_out).
    checksum: a dataset's content checksum (`dataset_checksum`).

  Returns:
    True only where the record's `dataset_checksum` is `checksum`: a record made before
    runs recorded one may have trained on other data (a remade dataset has another
    checksum), so it is not taken as a run on this one.
  """
  return record.get('dataset_checksum') == checksum


def same_run(record: Dict[str, Any], checksum: Optional[str]) -> bool:
  """Whether a --json_out line ran with these --grad_steps, widths (older: its own), for
  tfrl's side --train_bindings, and on the data of `checksum`.

  Args:
    record: a --json_out line.
    checksum: the content checksum of the dataset as it is now (`dataset_checksum`), to
      take only runs on that data (`ran_on`), as the train stage does to decide what
      is done; None takes runs on any data (the report, which names what each trained on).

  Returns:
    Whether the run is one of these settings (and data).
  """
  widths = tuple(record.get('hidden', DATASETS[record['dataset']].hidden))
  bindings_match = (record['algo'] != 'tfrl_cql'
                    or record.get('train_bindings', []) == FLAGS.train_bindings)
  return (record['grad_steps'] == FLAGS.grad_steps and widths == hidden(record['dataset'])
          and bindings_match and (checksum is None or ran_on(record, checksum)))


# -- Jobs --------------------------------------------------------------------------------


def run_logged(what: str, command: List[str], log_path: str, cpu: Optional[int] = None
               ) -> None:
  """Runs a command with its output in `log_path`.

  Args:
    what: the command in a few words, for errors.
    command: argv.
    log_path: where its stdout and stderr go.
    cpu: the CPU to pin it to (None: any).

  Raises:
    RuntimeError: it failed or outlasted --timeout_s (naming it and its log).
  """
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  open(log_path, 'w').close()
  try:
    if cpu is None and command[0] == sys.executable:
      done = common.run_python(command[1:], FLAGS.timeout_s, env, log_path, cwd=REPO)
    else:  # pinned: a new process under taskset
      with open(log_path, 'a') as log:
        done = subprocess.run(['taskset', '-c', str(cpu), *command], cwd=REPO, stdout=log,
                              stderr=subprocess.STDOUT, env=env, timeout=FLAGS.timeout_s,
                              check=False)
  except subprocess.TimeoutExpired as e:
    raise RuntimeError(f'{what} ran past {FLAGS.timeout_s} s; see {log_path}') from e
  if done.returncode:
    raise RuntimeError(f'{what} exited {done.returncode}; see {log_path}')


def data_job_bindings() -> List[str]:
  """What every data job binds first: --data_seed and deterministic ops, so that a
  remade dataset's checksum is the same where the job's data path allows (the replay
  jobs' do up to their first gradient step; docs/guides/datasets.md, "Checksums")."""
  return [f'Experiment.seed = {FLAGS.data_seed}', 'Experiment.deterministic = True']


def train_eval(root: str, gin_file: str, bindings: Sequence[str]) -> None:
  print(f'  training {os.path.relpath(root, REPO)} ({gin_file}) ...', flush=True)
  command = [sys.executable, '-m', 'learners.train_eval', f'--root_dir={root}',
             '--overwrite', f'--gin_file={gin_file}',
             *[f'--gin_bindings={b}' for b in [*data_job_bindings(), *bindings,
                                               *FLAGS.data_job_bindings]]]
  run_logged(f'train_eval {gin_file}', command, root + '.log')


def record(gin_file: str, policy_dir: str, out: str, episodes: int,
           noise: float = 0.0) -> None:
  print(f'  recording {episodes} episodes of {os.path.relpath(policy_dir, REPO)} into '
        f'{os.path.relpath(out, REPO)} ...', flush=True)
  command = [sys.executable, '-m', 'learners.eval', f'--gin_file={gin_file}',
             f'--root_dir={out}_recorder', f'--saved_model_dir={policy_dir}',
             f'--record_dir={out}', f'--num_episodes={episodes}', f'--record_noise={noise}',
             *[f'--gin_bindings={b}' for b in [f'Experiment.seed = {FLAGS.data_seed}',
                                               *FLAGS.data_job_bindings]]]
  run_logged(f'recording {policy_dir}', command, out + '.log')


# -- Datasets ----------------------------------------------------------------------------


def path(name: str) -> str:
  return os.path.join(FLAGS.data_dir, name)


SAC_WARMUP, SAC_ITERATION = 10_000, 64  # sac_halfcheetah.gin's random steps, train steps


def make_halfcheetah() -> None:
  """SAC until --medium_return: its collected episodes (medium-replay), then (where
  --datasets names it) its collect policy's episodes (medium)."""
  sac = path('sac_halfcheetah')
  if not os.path.exists(path('halfcheetah_medium_replay')):
    if FLAGS.medium_replay_env_steps > 0:
      # sac_halfcheetah.gin: 10,000 random env steps, then one gradient step per env step.
      length = ['Experiment.target_return = None', 'Experiment.num_train_steps = '
                f'{max(SAC_ITERATION, FLAGS.medium_replay_env_steps - SAC_WARMUP)}']
    else:
      length = [f'Experiment.target_return = {FLAGS.medium_return}',
                'Experiment.num_train_steps = 300000']
    train_eval(sac, 'sac_halfcheetah.gin', [
        *length, f"Experiment.record_dir = '{path('halfcheetah_medium_replay')}'"])
  if 'halfcheetah_medium' in FLAGS.datasets and not os.path.exists(path('halfcheetah_medium')):
    record('sac_halfcheetah.gin', os.path.join(sac, 'policies', 'collect_policy'),
           path('halfcheetah_medium'), FLAGS.medium_episodes)


def make_lunarlander() -> None:
  """A half-trained DQN's greedy episodes and a trained one's with epsilon 0.3, merged."""
  from tfrl.datasets import rlds  # pylint: disable=g-import-not-at-top
  if os.path.exists(path('lunarlander_mixed')):
    return
  parts = []
  for name, target, noise in (('half', FLAGS.half_return, 0.0),
                              ('trained', FLAGS.trained_return, 0.3)):
    job, part = path(f'dqn_lunarlander_{name}'), path(f'lunarlander_{name}')
    if not os.path.exists(part):
      train_eval(job, 'dqn_lunarlander.gin', [f'Experiment.target_return = {target}'])
      record('dqn_lunarlander.gin', os.path.join(job, 'policies', 'greedy_policy'), part,
             FLAGS.mixed_episodes, noise)
    parts.append(part)
  rlds.merge(parts, path('lunarlander_mixed'), metadata={
      'mix': f'{FLAGS.mixed_episodes} episodes of a DQN at {FLAGS.half_return} (greedy) '
             f'and of one at {FLAGS.trained_return} with epsilon 0.3'})


def describe_dataset(name: str) -> Dict[str, Any]:
  """Writes <name>.npz for d3rlpy and returns the dataset's size, returns and content
  checksum (`tfrl.datasets.rlds.checksum`).

  The .npz is rewritten every time: one kept from a dataset since remade would have
  d3rlpy train on the old data under the new data's checksum.
  """
  from tfrl.datasets import rlds  # pylint: disable=g-import-not-at-top
  arrays = rlds.read(path(name))
  np.savez(path(name) + '.npz', **d3rlpy_data.d3rlpy_arrays(arrays))
  returns = arrays.episode_returns()
  return {'name': name, 'episodes': arrays.num_episodes,
          'transitions': arrays.num_transitions, 'mean_return': float(np.mean(returns)),
          'min_return': float(np.min(returns)), 'max_return': float(np.max(returns)),
          'checksum': arrays.checksum()}


def make_datasets() -> Dict[str, Dict[str, Any]]:
  """Every --datasets' dataset and its description (also in data_dir/datasets.json)."""
  os.makedirs(FLAGS.data_dir, exist_ok=True)
  if any(name.startswith('halfcheetah') for name in FLAGS.datasets):
    make_halfcheetah()
  if 'lunarlander_mixed' in FLAGS.datasets:
    make_lunarlander()
  made = {name: describe_dataset(name) for name in FLAGS.datasets}
  every = {**described(), **made}  # the datasets made before stay described
  with open(path('datasets.json'), 'w') as f:
    json.dump(every, f, indent=1)
  for d in made.values():
    print(f"dataset {d['name']}: {d['episodes']} episodes, {d['transitions']:,} "
          f"transitions, mean return {d['mean_return']:.1f} (min {d['min_return']:.1f}, "
          f"max {d['max_return']:.1f}), checksum {d['checksum']}", flush=True)
  return made


# -- Training runs -----------------------------------------------------------------------

# A tfrl run in its own process: train_eval.run's evaluations (also whole, as `history`:
# env steps too) and its process seconds.
TFRL_RUN = textwrap.dedent('''
    import json, sys, time
    start = time.perf_counter()
    from learners import train_eval
    root, gin_file, bindings, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    job_start = time.perf_counter() - start
    result = train_eval.run(root, [gin_file], bindings, overwrite=True)
    curve = [(row['train_step'], job_start + row['seconds'], row['eval_return'])
             for row in result['history']]
    with open(out, 'w') as f:
      json.dump({'curve': curve, 'history': result['history'],
                 'seconds': time.perf_counter() - start}, f)
''')


def described() -> Dict[str, Dict[str, Any]]:
  """data_dir/datasets.json: each made dataset's size and returns ({} before any)."""
  if not os.path.exists(path('datasets.json')):
    return {}
  with open(path('datasets.json')) as f:
    return json.load(f)


_CHECKSUMS: Dict[str, str] = {}


def dataset_checksum(name: str) -> str:
  """The content checksum of the dataset `name` (`tfrl.datasets.rlds.checksum`): its
  datasets.json entry's, else (a description written before checksums) from its files.

  Raises:
    tfrl.datasets.rlds.DatasetError: the dataset is missing (make it first:
      --stages=datasets).
  """
  if name not in _CHECKSUMS:
    info = described().get(name, {})
    if 'checksum' in info:
      _CHECKSUMS[name] = info['checksum']
    else:
      from tfrl.datasets import rlds  # pylint: disable=g-import-not-at-top
      _CHECKSUMS[name] = rlds.checksum(path(name))
  return _CHECKSUMS[name]


def tfrl_run(dataset: str, algo: str, seed: int, root: str, cpu: Optional[int]
             ) -> Dict[str, Any]:
  spec = DATASETS[dataset]
  if algo == 'tfrl_iql':
    # iql_halfcheetah.gin: rewards times 1000 / the dataset's episode-return range (the
    # IQL authors' locomotion scale, as d3rlpy's reproduction), the actor's rate annealed
    # over the run's --grad_steps; both from the job.
    config, networks = 'iql_halfcheetah.gin', IQL_NETWORK_BINDINGS
    settings = []
  else:
    config, networks = spec.tfrl_config, spec.network_bindings
    settings = [*[f'{binding} = {value}' for binding, _, value in spec.shared],
                *FLAGS.train_bindings]
  bindings = [f"Experiment.dataset_dir = '{path(dataset)}'", f'Experiment.seed = {seed}',
              f'Experiment.num_train_steps = {FLAGS.grad_steps}',
              f'Experiment.eval_interval = {FLAGS.eval_interval}',
              f'Experiment.num_eval_episodes = {spec.eval_episodes}',
              f'Experiment.batch_size = {spec.batch_size}',
              *[f'{binding} = {hidden(dataset)}' for binding in networks], *settings]
  out = root + '.json'
  run_logged(f'{LABELS[algo]} on {dataset}, seed {seed}', [
      sys.executable, '-c', TFRL_RUN, root, config, json.dumps(bindings), out],
             root + '.log', cpu)
  with open(out) as f:
    return json.load(f)


def peer_run(algo: str, dataset: str, seed: int, root: str, cpu: Optional[int]
             ) -> Dict[str, Any]:
  spec = DATASETS[dataset]
  python = os.path.join(PEERS, '.venv-d3rlpy', 'bin', 'python')
  command = [python, os.path.join(PEERS, 'd3rlpy_offline.py'), f'--data={path(dataset)}.npz',
             f'--env={spec.env}', f'--algo={algo[len("d3rlpy_"):]}', f'--seed={seed}',
             f'--grad_steps={FLAGS.grad_steps}', f'--eval_interval={FLAGS.eval_interval}',
             f'--eval_episodes={spec.eval_episodes}',
             # One torch thread on one CPU, as tfrl's side pinned beside it.
             f'--torch_threads={1 if cpu is not None else 0}',
             f'--hidden={",".join(map(str, hidden(dataset)))}',
             f'--batch_size={spec.batch_size}',
             *[f'--{flag}={value}' for _, flag, value in spec.shared]]
  start = time.perf_counter()
  run_logged(f'{LABELS[algo]} on {dataset}, seed {seed}', command, root + '.log', cpu)
  rows = []
  with open(root + '.log') as log:
    for line in log:
      if line.startswith('{"grad_steps"'):
        rows.append(json.loads(line))
  return {'curve': [(r['grad_steps'], r['seconds'], r['return']) for r in rows],
          'seconds': time.perf_counter() - start}


def planned_runs() -> List[Tuple[str, str, int]]:
  """(dataset, algo, seed) of every run --datasets, --algos and --seeds ask for."""
  runs = []
  for dataset in FLAGS.datasets:
    algos = [*DATASETS[dataset].tfrl_algos,
             *([] if FLAGS.skip_peer else DATASETS[dataset].peers)]
    runs += [(dataset, algo, int(seed)) for algo in algos if algo in FLAGS.algos
             for seed in FLAGS.seeds]
  return runs


def read_runs() -> List[Dict[str, Any]]:
  if not os.path.exists(FLAGS.json_out):
    return []
  with open(FLAGS.json_out) as f:
    return [json.loads(line) for line in f if line.strip()]


def train_all() -> None:
  """Runs what --json_out lacks, --jobs at a time, each on a CPU of its own (jobs=2): a
  recorded run is done only on the data the dataset holds now (its checksum)."""
  planned = planned_runs()
  checksums = {dataset: dataset_checksum(dataset) for dataset, _, _ in planned}
  done = {(r['dataset'], r['algo'], r['seed']) for r in read_runs()
          if r['dataset'] in checksums and same_run(r, checksums[r['dataset']])}
  todo = [run for run in planned if run not in done]
  if not FLAGS.skip_peer and any(not algo.startswith('tfrl') for _, algo, _ in todo):
    common.ensure_venv(os.path.join(PEERS, '.venv-d3rlpy'),
                       os.path.join(PEERS, 'd3rlpy_requirements.txt'))

  def one_on(run, cpu):
    dataset, algo, seed = run
    root = os.path.join(FLAGS.runs_dir, f'{dataset}_{algo}_s{seed}')
    print(f'run {dataset} {algo} seed {seed} (cpu {cpu}) ...', flush=True)
    result = (tfrl_run(dataset, algo, seed, root, cpu) if algo.startswith('tfrl')
              else peer_run(algo, dataset, seed, root, cpu))
    record = {'dataset': dataset, 'dataset_checksum': checksums[dataset], 'algo': algo,
              'seed': seed, 'grad_steps': FLAGS.grad_steps, 'hidden': hidden(dataset),
              'train_bindings': FLAGS.train_bindings if algo == 'tfrl_cql' else [],
              'load': common.load_1min(), **result}
    final = record['curve'][-1][2] if record['curve'] else float('nan')
    print(f"done {dataset} {algo} seed {seed}: return {final:.1f} after "
          f"{FLAGS.grad_steps:,} gradient steps, {record['seconds']:.0f} s (dataset "
          f"checksum {record['dataset_checksum']})", flush=True)
    return record

  os.makedirs(os.path.dirname(FLAGS.json_out) or '.', exist_ok=True)
  failed = []
  for _, record, error in common.on_pinned_cpus(FLAGS.jobs, one_on, todo):
    if error:  # the others go on; the failure is named at the end
      print(f'FAILED: {error}', flush=True)
      failed.append(str(error))
      continue
    with open(FLAGS.json_out, 'a') as f:
      f.write(json.dumps(record) + '\n')
  if failed:
    raise RuntimeError(f'{len(failed)} of {len(todo)} runs failed: ' + '; '.join(failed))


# -- Report ------------------------------------------------------------------------------


def _cell(interval: stats.Interval, digits: int = 1, unit: str = '') -> str:
  return (f'{interval.point:,.{digits}f}{unit} [{interval.low:,.{digits}f}, '
          f'{interval.high:,.{digits}f}]')


def _d4rl_line(env: str, by_algo: Dict[str, List[Dict[str, Any]]], central: str
               ) -> Optional[str]:
  """Each algorithm's final returns as D4RL normalized scores, beside the returns (None
  for an env D4RL has no reference returns for). D4RL's reference returns are those of
  its gym v2 task, so on v5 the scores are a guide."""
  from tfrl.datasets import d4rl_scores  # pylint: disable=g-import-not-at-top (as rlds)
  if not d4rl_scores.has_reference(env):
    return None
  cells = []
  for algo, chosen in by_algo.items():
    scores = [d4rl_scores.normalized_score(env, r['curve'][-1][2]) for r in chosen]
    cells.append(f'{LABELS[algo]} {_cell(stats.interval(scores))}')
  return (f'  D4RL normalized score, {central} [95% CI] (reference returns of the v2 '
          f'task): ' + '; '.join(cells))


def report_dataset(dataset: str, info: Optional[Dict[str, Any]],
                   runs: List[Dict[str, Any]]) -> List[str]:
  """The dataset's lines: each algorithm's final return, and tfrl against each peer.

  Args:
    dataset: a key of DATASETS.
    info: its datasets.json entry (None: not described).
    runs: every --json_out line; the report takes those of these flags' settings and,
      where `info` names the dataset's checksum, on that data only.

  Returns:
    The lines to print.
  """
  central = stats.NAMES[stats.STATISTIC]
  lines = [f'{dataset} ({DATASETS[dataset].env})' + (
      f": {info['episodes']} episodes, {info['transitions']:,} transitions, mean return "
      f"{info['mean_return']:.1f}, checksum {info.get('checksum', 'not recorded')}"
      if info else ': (no datasets.json)')]
  # Where datasets.json names the data as it is now, only the runs on it: a run on an
  # earlier make of the dataset was run again on this one (train_all), and both of a
  # seed would count twice.
  checksum = info.get('checksum') if info else None
  by_algo, elsewhere = {}, 0
  for algo in [*DATASETS[dataset].tfrl_algos, *DATASETS[dataset].peers]:
    these = [r for r in runs if r['dataset'] == dataset and r['algo'] == algo
             and same_run(r, None) and r['curve']]
    chosen = sorted((r for r in these if checksum is None or ran_on(r, checksum)),
                    key=lambda r: r['seed'])
    elsewhere += len(these) - len(chosen)
    if chosen:
      by_algo[algo] = chosen
  if elsewhere:
    lines.append(f'  left out: {elsewhere} run{"s" * (elsewhere > 1)} of these settings '
                 'on other data or with no recorded checksum')
  trained_on = sorted({r.get('dataset_checksum', 'not recorded')
                       for chosen in by_algo.values() for r in chosen})
  if trained_on and (not info or trained_on != [info.get('checksum')]):
    lines.append(f"  the runs below trained on data of checksum {', '.join(trained_on)}"
                 + (f" (this dataset's: {info.get('checksum', 'not recorded')})" if info
                    else ''))
  widths = 'x'.join(map(str, hidden(dataset)))
  lines.append(f'  return after {FLAGS.grad_steps:,} gradient steps ({widths} networks), '
               f'{central} [95% CI] over seeds | per seed | process seconds, median'
               + (f"; tfrl CQL with {'; '.join(FLAGS.train_bindings)}" if FLAGS.train_bindings
                  else ''))
  for algo, chosen in by_algo.items():
    finals = [r['curve'][-1][2] for r in chosen]
    lines.append(f'  {LABELS[algo]:<20} {_cell(stats.interval(finals))} | '
                 + ', '.join(f"s{r['seed']} {f:.1f}" for r, f in zip(chosen, finals))
                 + f" | {np.median([r['seconds'] for r in chosen]):,.0f} s")
  scores = _d4rl_line(DATASETS[dataset].env, by_algo, central) if by_algo else None
  if scores:
    lines.append(scores)
  for ours_name in DATASETS[dataset].tfrl_algos:
    ours = by_algo.get(ours_name)
    if not ours:
      continue
    if info:
      above = sum(r['curve'][-1][2] > info['mean_return'] for r in ours)
      lines.append(f'  {LABELS[ours_name]} above the dataset mean ({info["mean_return"]:.1f}) '
                   f'on {above} of {len(ours)} seeds')
    for algo in PEERS_OF[ours_name] or DATASETS[dataset].peers:
      theirs = by_algo.get(algo)
      if not theirs:
        continue
      difference = stats.compare([r['curve'][-1][2] for r in ours],
                                 [r['curve'][-1][2] for r in theirs], 'difference')
      seconds = stats.compare([r['seconds'] for r in ours], [r['seconds'] for r in theirs],
                              'ratio')
      lines.append(f'  {LABELS[ours_name]} - {LABELS[algo]}: {_cell(difference)}; wall '
                   f'clock / {LABELS[algo]}: {_cell(seconds, 2, "x")}')
  if FLAGS.png_dir and by_algo:
    png = curves.plot(
        os.path.join(FLAGS.png_dir, f'offline_{dataset}.png'),
        f'{dataset}: offline, {FLAGS.grad_steps:,} gradient steps, {widths} networks',
        {LABELS[algo]: [r['curve'] for r in chosen] for algo, chosen in by_algo.items()},
        threshold=info['mean_return'] if info else None, step_label='gradient steps',
        threshold_label='dataset mean return')
    lines.append(f'  Curves: {png}')
  return lines


def report() -> None:
  runs = read_runs()
  print(common.machine_and_versions('tf-agents'), flush=True)
  for dataset in FLAGS.datasets:
    print('\n'.join(report_dataset(dataset, described().get(dataset), runs)), flush=True)


def main(argv):
  del argv
  common.check_choices('stages', FLAGS.stages, ('datasets', 'train', 'report'))
  common.check_choices('datasets', FLAGS.datasets, tuple(DATASETS))
  common.check_choices('algos', FLAGS.algos, tuple(LABELS))
  if 'datasets' in FLAGS.stages:
    make_datasets()
  if 'train' in FLAGS.stages:
    train_all()
  if 'report' in FLAGS.stages:
    report()


if __name__ == '__main__':
  app.run(main)

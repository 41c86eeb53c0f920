r"""Scaling with separate programs: collectors and a trainer around one Reverb server.

Measures, in one run, for tfrl's programs and for tf-agents' distributed layout (the
peer), each as separate OS processes talking to a Reverb server on localhost:

  env steps/s    transitions inserted into the experience table per second, read from
                 the server (`rate_limiter_info.insert_stats.completed`, through
                 `tfrl.replay.inserted_items`, times the transitions per item);
  train steps/s  the trainer's train step as it pushes it into the 'variables' table
                 (both systems push {policy variables, 'train_step'} there), timed
                 between the first and the last push seen inside the window;

in four configurations:

  1c+trainer  1 collector and the trainer
  2c+trainer  2 collectors and the trainer
  1c          1 collector alone (the trainer stopped; its last variables stay pushed)
  2c          2 collectors alone

The two systems:

  tfrl        `python -m learners.reverb_server`, `python -m learners.train` and
              `python -m learners.collect --task_id=i`, all with --gin_file
              (default dqn_cartpole.gin: Double DQN fc(256, 256), 5-step transitions,
              16 CartPole-v1 envs per collector, batch 64, 128 train steps per
              `Learner.run` and variables push, collectors pull every 50 vector steps)
              and the bindings in `TFRL_BINDINGS` (then any --tfrl_gin_bindings): no
              samples-per-insert limiter (so the rate limiter does not couple collection
              to training in this measurement), an unbounded train step budget, and no
              periodic checkpoints or policy exports inside the window.
  tf-agents   tf-agents' distributed layout (tf_agents/experimental/distributed/
              examples/sac: sac_reverb_server / sac_collect / sac_train), written here as
              the roles `--role=peer_server|peer_collect|peer_train` of this script and
              run as subprocesses of it:
              server   a `reverb.Server` with a uniform experience table ([2]-step
                       Trajectories, Fifo, MinSize(1), 100k items) and a size-1
                       'variables' table, as sac_reverb_server.py;
              collect  `tf_agents.train.actor.Actor` with a `PyTFEagerPolicy` of the
                       agent's collect policy on one `suite_gym` CartPole-v1 env,
                       `ReverbAddTrajectoryObserver(sequence_length=2, stride_length=1)`,
                       `ReverbVariableContainer.update` after every actor run of
                       --peer_variable_update_period steps (tf-agents' example pulls after
                       every single step, which would be slower still); task 0 first takes
                       the same 1,000 random steps as tfrl's task 0, as sac_collect.py;
              train    `tf_agents.train.learner.Learner` on
                       `ReverbReplayBuffer.as_dataset(sample_batch_size=64, num_steps=2)
                       .prefetch(3)` (as sac_train.py), pushing variables with
                       `ReverbVariableContainer.push` after every `run` of
                       --peer_train_iterations steps (default 128, as tfrl), no periodic
                       checkpoints.
              The agent is the same on both sides: the gin file's `create_dqn_agent`
              (a tf-agents DdqnAgent). Each tf-agents item holds one transition.

Method: both servers start first and stay up for the whole run (an idle Reverb server
costs next to no CPU). Configurations run in the order given, each for tfrl and then
the peer: the trainer (fresh root_dir, train step from 0) and collectors start as new
processes; once every collector says it acts with pushed variables, the trainer's train
step has risen twice (traced, training) and inserts grow, --settle_s passes, then the
window of --seconds is timed; then the collectors and the trainer are stopped (SIGTERM,
SIGKILL after --grace_s). The 1-minute load average is printed with every figure: on a
shared machine other jobs only ever slow a figure down.

The script prints a table (tfrl, peer and their ratio per configuration, and 2-vs-1
collector scaling per system) and exits 0; 1 if a configuration could not be measured.

Run (from the repository root):

    .venv/bin/python benchmarks/scaling.py
    .venv/bin/python benchmarks/scaling.py --seconds=15 --configs=1c+trainer,2c+trainer

Results: docs/results/, written by benchmarks/results_pages.py from the outputs kept in
benchmarks/runs/ (a run's output as printed, <name>.txt, beside its <name>.meta.json).
"""
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

# First: benchmarks/common.py puts the repository on sys.path and quiets TF's C++ logs.
import common  # pylint: disable=g-bad-import-order
import tfrl  # TensorFlow, tf-agents and Reverb without their start-up noise
from absl import app
from absl import flags
from absl import logging
import numpy as np
import portpicker
import reverb
import tensorflow as tf

from learners.configuration import config as config_lib
from learners.configuration.experiment import Experiment
from learners.processes import child_process
from learners.processes import process
import tfrl.replay

FLAGS = flags.FLAGS
CONFIGS = {  # name -> (collectors, with trainer)
    '1c+trainer': (1, True),
    '2c+trainer': (2, True),
    '1c': (1, False),
    '2c': (2, False),
}
CONFIG_LABELS = {'1c+trainer': '1 collector + trainer', '2c+trainer': '2 collectors + trainer',
                 '1c': '1 collector alone', '2c': '2 collectors alone'}
SYSTEMS = ('tfrl', 'tf-agents')
TFRL_BINDINGS = (
    'Experiment.samples_per_insert = None',
    'Experiment.num_train_steps = 1000000000',
    # Intervals must be >= 1 (learners/configuration/validation.py): past the run, so no
    # saves.
    'Experiment.checkpoint_interval = 1000000000',
    'Experiment.policy_checkpoint_interval = 1000000000',
)
ENV_ID = 'CartPole-v1'
VARIABLES_TABLE = 'variables'  # both systems' name for it
PEER_READY = 'PEER_COLLECTOR_READY'
TFRL_READY = 'acting with policy version'

flags.DEFINE_float('seconds', 30.0, 'Timed window per configuration and system.')
flags.DEFINE_list('configs', list(CONFIGS), f'Subset of {",".join(CONFIGS)}, in order.')
flags.DEFINE_list('systems', list(SYSTEMS), f'Subset of {",".join(SYSTEMS)}.')
flags.DEFINE_string('gin_file', 'dqn_cartpole.gin', 'The job config (both systems\' agent).')
flags.DEFINE_multi_string('tfrl_gin_bindings', [], "Extra gin bindings for tfrl's programs, "
                          'after those in TFRL_BINDINGS (a smoke run: fewer train steps per '
                          'variables push, so a short window sees two).')
flags.DEFINE_float('settle_s', 3.0, 'Seconds between "all ready" and the window.')
flags.DEFINE_float('ready_timeout_s', 300.0, 'How long programs get to start working.')
flags.DEFINE_float('grace_s', 30.0, 'SIGTERM to SIGKILL.')
flags.DEFINE_integer('peer_variable_update_period', 50,
                     'tf-agents collector: env steps per Actor.run between variable '
                     'pulls (tfrl pulls every 50 vector steps).')
flags.DEFINE_integer('peer_train_iterations', 128,
                     'tf-agents trainer: train steps per Learner.run (and push).')
flags.DEFINE_integer('peer_initial_collect_steps', 1000,
                     'tf-agents collector task 0: random steps first.')
flags.DEFINE_integer('replay_capacity', 100_000, 'tf-agents table capacity (items).')
flags.DEFINE_bool('keep_root_dir', False, 'Keep the temporary job dir (logs) at the end.')
# Internal: the peer programs.
flags.DEFINE_enum('role', 'bench', ['bench', 'peer_server', 'peer_collect', 'peer_train'],
                  'Internal: what this process runs.')
flags.DEFINE_integer('port', 0, 'Internal (peer_server): port.')
flags.DEFINE_string('address', None, 'Internal (peer roles): the Reverb server.')
flags.DEFINE_integer('task_id', 0, 'Internal (peer_collect): collector index.')
flags.DEFINE_string('root_dir', None, 'Internal (peer roles): job dir.')


# -- the peer programs (tf-agents' distributed layout) -------------------------------


def _peer_agent():
  """(env, train_step, agent, variables): the gin file's DQN agent on a suite_gym env."""
  from tf_agents.environments import suite_gym  # pylint: disable=g-import-not-at-top
  from tf_agents.experimental.distributed import reverb_variable_container
  from tf_agents.specs import tensor_spec
  from tf_agents.train.utils import train_utils

  config_lib.parse([FLAGS.gin_file])
  experiment = Experiment()
  env = suite_gym.load(ENV_ID)
  train_step = train_utils.create_train_step()
  agent = experiment.agent_fn(tensor_spec.from_spec(env.time_step_spec()),
                              tensor_spec.from_spec(env.action_spec()), train_step,
                              gamma=experiment.gamma)
  variables = {reverb_variable_container.POLICY_KEY: agent.collect_policy.variables(),
               reverb_variable_container.TRAIN_STEP_KEY: train_step}
  return env, train_step, agent, variables, experiment


def peer_server() -> None:
  """As sac_reverb_server.py: experience and variables tables, until SIGTERM."""
  from tf_agents.replay_buffers import reverb_replay_buffer  # pylint: disable=g-import-not-at-top
  from tf_agents.specs import tensor_spec

  env, _, agent, variables, _ = _peer_agent()
  env.close()
  # A checkpointer in the job dir (sac_reverb_server.py takes Reverb's default, a fresh
  # temporary directory that nobody removes); checkpoints are written only on request.
  checkpointer = reverb.checkpointers.DefaultCheckpointer(
      path=os.path.join(FLAGS.root_dir, 'reverb'))
  server = reverb.Server(tables=[
      reverb.Table(
          name=reverb_replay_buffer.DEFAULT_TABLE, sampler=reverb.selectors.Uniform(),
          remover=reverb.selectors.Fifo(), rate_limiter=reverb.rate_limiters.MinSize(1),
          max_size=FLAGS.replay_capacity, max_times_sampled=0,
          signature=tensor_spec.add_outer_dims_nest(
              tensor_spec.from_spec(agent.collect_data_spec), (2,))),
      reverb.Table(
          name=VARIABLES_TABLE, sampler=reverb.selectors.Uniform(),
          remover=reverb.selectors.Fifo(), rate_limiter=reverb.rate_limiters.MinSize(1),
          max_size=1, max_times_sampled=0,
          signature=tf.nest.map_structure(lambda v: tf.TensorSpec(v.shape, v.dtype),
                                          variables)),
  ], port=FLAGS.port, checkpointer=checkpointer)
  print(f'peer server on port {FLAGS.port}', flush=True)
  # Serves until SIGTERM/SIGINT, then stops the server cleanly, as tfrl's programs do.
  process.run_until_signal(lambda stop: stop.wait(), 'peer_server')
  server.stop()


def peer_collect() -> None:
  """As sac_collect.py: Actor + PyTFEagerPolicy + Reverb observer + variable container."""
  from tf_agents.experimental.distributed import reverb_variable_container  # pylint: disable=g-import-not-at-top
  from tf_agents.policies import py_tf_eager_policy
  from tf_agents.policies import random_py_policy
  from tf_agents.replay_buffers import reverb_replay_buffer
  from tf_agents.replay_buffers import reverb_utils
  from tf_agents.train import actor

  env, train_step, agent, variables, experiment = _peer_agent()
  env.seed(experiment.seed + 1000 * FLAGS.task_id)
  container = reverb_variable_container.ReverbVariableContainer(
      FLAGS.address, table_names=[reverb_variable_container.DEFAULT_TABLE])
  container.update(variables)  # blocks until the trainer's first push
  observer = reverb_utils.ReverbAddTrajectoryObserver(
      reverb.Client(FLAGS.address), table_name=reverb_replay_buffer.DEFAULT_TABLE,
      sequence_length=2, stride_length=1)
  if FLAGS.task_id == 0 and FLAGS.peer_initial_collect_steps > 0:
    actor.Actor(env, random_py_policy.RandomPyPolicy(env.time_step_spec(),
                                                     env.action_spec()),
                train_step, steps_per_run=FLAGS.peer_initial_collect_steps,
                observers=[observer]).run()
  collect_actor = actor.Actor(
      env, py_tf_eager_policy.PyTFEagerPolicy(agent.collect_policy, use_tf_function=True),
      train_step, steps_per_run=FLAGS.peer_variable_update_period,
      metrics=actor.collect_metrics(10),
      summary_dir=os.path.join(FLAGS.root_dir, 'train', str(FLAGS.task_id)),
      observers=[observer])
  print(f'{PEER_READY} task {FLAGS.task_id} at policy step {int(train_step.numpy())}',
        flush=True)
  while True:  # until SIGTERM (default action: the process ends)
    collect_actor.run()
    container.update(variables)


def peer_train() -> None:
  """As sac_train.py: Learner on ReverbReplayBuffer.as_dataset, pushing variables."""
  from tf_agents.experimental.distributed import reverb_variable_container  # pylint: disable=g-import-not-at-top
  from tf_agents.replay_buffers import reverb_replay_buffer
  from tf_agents.train import learner

  env, train_step, agent, variables, experiment = _peer_agent()
  env.close()
  container = reverb_variable_container.ReverbVariableContainer(
      FLAGS.address, table_names=[reverb_variable_container.DEFAULT_TABLE])
  container.push(variables)
  replay_buffer = reverb_replay_buffer.ReverbReplayBuffer(
      agent.collect_data_spec, sequence_length=2,
      table_name=reverb_replay_buffer.DEFAULT_TABLE, server_address=FLAGS.address)

  def experience_dataset_fn():
    return replay_buffer.as_dataset(sample_batch_size=experiment.batch_size,
                                    num_steps=2).prefetch(3)

  dqn_learner = learner.Learner(FLAGS.root_dir, train_step, agent, experience_dataset_fn,
                                checkpoint_interval=0,
                                summary_interval=experiment.summary_interval)
  print(f'peer trainer from train step {int(train_step.numpy())}', flush=True)
  while True:  # until SIGTERM
    dqn_learner.run(iterations=FLAGS.peer_train_iterations)
    container.push(variables)


# -- processes -----------------------------------------------------------------------


class Process:
  """One program, its output in a log file."""

  def __init__(self, name: str, argv: List[str], log_dir: str):
    self.name = name
    self.log_path = os.path.join(log_dir, f'{name}.log')
    self._log = open(self.log_path, 'a')
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1')
    self.popen = subprocess.Popen([sys.executable, '-u', *argv], cwd=common.REPO,
                                  env=child_process.child_env(env), stdout=self._log,
                                  stderr=subprocess.STDOUT)

  def alive(self) -> bool:
    return self.popen.poll() is None

  def log_text(self) -> str:
    with open(self.log_path, errors='replace') as f:
      return f.read()

  def tail(self, lines: int = 15) -> str:
    return ''.join(self.log_text().splitlines(keepends=True)[-lines:])

  def close(self):
    self._log.close()


def stop_processes(processes: List[Process], grace_s: float) -> None:
  """SIGTERM, then SIGKILL after `grace_s`: collectors first, then the rest.

  Like learners.launch's `Launcher.stop`, which is bound to the launcher's own job (its
  program names and log files) and orders the stop around the trainer's final save;
  here no save matters (the job dir is thrown away) and half the programs are
  tf-agents'.
  """
  groups = [[p for p in processes if 'collect' in p.name],
            [p for p in processes if 'collect' not in p.name]]
  for group in groups:
    for p in group:
      if p.alive():
        p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in group:
      try:
        p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        print(f'    {p.name} ignored SIGTERM for {grace_s:.0f} s: killing it', flush=True)
        p.popen.kill()
        p.popen.wait()
      p.close()


class MeasurementError(RuntimeError):
  pass


# -- the two systems -----------------------------------------------------------------


class System:
  """How to start one system's programs and read its counters."""
  name = ''
  collector_ready = ''

  def __init__(self, job_dir: str):
    self.job_dir = os.path.join(job_dir, self.name)
    self.log_dir = os.path.join(self.job_dir, 'logs')
    os.makedirs(self.log_dir, exist_ok=True)
    self.port = portpicker.pick_unused_port()
    self.address = f'127.0.0.1:{self.port}'
    self.server: Optional[Process] = None

  def server_argv(self) -> List[str]:
    raise NotImplementedError

  def trainer_argv(self, root_dir: str) -> List[str]:
    raise NotImplementedError

  def collector_argv(self, task_id: int) -> List[str]:
    raise NotImplementedError

  def transitions_inserted(self) -> int:
    raise NotImplementedError

  def start_server(self, timeout_s: float) -> None:
    self.server = Process('server', self.server_argv(), self.log_dir)
    deadline = time.monotonic() + timeout_s
    while True:
      if not self.server.alive():
        raise MeasurementError(f'{self.name} server exited:\n{self.server.tail()}')
      try:
        tfrl.replay.wait_for_server(self.address, timeout_s=2)
        return
      except tfrl.replay.ReplayServerUnreachableError:
        if time.monotonic() > deadline:
          raise MeasurementError(f'{self.name} server did not answer within '  # pylint: disable=raise-missing-from
                                 f'{timeout_s:.0f} s:\n{self.server.tail()}')

  def train_step(self) -> Optional[int]:
    """The last pushed train step (None before the first push)."""
    info = tfrl.replay.wait_for_server(self.address, timeout_s=10)
    if info[VARIABLES_TABLE].current_size == 0:
      return None  # sampling would block
    sample = next(reverb.Client(self.address).sample(
        VARIABLES_TABLE, num_samples=1, emit_timesteps=False,
        unpack_as_table_signature=True))
    # tf-agents' container inserts the scalar as a [1] tensor; tfrl's as a scalar.
    return int(np.asarray(sample.data['train_step']).reshape(-1)[0])


def tfrl_bindings() -> List[str]:
  return [*TFRL_BINDINGS, *FLAGS.tfrl_gin_bindings]


class TfrlSystem(System):
  name = 'tfrl'
  collector_ready = TFRL_READY

  def __init__(self, job_dir: str):
    super().__init__(job_dir)
    bindings = tfrl_bindings()
    config_lib.parse([FLAGS.gin_file], bindings)
    self.experiment = Experiment()
    self._gin = [f'--gin_file={FLAGS.gin_file}'] + [f'--gin_bindings={b}' for b in bindings]

  def server_argv(self):
    return ['-m', 'learners.reverb_server', f'--root_dir={self.job_dir}',
            f'--port={self.port}', '--checkpoint_interval_s=0', *self._gin]

  def trainer_argv(self, root_dir):
    return ['-m', 'learners.train', f'--root_dir={root_dir}',
            f'--reverb_address={self.address}', *self._gin]

  def collector_argv(self, task_id):
    return ['-m', 'learners.collect', f'--root_dir={self.job_dir}',
            f'--reverb_address={self.address}', f'--task_id={task_id}', *self._gin]

  def transitions_inserted(self):
    layout = self.experiment.layout
    return (tfrl.replay.inserted_items(self.address, layout.experience_table,
                                       timeout_s=10) * layout.env_steps_per_item)


class PeerSystem(System):
  name = 'tf-agents'
  collector_ready = PEER_READY

  def _role(self, role, *args):
    return [os.path.abspath(__file__), f'--role={role}', f'--gin_file={FLAGS.gin_file}',
            f'--replay_capacity={FLAGS.replay_capacity}',
            f'--peer_variable_update_period={FLAGS.peer_variable_update_period}',
            f'--peer_train_iterations={FLAGS.peer_train_iterations}',
            f'--peer_initial_collect_steps={FLAGS.peer_initial_collect_steps}', *args]

  def server_argv(self):
    return self._role('peer_server', f'--port={self.port}', f'--root_dir={self.job_dir}')

  def trainer_argv(self, root_dir):
    return self._role('peer_train', f'--address={self.address}', f'--root_dir={root_dir}')

  def collector_argv(self, task_id):
    return self._role('peer_collect', f'--address={self.address}', f'--task_id={task_id}',
                      f'--root_dir={self.job_dir}')

  def transitions_inserted(self):
    from tf_agents.replay_buffers import reverb_replay_buffer  # pylint: disable=g-import-not-at-top
    # One item of a [2]-step trajectory per transition.
    return tfrl.replay.inserted_items(self.address, reverb_replay_buffer.DEFAULT_TABLE,
                                      timeout_s=10)


# -- measuring -----------------------------------------------------------------------


@dataclasses.dataclass
class Result:
  system: str
  config: str
  env_rate: float = float('nan')
  train_rate: Optional[float] = None
  seconds: float = 0.0
  load_start: float = float('nan')
  load_end: float = float('nan')
  error: str = ''


def _check_alive(processes: List[Process]) -> None:
  for p in processes:
    if not p.alive():
      raise MeasurementError(f'{p.name} exited with code {p.popen.returncode}; last lines '
                             f'of {p.log_path}:\n{p.tail()}')


def _wait_ready(system: System, trainer: Optional[Process], collectors: List[Process],
                timeout_s: float) -> None:
  """Until every collector acts with pushed variables, the trainer trains, inserts grow."""
  deadline = time.monotonic() + timeout_s
  last_step, rises = None, 0
  processes = ([trainer] if trainer else []) + collectors
  while True:
    _check_alive(processes)
    if system.server is not None:
      _check_alive([system.server])
    if trainer is not None:
      step = system.train_step()
      if step is not None and last_step is not None and step > last_step:
        rises += 1
      last_step = step
    collectors_ready = all(system.collector_ready in p.log_text() for p in collectors)
    if collectors_ready and (trainer is None or rises >= 2):
      break
    if time.monotonic() > deadline:
      waiting = [p.name for p in collectors if system.collector_ready not in p.log_text()]
      if trainer is not None and rises < 2:
        waiting.append(f'trainer (train step {last_step}, rose {rises} times)')
      raise MeasurementError(f'not ready within {timeout_s:.0f} s: waiting for '
                             f'{", ".join(waiting)}')
    time.sleep(0.5)
  start = system.transitions_inserted()
  while system.transitions_inserted() <= start:
    _check_alive(processes)
    if time.monotonic() > deadline:
      raise MeasurementError('collectors are ready but no item was inserted')
    time.sleep(0.2)


def _ensure_variables(system: System) -> None:
  """Collectors alone need pushed variables: a trainer started and stopped pushes them."""
  if system.train_step() is not None:
    return
  print(f'    {system.name}: no variables pushed yet; starting a trainer to push them',
        flush=True)
  trainer = Process('trainer_prime', system.trainer_argv(
      os.path.join(system.job_dir, 'train_prime')), system.log_dir)
  try:
    deadline = time.monotonic() + FLAGS.ready_timeout_s
    while system.train_step() is None:
      _check_alive([trainer])
      if time.monotonic() > deadline:
        raise MeasurementError('the trainer pushed no variables in time')
      time.sleep(0.5)
  finally:
    stop_processes([trainer], FLAGS.grace_s)


def measure(system: System, config: str) -> Result:
  """Starts the configuration's programs, times the window, stops them."""
  num_collectors, with_trainer = CONFIGS[config]
  result = Result(system.name, config)
  processes: List[Process] = []
  try:
    if not with_trainer:
      _ensure_variables(system)
    trainer = None
    if with_trainer:
      trainer = Process(f'trainer_{config}', system.trainer_argv(
          os.path.join(system.job_dir, f'train_{config}')), system.log_dir)
      processes.append(trainer)
    collectors = [Process(f'collect_{config}_{i}', system.collector_argv(i), system.log_dir)
                  for i in range(num_collectors)]
    processes += collectors
    _wait_ready(system, trainer, collectors, FLAGS.ready_timeout_s)
    time.sleep(FLAGS.settle_s)

    result.load_start = common.load_1min()
    steps = []  # (time first seen, value) of each pushed train step
    inserted_start = system.transitions_inserted()
    start = time.monotonic()
    while time.monotonic() - start < FLAGS.seconds:
      if trainer is not None:
        step = system.train_step()
        if not steps or step != steps[-1][1]:
          steps.append((time.monotonic(), step))
      _check_alive(processes)
      time.sleep(0.25 if trainer is not None else 1.0)
    inserted_end = system.transitions_inserted()
    result.seconds = time.monotonic() - start
    result.load_end = common.load_1min()
    result.env_rate = (inserted_end - inserted_start) / result.seconds
    if trainer is not None:
      # Between the first and the last push seen inside the window (the first entry
      # is the value standing at the start, pushed at an unknown earlier time).
      pushes = steps[1:]
      if len(pushes) < 2:
        raise MeasurementError(f'the trainer pushed {len(pushes)} times in the window')
      (t0, s0), (t1, s1) = pushes[0], pushes[-1]
      result.train_rate = (s1 - s0) / (t1 - t0)
  except MeasurementError as e:
    result.error = str(e)
  finally:
    stop_processes(processes, FLAGS.grace_s)
  return result


# -- report --------------------------------------------------------------------------


def _fmt(x: Optional[float]) -> str:
  if x is None:
    return '-'
  return 'n/a' if x != x else f'{x:,.0f}'  # nan: failed


def _ratio(a: Optional[float], b: Optional[float]) -> str:
  if a is None or b is None or a != a or b != b or b == 0:
    return '-'
  return f'{a / b:.2f}x'


def _describe(r: Result) -> str:
  if r.error:
    return f'FAILED: {r.error}'
  train = '' if r.train_rate is None else f', {r.train_rate:,.0f} train steps/s'
  return (f'{r.env_rate:,.0f} env steps/s{train} over {r.seconds:.1f} s '
          f'(load {r.load_start:.2f} -> {r.load_end:.2f})')


def run_benchmark() -> int:
  common.check_choices('configs', FLAGS.configs, tuple(CONFIGS))
  common.check_choices('systems', FLAGS.systems, SYSTEMS)
  print(f'Scaling with separate programs on {ENV_ID} ({FLAGS.gin_file}): configurations '
        f'{",".join(FLAGS.configs)}, {FLAGS.seconds:g} s each per system, '
        f'{common.machine_and_versions("dm-reverb", "tf-agents")}', flush=True)
  print(f'  tfrl bindings: {"; ".join(tfrl_bindings())}', flush=True)
  print(common.load_line('start'), flush=True)
  job_dir = tempfile.mkdtemp(prefix='tfrl_scaling_')
  systems: Dict[str, System] = {}
  results: Dict[tuple, Result] = {}
  try:
    for name in FLAGS.systems:
      system = TfrlSystem(job_dir) if name == 'tfrl' else PeerSystem(job_dir)
      systems[name] = system
      system.start_server(FLAGS.ready_timeout_s)
      print(f'  {name} server at {system.address}', flush=True)
    for config in FLAGS.configs:
      for name, system in systems.items():
        if system.server is not None and not system.server.alive():
          result = Result(name, config, error=f'server exited:\n{system.server.tail()}')
        else:
          result = measure(system, config)
        results[(name, config)] = result
        print(f'  {name:<9} [{CONFIG_LABELS[config]}]: {_describe(result)}', flush=True)
  finally:
    stop_processes([s.server for s in systems.values() if s.server is not None],
                   FLAGS.grace_s)
    if FLAGS.keep_root_dir:
      print(f'  job dir (logs) kept: {job_dir}')
    else:
      shutil.rmtree(job_dir, ignore_errors=True)
  print(common.load_line('end'))

  def get(name, config):
    return results.get((name, config), Result(name, config, error='not run'))

  peer = 'tf-agents'
  print()
  print(f'{"configuration":<24} {"tfrl env/s":>11} {"peer env/s":>11} {"ratio":>8} '
        f'{"tfrl train/s":>13} {"peer train/s":>13} {"ratio":>8}  load 1-min (tfrl; peer)')
  for config in FLAGS.configs:
    t, p = get('tfrl', config), get(peer, config)
    loads = '; '.join('failed' if r.error else f'{r.load_start:.2f}->{r.load_end:.2f}'
                      for r in (t, p))
    print(f'{CONFIG_LABELS[config]:<24} {_fmt(t.env_rate):>11} {_fmt(p.env_rate):>11} '
          f'{_ratio(t.env_rate, p.env_rate):>8} {_fmt(t.train_rate):>13} '
          f'{_fmt(p.train_rate):>13} {_ratio(t.train_rate, p.train_rate):>8}  {loads}')
  print()
  print('scaling, 2 vs 1 collectors          tfrl     peer')
  for label, two, one, attr in (
      ('env steps/s, with trainer', '2c+trainer', '1c+trainer', 'env_rate'),
      ('train steps/s, with trainer', '2c+trainer', '1c+trainer', 'train_rate'),
      ('env steps/s, collectors alone', '2c', '1c', 'env_rate')):
    cells = [_ratio(getattr(get(n, two), attr), getattr(get(n, one), attr))
             for n in ('tfrl', peer)]
    print(f'{label:<34} {cells[0]:>6} {cells[1]:>8}')
  failed = [r for r in results.values() if r.error]
  for r in failed:
    print(f'\n{r.system} [{r.config}] failed: {r.error}')
  return 1 if failed else 0


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  if FLAGS.role == 'peer_server':
    peer_server()
  elif FLAGS.role == 'peer_collect':
    peer_collect()
  elif FLAGS.role == 'peer_train':
    peer_train()
  else:
    sys.exit(run_benchmark())


if __name__ == '__main__':
  app.run(main)

"""What the benchmarks share: script set-up, the DQN agent, the header and target lines.

Importing this module prepares a benchmark run as a script from the repository root
(`.venv/bin/python benchmarks/<name>.py`): it puts the repository on sys.path, so that
`tfrl` and `learners` import without installing, and quiets TensorFlow's C++ logging
(unless TF_CPP_MIN_LOG_LEVEL is set). So a script imports it before TensorFlow, Reverb
or tfrl.

It imports TensorFlow and tf-agents only inside the functions that need them:
solve_time.py, which only drives subprocesses, imports it without paying for TensorFlow.
"""
import concurrent.futures
from importlib import metadata
import os
import queue
import subprocess
import sys
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from absl import app

# Before anything imports TensorFlow: the variable is read once, when TF loads.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)


_INHERITED_FORK_SERVER: List[Any] = []  # looked up once: [the server, or None]


def run_python(args: Sequence[str], timeout: Optional[float] = None,
               env: Optional[dict] = None, log_path: Optional[str] = None,
               cwd: str = REPO) -> subprocess.CompletedProcess:
  """Runs `python <args>` (`-m module ...` or `-c code ...`) to its end, as
  `subprocess.run(..., capture_output=True, text=True)` would, or with its output
  appended to `log_path`. Through the fork server this script was started with where it
  has one (the test suite's smoke runs give it one, so a child skips TensorFlow's
  imports); else in a new interpreter. Not for a child whose start-up is measured.

  Raises:
    subprocess.TimeoutExpired: it ran past `timeout` seconds (it is killed).
  """
  env = dict(os.environ if env is None else env)
  if not _INHERITED_FORK_SERVER:
    from learners.processes import fork_server  # pylint: disable=g-import-not-at-top (TensorFlow)
    _INHERITED_FORK_SERVER.append(fork_server.ForkServer.inherited())
  forks = _INHERITED_FORK_SERVER[0]
  if forks is not None:
    from learners.processes import fork_server  # pylint: disable=g-import-not-at-top
    return fork_server.run_to_end(forks, args, env, timeout, cwd=cwd, log_path=log_path)
  command = [sys.executable, *args]
  if log_path is None:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
  with open(log_path, 'a') as log:
    return subprocess.run(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                          timeout=timeout)


def import_seconds(python: str, module: str) -> float:
  """Seconds a fresh `python -c 'import <module>'` takes, start to exit (exec'd, so
  the interpreter's own start counts, as it does in a run's start-up).

  Raises:
    subprocess.CalledProcessError: the import failed.
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  start = time.monotonic()
  subprocess.run([python, '-c', f'import {module}'], check=True, env=env,
                 capture_output=True, timeout=600)
  return time.monotonic() - start


def check_choices(flag: str, chosen, allowed) -> None:
  """Raises app.UsageError naming what in `chosen` (a list flag's values) is not allowed.

  Args:
    flag: the flag's name, without dashes, for the message.
    chosen: the values given.
    allowed: the values it may take (shown as given: a tuple, a dict's keys...).
  """
  unknown = [c for c in chosen if c not in allowed]
  if unknown:
    raise app.UsageError(f'Unknown --{flag} {unknown}; choose from {allowed}.')


def make_dqn_agent(time_step_spec, action_spec, seed: int, fc_layer_params=(100,)):
  """The benchmarks' DQN agent: QNetwork fc(100) (or `fc_layer_params`), Adam 1e-3,
  epsilon-greedy 0.1.

  Seeded, so every path starts from the same weights: an untrained policy's episode
  lengths (and so the share of autoreset steps) depend on them.

  Returns:
    An initialized tf_agents DqnAgent.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.agents.dqn import dqn_agent  # pylint: disable=g-import-not-at-top
  from tf_agents.networks import q_network  # pylint: disable=g-import-not-at-top

  tf.random.set_seed(seed)
  q_net = q_network.QNetwork(time_step_spec.observation, action_spec,
                             fc_layer_params=tuple(fc_layer_params))
  agent = dqn_agent.DqnAgent(
      time_step_spec, action_spec, q_network=q_net,
      optimizer=tf.keras.optimizers.Adam(1e-3), epsilon_greedy=0.1,
      n_step_update=1, gamma=0.99,
      train_step_counter=tf.Variable(0, dtype=tf.int64, name='train_step'))
  agent.initialize()
  return agent


def machine_and_versions(*packages: str) -> str:
  """'2 CPUs, GPUs: 0; tf 2.15.1, dm-reverb 0.14.0, <package> <version>...', for headers.

  Args:
    *packages: distribution names (as pip knows them) whose versions follow TF's.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  versions = [f'tf {tf.__version__}'] + [f'{p} {metadata.version(p)}' for p in packages]
  return (f'{os.cpu_count()} CPUs, GPUs: {len(tf.config.list_physical_devices("GPU"))}; '
          + ', '.join(versions))


def load_average() -> str:
  """The 1, 5 and 15 minute load averages, for the record next to each figure."""
  return ', '.join(f'{x:.2f}' for x in os.getloadavg())


def load_1min() -> float:
  """The 1-minute load average: on a shared machine, other jobs only slow a figure down."""
  return os.getloadavg()[0]


def load_line(when: str) -> str:
  """'  load average at <when> (1, 5, 15 min): a, b, c': a header's or a footer's line."""
  return f'  load average at {when} (1, 5, 15 min): {load_average()}'


def format_ratio(ratio: float, target: float, x_digits: int = 1,
                 share_digits: int = 1) -> str:
  """`ratio` written as its target is: a multiple ('40.1x') when the target is at least 1
  (a speed-up over a peer), else a share ('26.1%', of a ceiling)."""
  return f'{ratio:.{x_digits}f}x' if target >= 1 else f'{ratio:.{share_digits}%}'


def target_line(label: str, ratio: Optional[float], target: float, shown: str,
                label_width: int, shown_width: int) -> str:
  """'label  shown  target >= T  PASS|MISS': one ratio judged against its target.

  Args:
    label: what the ratio compares ('tfrl / tf-agents Actor').
    ratio: the ratio judged; None when a path it needs was not run.
    target: the least ratio that passes; at least 1 a speed-up ('20x'), below a share
      ('25%').
    shown: the ratio as the benchmark writes it (see `format_ratio`).
    label_width, shown_width: the columns' widths (each benchmark keeps its own table).
  """
  if ratio is None:
    return f'{label:<{label_width}} n/a (path not run)'
  target_text = f'{target:g}x' if target >= 1 else f'{target:.0%}'
  verdict = 'PASS' if ratio >= target else 'MISS'
  return (f'{label:<{label_width}} {shown:<{shown_width}} '
          f'target >= {target_text:<4} {verdict}')


class Measurement:
  """One path: `call()` does one chunk of work and returns how many units it did."""

  def __init__(self, name, call, note='', unit='train steps'):
    self.name, self.call, self.note, self.unit = name, call, note, unit
    self.rounds = []  # (units, seconds, calls) per round

  def time(self, seconds: float) -> None:
    units = calls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
      units += self.call()
      calls += 1
    self.rounds.append((units, time.perf_counter() - start, calls))

  def rates(self):
    return [u / s for u, s, _ in self.rounds]

  @property
  def rate(self) -> float:
    """The best round's rate (other jobs on the machine only slow a round down)."""
    return max(self.rates())

  @property
  def ms_per_call(self) -> float:
    units, seconds, calls = max(self.rounds, key=lambda r: r[0] / r[1])
    return 1e3 * seconds / calls


def time_round_robin(measurements: List[Measurement], rounds: int, seconds: float,
                     describe: Callable[[Measurement], str]) -> None:
  """Times every measurement for `seconds`, in turn, `rounds` times, printing a line
  per timing (`describe(m)`, then the load): paths measured close together share the
  machine's drifting load, and each keeps its best round."""
  for r in range(rounds):
    for m in measurements:
      m.time(seconds)
      print(f'  round {r + 1}: {describe(m)} (load {load_1min():.2f})', flush=True)


def drain_call(dataset, chunk: int) -> Callable[[], int]:
  """A call that draws `chunk` batches from `dataset` in-graph, one tf.function call per
  chunk, as a Learner's train loop does; it is called once here (traces, fills the
  buffers).

  Returns:
    The call, which returns the batches it drew.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top (benchmarks that need it)
  iterator = iter(dataset)

  @tf.function(autograph=False)
  def drain(n):
    def body(i, total):
      leaf = tf.nest.flatten(next(iterator))[0]  # depend on the batch: it is produced
      return i + 1, total + tf.cast(tf.size(leaf), tf.int64)
    return tf.while_loop(lambda i, _: i < n, body,
                         (tf.constant(0), tf.constant(0, tf.int64)))[1]

  n = tf.constant(chunk)

  def call():
    drain(n)
    return chunk

  call()
  return call


# Inside a peer venv: the requirements file it was built from.
VENV_STAMP = 'requirements.installed'


def ensure_venv(venv: str, requirements: str) -> str:
  """Creates a peer's venv from its requirements file where it is missing, or installs
  the file again where it changed since the venv was built.

  Args:
    venv: the venv's directory.
    requirements: the pip requirements file it is built from.

  Returns:
    The venv's python.
  """
  python = os.path.join(venv, 'bin', 'python')
  with open(requirements) as f:
    wanted = f.read()
  stamp = os.path.join(venv, VENV_STAMP)
  if os.path.exists(python) and os.path.exists(stamp):
    with open(stamp) as f:
      if f.read() == wanted:
        return python
  if not os.path.exists(python):
    print(f'Creating the peer venv {venv} ...', flush=True)
    # The peer needs the same Python as tfrl (cp311 wheels); `-m venv` from inside a venv
    # builds on its base interpreter.
    subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
  print(f'Installing {os.path.relpath(requirements, REPO)} into it ...', flush=True)
  subprocess.run([python, '-m', 'pip', 'install', '-qq', '-r', requirements], check=True)
  with open(stamp, 'w') as f:
    f.write(wanted)
  return python


def on_pinned_cpus(jobs: int, run: Callable[[Any, Optional[int]], Any],
                   items: Sequence[Any]) -> Iterator[Tuple[Any, Any, Optional[Exception]]]:
  """Runs `run(item, cpu)` for each item, `jobs` at a time; with jobs=2 each on a CPU of
  its own (the next item starting on the CPU the last one freed; `cpu` is None
  otherwise), so each run's seconds are one-CPU figures.

  Yields:
    (item, result, None) as each ends, or (item, None, error) where `run` raised a
    RuntimeError (the others go on).
  """
  free_cpus = queue.Queue()  # a run takes a CPU for its time, then gives it back
  for cpu in (range(jobs) if jobs == 2 else [None] * jobs):
    free_cpus.put(cpu)

  def one(item):
    cpu = free_cpus.get()
    try:
      return run(item, cpu)
    finally:
      free_cpus.put(cpu)

  with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as lanes:
    futures = {lanes.submit(one, item): item for item in items}
    for future in concurrent.futures.as_completed(futures):
      try:
        yield futures[future], future.result(), None
      except RuntimeError as e:
        yield futures[future], None, e

"""Shared fixtures: embedded Reverb servers that are always stopped after use; signal
handlers put back and gin bindings cleared after every test."""
import os

# Before TensorFlow is first imported: keep its C++ start-up chatter out of test logs.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import contextlib  # pylint: disable=g-import-not-at-top,wrong-import-position
import resource  # pylint: disable=g-import-not-at-top,wrong-import-position
import signal  # pylint: disable=g-import-not-at-top,wrong-import-position
import time  # pylint: disable=g-import-not-at-top,wrong-import-position

import gin  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(autouse=True)
def _restore_signal_handlers():
  """Puts back SIGINT/SIGTERM/SIGHUP handlers after each test. Programs run in-process
  leave them ignored at exit (as they must); a later test's subprocesses would inherit
  that through exec and ignore the signals the test sends them."""
  sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
  saved = {sig: signal.getsignal(sig) for sig in sigs}
  yield
  for sig, handler in saved.items():
    if signal.getsignal(sig) is not handler and handler is not None:
      signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def _clear_gin_bindings():
  """Clears gin's bindings after each test: a config one test parsed (an LSTM size, an
  env) must not reach the agents and Experiments a later test builds."""
  yield
  gin.clear_config()


@contextlib.contextmanager
def _server_factory():
  """Yields `start(tables) -> ReplayServer`; stops every server it started on exit."""
  # Imported here, not with this file: pytest-xdist's controller process loads this
  # file too and runs no test, so it need not import TensorFlow (5 s before any lane
  # starts).
  from tfrl import replay  # pylint: disable=g-import-not-at-top
  servers = []

  def start(tables, **kwargs):
    server = replay.ReplayServer(tables, **kwargs)
    servers.append(server)
    return server

  try:
    yield start
  finally:
    for server in reversed(servers):
      server.stop()


@pytest.fixture
def reverb_server_factory():
  """`start(tables, **kwargs)` starts an embedded `ReplayServer`, stopped after the test."""
  with _server_factory() as start:
    yield start


@pytest.fixture(scope='module')
def module_reverb_server_factory():
  """Like `reverb_server_factory`, but servers live until the module's tests are done."""
  with _server_factory() as start:
    yield start


# `make test` runs the suite in two lanes (pytest-xdist: `-n 2 --dist loadgroup
# --no-loadscope-reorder`): one process alone used about one of the machine's two cores
# (the suite waits on subprocesses, timeouts and servers much of the time). Three lanes
# did not fill those waits: the same tests took 55 CPU-min instead of 37.5 (TensorFlow
# processes contending for two cores), 28 min of pytest instead of 21.7. Each file is
# one unit, so module fixtures run once, and the units go out longest first (LONGEST,
# seconds measured in clean-clone runs; BUILD_NOTES.md) so that the lanes end together.
# The learning runs to a return threshold stay one unit: at most one of them runs at a
# time, whatever else the other lane runs.
LONGEST = (
    'tests/learners/test_learning.py',
    'tests/test_benchmarks_run.py',
    'tests/colabs/test_notebooks.py',
    'tests/learners/test_faults.py',
    'tests/learners/test_suite_configs.py',
    'tests/learners/test_train_eval.py',
    'tests/learners/test_programs.py',
    'tests/learners/test_ray_launch.py',
    'tests/datasets/test_offline_job.py',
    'tests/learners/test_signals.py',
    'tests/learners/test_pbt.py',
    'tests/datasets/test_offline_continuous.py',
    'tests/test_learner.py',
    'tests/examples/test_examples.py',
    'tests/learners/test_watchdogs.py',
    'tests/agents/test_distributed.py',
    # The longest of `make test-fast`'s files (no learning runs, no whole jobs), which
    # come after all of the above in a whole run.
    'tests/agents/test_hyperparameters.py',
    'tests/agents/test_pixel_agents.py',
    'tests/test_triggers.py',
    'tests/test_results_pages.py',
    'tests/envs/test_env_backends.py',
    'tests/test_recurrent.py',
    'tests/agents/test_impala.py',
    'tests/envs/test_atari_wrappers.py',
)


# Files whose every test runs whole jobs, separate programs, notebook kernels or the
# benchmark scripts: marked `integration`, which `make test-fast` leaves out (with the
# learning runs, marked `slow`). A test elsewhere that does the same carries the mark
# itself.
INTEGRATION_FILES = (
    'tests/learners/test_learning.py',
    'tests/learners/test_suite_configs.py',
    'tests/learners/test_faults.py',
    'tests/learners/test_programs.py',
    'tests/learners/test_tasks.py',
    'tests/learners/test_watchdogs.py',
    'tests/learners/test_ray_launch.py',
    'tests/test_benchmarks_run.py',
    'tests/colabs/test_notebooks.py',
    'tests/learners/test_pbt.py',
    'tests/learners/test_signals.py',
    'tests/learners/test_tensorboard.py',
    'tests/datasets/test_offline_job.py',
    'tests/agents/test_distributed.py',  # eleven agents traced twice in one subprocess
)


def _path_of(item) -> str:
  return item.nodeid.split('::', 1)[0]


def pytest_itemcollected(item):
  # Marked as collected: xdist turns the marks into groups in its own
  # pytest_collection_modifyitems, which may run before this file's.
  path = _path_of(item)
  item.add_marker(pytest.mark.xdist_group(path))
  if path in INTEGRATION_FILES:
    item.add_marker(pytest.mark.integration)


def pytest_collection_modifyitems(config, items):
  del config
  rank = {path: i for i, path in enumerate(LONGEST)}
  items.sort(key=lambda item: rank.get(_path_of(item), len(LONGEST)))  # stable


# Seconds and CPU seconds per test file (setup, call and teardown), printed after the
# run: where the suite's 20-minute budget goes (BUILD_NOTES.md, "The test suite"). CPU
# counts the test process and the children it has waited for (its programs, servers,
# notebook kernels), so a file whose tests mostly wait shows it.
_SECONDS_PER_FILE = {}
_CPU_SECONDS_PER_FILE = {}
_CPU_PROPERTY = 'cpu_seconds'


def _cpu_seconds() -> float:
  own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                       resource.RUSAGE_CHILDREN))
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  del call
  outcome = yield
  start = item.stash.get(_PHASE_START, None)
  if start is not None:
    outcome.get_result().user_properties.append((_CPU_PROPERTY, _cpu_seconds() - start))


_PHASE_START = pytest.StashKey[float]()


def _measured(item):
  item.stash[_PHASE_START] = _cpu_seconds()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
  _measured(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
  _measured(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
  _measured(item)


def pytest_runtest_logreport(report):
  path = report.nodeid.split('::', 1)[0].split('@', 1)[0]
  _SECONDS_PER_FILE[path] = _SECONDS_PER_FILE.get(path, 0.0) + report.duration
  cpu = sum(value for name, value in report.user_properties if name == _CPU_PROPERTY)
  _CPU_SECONDS_PER_FILE[path] = _CPU_SECONDS_PER_FILE.get(path, 0.0) + cpu


# This machine's speed moves between runs (the same code's suite took 21 to 47 minutes
# on it): a fixed pure-Python workload, timed when the run starts and when it ends, is
# printed beside the seconds per file, so that two runs' figures can be compared.
_REFERENCE_LOOPS = 5_000_000
_REFERENCE_SECONDS = []


def reference_workload_seconds() -> float:
  """Wall seconds of a fixed pure-Python loop (about half a second on a fast day)."""
  start = time.perf_counter()
  total = 0
  for i in range(_REFERENCE_LOOPS):
    total += i * i
  return time.perf_counter() - start


def pytest_sessionstart(session):
  if not hasattr(session.config, 'workerinput'):  # the controller, not an xdist lane
    _REFERENCE_SECONDS.append(reference_workload_seconds())


def pytest_terminal_summary(terminalreporter):
  if _REFERENCE_SECONDS:
    _REFERENCE_SECONDS.append(reference_workload_seconds())
    terminalreporter.section('this machine\'s speed')
    terminalreporter.write_line(
        f'a fixed Python loop ({_REFERENCE_LOOPS:,} steps): {_REFERENCE_SECONDS[0]:.2f} s '
        f'as the run started, {_REFERENCE_SECONDS[-1]:.2f} s as it ended')
  if not _SECONDS_PER_FILE:
    return
  terminalreporter.section('seconds per test file (slowest 20): wall, CPU')
  ranked = sorted(_SECONDS_PER_FILE.items(), key=lambda kv: -kv[1])
  for path, seconds in ranked[:20]:
    terminalreporter.write_line(
        f'{seconds:8.1f} s {_CPU_SECONDS_PER_FILE.get(path, 0.0):8.1f} cpu-s  {path}')
  terminalreporter.write_line(f'{sum(_SECONDS_PER_FILE.values()):8.1f} s '
                              f'{sum(_CPU_SECONDS_PER_FILE.values()):8.1f} cpu-s  in all')

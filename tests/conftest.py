"""Shared fixtures: embedded Reverb servers that are always stopped after use; signal
handlers put back and gin bindings cleared after every test."""
import os

# Before TensorFlow is first imported: keep its C++ start-up chatter out of test logs.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import contextlib  # pylint: disable=g-import-not-at-top,wrong-import-position
import signal  # pylint: disable=g-import-not-at-top,wrong-import-position

import gin  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from tfrl import replay  # pylint: disable=g-import-not-at-top,wrong-import-position


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


# Seconds per test file (setup, call and teardown), printed after the run: where the
# suite's 30-minute budget goes (BUILD_NOTES.md, "The test suite").
_SECONDS_PER_FILE = {}


def pytest_runtest_logreport(report):
  path = report.nodeid.split('::', 1)[0]
  _SECONDS_PER_FILE[path] = _SECONDS_PER_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
  if not _SECONDS_PER_FILE:
    return
  terminalreporter.section('seconds per test file (slowest 20)')
  ranked = sorted(_SECONDS_PER_FILE.items(), key=lambda kv: -kv[1])
  for path, seconds in ranked[:20]:
    terminalreporter.write_line(f'{seconds:8.1f} s  {path}')
  terminalreporter.write_line(f'{sum(_SECONDS_PER_FILE.values()):8.1f} s  in all')

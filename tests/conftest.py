"""Shared fixtures: embedded Reverb servers that are always stopped after use."""
import os

# Before TensorFlow is first imported: keep its C++ start-up chatter out of test logs.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import contextlib  # pylint: disable=g-import-not-at-top,wrong-import-position

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from tfrl import replay  # pylint: disable=g-import-not-at-top,wrong-import-position


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

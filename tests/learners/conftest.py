"""The `programs` fixture: tfrl's programs as subprocesses, all stopped after the test."""
import pytest

from programs import Programs  # tests/learners/programs.py


@pytest.fixture
def programs(tmp_path):
  progs = Programs(str(tmp_path))
  try:
    yield progs
  finally:
    progs.close()

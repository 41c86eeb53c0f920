"""tfrl.logs: native start-up noise filtered out, everything else kept, progress lines."""
import os
import re
import sys

import pytest

from tfrl import logs

NOISE = [
    '2026-11-24 06:18:09.347750: E external/local_xla/xla/stream_executor/cuda/'
    'cuda_dnn.cc:9261] Unable to register cuDNN factory: Attempting to register factory',
    '[reverb/cc/platform/default/server.cc:71] Started replay server on port 37881',
    '[reverb/cc/client.cc:165] Sampler and server are owned by the same process (1) so '
    'Table queue is accessed directly without gRPC.',
    'Gym has been unmaintained since 2022 and does not support NumPy 2.0 amongst other',
]
KEPT = [
    '2026-11-24 06:18:09.347750: E tensorflow/core/framework/op_kernel.cc:1] a real error',
    '[reverb/cc/writer.cc:1] Stream closed: the server went away',
    'Traceback (most recent call last):',
]


def _write_native(lines):
  os.write(2, ''.join(l + '\n' for l in lines).encode())


def test_noise_is_dropped_and_everything_else_kept_in_order(capfd):
  with logs.native_stderr_filtered():
    _write_native([NOISE[0], KEPT[0], NOISE[1], KEPT[1], NOISE[2], NOISE[3], KEPT[2]])
  assert capfd.readouterr().err.splitlines() == KEPT


def test_everything_comes_through_when_the_block_raises(capfd):
  with pytest.raises(RuntimeError, match='broke'):
    with logs.native_stderr_filtered():
      _write_native(NOISE + KEPT)
      raise RuntimeError('broke')
  assert capfd.readouterr().err.splitlines() == NOISE + KEPT


def test_tfrl_verbose_turns_the_filter_off(capfd, monkeypatch):
  monkeypatch.setenv('TFRL_VERBOSE', '1')
  with logs.native_stderr_filtered():
    _write_native(NOISE)
  assert capfd.readouterr().err.splitlines() == NOISE


def test_progress_lines_print_whatever_absls_verbosity(capsys):
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  before = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.ERROR)
  try:
    logs.progress('train step %d | eval return %s', 5, '1.0')
    absl_logging.info('library detail')
  finally:
    absl_logging.set_verbosity(before)
  err = capsys.readouterr().err
  assert 'test_logs] train step 5 | eval return 1.0' in err
  assert 'library detail' not in err


# One fresh interpreter serves both tests below (each Python process that imports
# TensorFlow costs seconds): it imports tfrl and the libraries whose start-up noise tfrl
# filters, marks the point on both streams, then runs the README's Python example.
_MARK = '--- imported ---'
_IMPORT_THEN_README_EXAMPLE = f"""
import sys
import tfrl, tf_agents, gym, reverb
import tensorflow as tf
for stream in (sys.stdout, sys.stderr):  # stdout's mark carries the Python logger's level
  stream.write({_MARK!r} + (' %d' % tf.get_logger().level if stream is sys.stdout else '')
               + '\\n')
  stream.flush()
from learners import train_eval
result = train_eval.run(sys.argv[1], gin_files=['dqn_cartpole.gin'],
                        num_train_steps=40, eval_interval=20, num_eval_episodes=2,
                        initial_collect_steps=64)
print(result['train_step'])
"""


@pytest.fixture(scope='module')
def import_then_readme_example(tmp_path_factory):
  """(stdout, stderr) of the import, and of the README example after it, in a fresh
  interpreter started as a user's would be (no TF_CPP_MIN_LOG_LEVEL, no TFRL_VERBOSE)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {k: v for k, v in os.environ.items() if k not in ('TF_CPP_MIN_LOG_LEVEL',
                                                          'TFRL_VERBOSE')}
  env['PYTHONPATH'] = repo
  result = subprocess.run(
      [sys.executable, '-c', _IMPORT_THEN_README_EXAMPLE,
       str(tmp_path_factory.mktemp('readme') / 'run')],
      capture_output=True, text=True, env=env, cwd=repo, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  out = re.split(re.escape(_MARK) + r' (\d+)\n', result.stdout)
  err = result.stderr.split(_MARK + '\n')
  assert len(out) == 3 and len(err) == 2, (result.stdout[-2000:], result.stderr[-3000:])
  return {'import': (out[0], err[0]), 'level': int(out[1]), 'example': (out[2], err[1])}


@pytest.mark.integration
def test_importing_tfrl_prints_nothing(import_then_readme_example):
  """TensorFlow's CUDA-factory lines, its CPU notices and gym's notice all fall at the
  import of TensorFlow and tf-agents, which `import tfrl` does quietly."""
  stdout, stderr = import_then_readme_example['import']
  assert stdout == '' and stderr == '', stderr
  assert import_then_readme_example['level'] == 40  # logging.ERROR: set by the import


# A tfrl progress line: 'I1124 06:01:45.861 train_eval] ...'.
_PROGRESS_LINE = r'^I\d{4} \d\d:\d\d:\d\d\.\d{3} \w+\] '


@pytest.mark.integration
def test_the_readmes_python_example_prints_only_tfrls_lines(import_then_readme_example,
                                                             monkeypatch):
  """TensorFlow's Python logger (its deprecation notices on the first train calls) is
  quiet after `import tfrl`, as in the programs; TFRL_TF_LOG_LEVEL brings it back."""
  stdout, stderr = import_then_readme_example['example']
  assert int(stdout) >= 40  # whole train calls of dqn_cartpole.gin
  lines = [line for line in stderr.splitlines() if line.strip()]
  # tfrl's own lines: progress, and its warning that the embedded server is open to
  # the network.
  ours = [line for line in lines if re.match(_PROGRESS_LINE, line) or
          line.startswith('WARNING: Reverb server on port ')]
  assert ours == lines and any('train step' in line for line in lines), lines
  # The import set the level (test above) with this function, which reads the variable
  # (TensorFlow is imported in this process already: no other interpreter is needed).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  before = tf.get_logger().level
  monkeypatch.setenv(logs.TF_LOG_LEVEL_VARIABLE, 'WARNING')
  try:
    logs.import_tensorflow_quietly()
    assert tf.get_logger().level == 30  # logging.WARNING
  finally:
    tf.get_logger().setLevel(before)

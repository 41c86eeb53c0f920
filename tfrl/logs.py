"""What tfrl prints: its progress lines, and not the native chatter of its dependencies.

Two mechanisms:

- `progress` lines (a training job's status, a program starting or stopping, a resume)
  go to the 'tfrl' logger, which prints them to stderr at INFO whatever absl's
  verbosity. The programs set absl's verbosity to WARNING unless `--verbosity` is
  given, so TensorFlow's INFO pages (SavedModel signatures, fingerprints) and tfrl's
  own detail (each checkpoint written) appear only with `--verbosity=0` or above.
- `native_stderr_filtered()` holds what C++ code writes to the process's stderr during
  a block and lets through only the lines that are not known start-up noise:
  TensorFlow's import (CUDA factory "errors" on a machine without a GPU, CPU feature
  and TensorRT notices), gym's "unmaintained" notice (tf-agents imports gym), and
  Reverb's INFO lines about starting and stopping a server. tfrl wraps its imports of
  TensorFlow and the moments it starts or stops a Reverb server or sampler in it.

`TFRL_VERBOSE=1` in the environment turns the filter off (everything prints).
"""
import contextlib
import logging
import os
import re
import sys
import tempfile
from typing import Callable, Iterator, Optional, Sequence

# Lines that are noise wherever tfrl runs: TensorFlow's import on a machine without a
# GPU or TensorRT, gym's notice, and Reverb's INFO lines about its own life cycle.
NOISE = tuple(re.compile(p) for p in (
    r'Unable to register cu(DNN|FFT|BLAS) factory',
    r'Could not find cuda drivers on your machine',
    r'cpu_feature_guard\.cc',
    r'^To enable the following instructions: .* rebuild TensorFlow',
    r'TF-TRT Warning: Could not find TensorRT',
    r'oneDNN custom operations are on',
    r'^Gym has been unmaintained since 2022',
    r'^Please upgrade to Gymnasium, the maintained drop-in replacement of Gym',
    r'^See the migration guide at https://gymnasium\.farama\.org/',
    r'^\[reverb/cc/platform/tfrecord_checkpointer\.cc:\d+\]\s+(Initializing '
    r'TFRecordCheckpointer|Loading latest checkpoint)',
    # Restoring a checkpoint: a line per 100 chunks read, then per table.
    r'^\[reverb/cc/platform/tfrecord_checkpointer\.cc:\d+\]\s+(Loading checkpoint from|'
    r'Loading and verifying metadata|Metadata for table|Successfully loaded and verified|'
    r'Still reading compressed trajectory data|Completed reading compressed trajectory|'
    r'Table .* items have been successfully loaded|Successfully loaded \d+ tables)',
    r'^\[reverb/cc/platform/default/server\.cc:\d+\] (Started|Shutting down) replay server',
    r'^\[reverb/cc/client\.cc:\d+\] Sampler and server are owned by the same process',
    r'^A\.L\.E: Arcade Learning Environment \(version ',  # ALE, per env it creates
    r'^\[Powered by Stella\]$',
))

PROGRESS_LOGGER = 'tfrl'


def verbose() -> bool:
  """Whether TFRL_VERBOSE asks for everything (no filtering)."""
  return os.environ.get('TFRL_VERBOSE', '') not in ('', '0', 'false', 'False')


def _is_noise(line: str, patterns: Sequence[re.Pattern]) -> bool:
  return any(p.search(line) for p in patterns)


@contextlib.contextmanager
def native_stderr_filtered(patterns: Sequence[re.Pattern] = NOISE) -> Iterator[None]:
  """Holds what is written to the process's stderr file (descriptor 2: C++ logging,
  and Python's `sys.stderr` where that is the terminal's) during the block and writes
  it back afterwards without the lines matching `patterns`.

  Everything else comes through, in order, when the block ends; if the block raises,
  everything does (the noise may explain the error). Other threads' output written
  meanwhile is held too and comes through the same way. Python's `sys.stderr` object is
  left alone: a handler created during the block (absl's, on its first import) must
  keep writing to the real one.
  """
  if verbose():
    yield
    return
  sys.stderr.flush()
  try:
    saved_fd = os.dup(2)
  except OSError:  # no real stderr (an embedding process): nothing to filter
    yield
    return
  failed = False
  with tempfile.TemporaryFile(mode='w+b') as held:
    os.dup2(held.fileno(), 2)
    try:
      yield
    except BaseException:
      failed = True
      raise
    finally:
      sys.stderr.flush()
      os.dup2(saved_fd, 2)
      os.close(saved_fd)
      held.seek(0)
      lines = held.read().decode('utf-8', 'replace').splitlines(keepends=True)
      kept = lines if failed else [l for l in lines if not _is_noise(l, patterns)]
      if kept:
        sys.stderr.write(''.join(kept))
        sys.stderr.flush()


TF_LOG_LEVEL_VARIABLE = 'TFRL_TF_LOG_LEVEL'  # TensorFlow's Python logger's level


def import_tensorflow_quietly() -> None:
  """Imports TensorFlow, tf-agents (and with it gym) and Reverb with their start-up
  noise filtered (see `native_stderr_filtered`) unless TensorFlow is imported, and sets
  TensorFlow's Python logger to ERROR (or $TFRL_TF_LOG_LEVEL)."""
  if 'tensorflow' not in sys.modules:
    _import_filtered()
  import tensorflow  # pylint: disable=g-import-not-at-top
  # TensorFlow's Python logger prints deprecation notices about TF's own internals
  # (tf-agents calls them) on a job's first calls: a dozen lines over tfrl's progress.
  # Its errors still print; TFRL_TF_LOG_LEVEL=WARNING (or tf.get_logger().setLevel
  # after `import tfrl`) brings the rest back.
  tensorflow.get_logger().setLevel(os.environ.get(TF_LOG_LEVEL_VARIABLE, 'ERROR'))


def _import_filtered() -> None:
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # TF's C++ INFO and WARNING lines
  # gym prints its notice to `sys.stderr`, which in a notebook is not descriptor 2:
  # while gym_notices cannot be imported, gym (which tf-agents imports) skips it.
  notices = sys.modules.get('gym_notices', _ABSENT)
  sys.modules['gym_notices'] = None
  try:
    with native_stderr_filtered():
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
      import tf_agents  # pylint: disable=g-import-not-at-top,unused-import
      import reverb  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    if notices is _ABSENT:
      del sys.modules['gym_notices']
    else:
      sys.modules['gym_notices'] = notices


_ABSENT = object()


_line_writer: Optional[Callable[[str], None]] = None


def set_line_writer(writer: Optional[Callable[[str], None]]) -> None:
  """Progress lines go to `writer` (one line, no newline) instead of stderr; None
  restores stderr. A progress bar sets its own (`tqdm.write`) while it is shown."""
  global _line_writer
  _line_writer = writer


class _StderrHandler(logging.StreamHandler):
  """Writes to whatever `sys.stderr` is at the time (a notebook's, a test's capture),
  or to the line writer a progress bar set."""

  @property
  def stream(self):
    return sys.stderr

  @stream.setter
  def stream(self, unused_value):
    pass

  def emit(self, record):
    if _line_writer is None:
      super().emit(record)
    else:
      _line_writer(self.format(record))


def progress_logger() -> logging.Logger:
  """The 'tfrl' logger: INFO and above to stderr, whatever absl's verbosity, once.

  Lines look like absl's ('I1124 06:01:45.861 train_eval] train step ...') so a log
  reads as one stream.
  """
  logger = logging.getLogger(PROGRESS_LOGGER)
  if not getattr(logger, '_tfrl_configured', False):
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(
        '%(levelname).1s%(asctime)s.%(msecs)03d %(module)s] %(message)s',
        datefmt='%m%d %H:%M:%S'))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # absl's handler would print it a second time
    logger._tfrl_configured = True  # pylint: disable=protected-access
  return logger


def progress(message: str, *args) -> None:
  """A progress line (see the module docstring): `message % args` at INFO."""
  progress_logger().info(message, *args, stacklevel=2)


def quiet_absl_unless_asked() -> None:
  """Sets absl's verbosity to WARNING unless the command line gave `--verbosity`: the
  programs' default, so only progress lines, warnings and errors print."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  if verbose():
    return
  given = flags.FLAGS.is_parsed() and flags.FLAGS['verbosity'].present
  if not given:
    absl_logging.set_verbosity(absl_logging.WARNING)

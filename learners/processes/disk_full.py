"""A full disk, told as such: one 'error: disk full writing <path> ...' line and
exit status EXIT_DISK_FULL, whichever layer (Python, TensorFlow, Reverb) met it."""
import errno
import re
import sys
from typing import Iterator, Optional

from absl import logging

from tfrl import exit_statuses

# What the C++ layers (TensorFlow's file system, Reverb's checkpointer) put in the
# message of the error they raise for ENOSPC / EDQUOT: they keep no errno.
_MESSAGES = ('No space left on device', 'Disk quota exceeded')
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# A path in such a message: an absolute path starting a word (TensorFlow's messages
# also hold device names such as 'device_/job:localhost/...'), up to a quote, comma,
# semicolon or space.
_PATH = re.compile(r"(?:^|[\s'\"(])(/[^\s'\",;]+)")


def _chain(error: BaseException) -> Iterator[BaseException]:
  """`error` and the errors it was raised from or during (each once)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    yield error
    error = error.__cause__ or error.__context__


def disk_full_message(error: BaseException) -> Optional[str]:
  """'disk full writing <path> (...)' if `error` (or one it came from) is a full disk
  or an exceeded quota; None otherwise."""
  for e in _chain(error):
    text = ' '.join(str(e).split())
    if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS:
      path = e.filename or '(a file)'
      reason = e.strerror or text
    elif any(m in text for m in _MESSAGES):
      found = _PATH.search(text)
      path = found.group(1) if found else '(a file)'
      reason = next(m for m in _MESSAGES if m in text)
    else:
      continue
    return (f'disk full writing {path} ({reason}); free space there (or use a '
            'root_dir on another disk) and run again: the job resumes from its last '
            'complete checkpoint')
  return None


def exit_if_disk_full(error: BaseException) -> None:
  """Ends the program with EXIT_DISK_FULL and one 'error:' line if `error` is a full
  disk; returns otherwise (the caller re-raises).

  Raises:
    SystemExit: status EXIT_DISK_FULL.
  """
  message = disk_full_message(error)
  if message is None:
    return
  logging.error('%s', message)
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.exit(exit_statuses.EXIT_DISK_FULL)

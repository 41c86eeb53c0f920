"""A program for the fork server's tests: reports how it was started, then ends as told.

    python -m forked_target <exit status> [sleep seconds]

Prints one JSON line (argv, cwd, TFRL_TEST_VALUE, whether `sys.path` has this file's
directory, the interpreter's own command line) to stdout and 'on stderr' to stderr, then sleeps and exits with the status.
"""
import json
import os
import sys
import time

if __name__ == '__main__':
  print(json.dumps(dict(argv=sys.argv[1:], cwd=os.getcwd(),
                        value=os.environ.get('TFRL_TEST_VALUE'),
                        main=__name__, path_ok=os.path.dirname(__file__) in sys.path,
                        orig_argv=sys.orig_argv)))
  print('on stderr', file=sys.stderr)
  if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
  sys.exit(int(sys.argv[1]))

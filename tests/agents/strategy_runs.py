"""Runs a script that trains under two `tf.distribute` strategies, in a subprocess.

A process holds one strategy's logical devices and collectives, so each comparison of
strategies (Mirrored on two CPU devices against the default one) runs apart from the
test process, and prints its result as `RESULT <json>`. The comparisons need runs that
repeat exactly: see `tfrl/graph_options.py` for the race that once broke that.
"""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_result_script(script: str, timeout: int) -> dict:
  """Runs `script` with `python -c` on CPU only and returns the JSON it printed.

  Raises:
    AssertionError: the script failed (its stderr's tail in the message).
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='',
             PYTHONPATH=REPO)
  result = subprocess.run([sys.executable, '-c', script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
  assert result.returncode == 0, result.stderr[-5000:]
  return json.loads(result.stdout.split('RESULT ', 1)[1])

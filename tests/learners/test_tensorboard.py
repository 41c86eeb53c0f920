"""Every program writes the TensorBoard summaries docs/guides/tensorboard.md lists, where
it lists them: one launched job (reverb_server, collect, train, eval) and one train_eval
run; and `tensorboard`, installed with tfrl, starts on a finished job and serves them."""
import collections
import glob
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import ports  # tests/ports.py
import pytest
import python_runs  # tests/python_runs.py
import tensorflow as tf

# Only the summaries' presence is checked: evaluations of 2 episodes (not 10) write the
# same tags.
BINDINGS = ['Experiment.num_train_steps = 512', 'Experiment.target_return = None',
            'Experiment.summary_interval = 64', 'Experiment.eval_interval = 256',
            'Experiment.num_eval_episodes = 2']

# directory under root_dir -> tags (docs/guides/tensorboard.md).
LAUNCHED = {
    'train': {'Losses/td_loss', 'Losses/total_loss', 'train_steps_per_sec'},
    'collect/task_0': {'collect/AverageReturn', 'collect/EnvironmentSteps',
                       'collect/EnvStepsPerSecond'},
    'eval': {'eval/AverageReturn', 'eval/AverageReturn_vs_env_steps'},
    'replay': {'replay/replay/size', 'replay/variables/size'},
}
ONE_PROCESS = {
    'train': {'Losses/td_loss', 'train_steps_per_sec'},
    'collect': {'collect/AverageReturn', 'collect/EnvStepsPerSecond'},
    'eval': {'eval/AverageReturn', 'eval/AverageReturn_vs_env_steps'},
}


def _tags(directory):
  """{tag: number of values} of the event files directly in `directory`."""
  tags = collections.Counter()
  for path in glob.glob(os.path.join(directory, 'events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        tags[value.tag] += 1
  return tags


def _run(program, root_dir, *extra):
  """`python -m learners.<program>` to its end (a fork of the tests' preloaded process,
  tests/python_runs.py; a launcher's programs are forks too)."""
  return python_runs.run(
      ['-m', f'learners.{program}', f'--root_dir={root_dir}', '--gin_file=dqn_cartpole.gin'] +
      [f'--gin_bindings={b}' for b in BINDINGS] + list(extra),  # later bindings win
      timeout=600)


@pytest.fixture(scope='module')
def launched_job(tmp_path_factory):
  """A finished launched job's root_dir (server, one collector, trainer, evaluator)."""
  root = tmp_path_factory.mktemp('launched')
  result = _run('launch', root, '--num_collectors=1', '--timeout_s=300')
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  return str(root)


def test_every_launched_program_writes_its_summaries(launched_job):
  _assert_tags_written(launched_job, LAUNCHED)


def _get_json(url: str):
  with urllib.request.urlopen(url, timeout=10) as response:
    return json.loads(response.read())


def test_tensorboard_serves_the_readmes_scalars_of_a_finished_job(launched_job):
  """`tensorboard --logdir ROOT_DIR`, as the TensorBoard guide says, starts and serves
  every scalar the guide's table lists over its HTTP API, with values."""
  port = ports.free_port()
  command = [os.path.join(os.path.dirname(sys.executable), 'tensorboard'),
             f'--logdir={launched_job}', '--host=127.0.0.1', f'--port={port}']
  server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
  base, wanted = f'http://127.0.0.1:{port}/data/plugin/scalars', LAUNCHED
  try:
    # Until TensorBoard has read every run's events: it loads them after it starts.
    deadline, served = time.monotonic() + 180, {}
    while time.monotonic() < deadline:
      assert server.poll() is None, server.communicate()[0][-3000:]
      try:
        served = _get_json(f'{base}/tags')
      except (urllib.error.URLError, ConnectionError):
        served = {}
      if all(tags <= set(served.get(run, {})) for run, tags in wanted.items()):
        break
      time.sleep(1)
    missing = {run: sorted(tags - set(served.get(run, {})))
               for run, tags in wanted.items() if not tags <= set(served.get(run, {}))}
    assert not missing, f'TensorBoard served no such scalars after 180 s: {missing}'
    for run, tags in wanted.items():
      for tag in tags:
        query = urllib.parse.urlencode({'run': run, 'tag': tag})
        points = _get_json(f'{base}/scalars?{query}')  # [[wall_time, step, value], ...]
        assert points and all(np.isfinite(p[2]) for p in points), (run, tag, points)
  finally:
    server.terminate()
    server.wait(timeout=60)


@pytest.mark.parametrize('program, expected, extra', [
    # The collect actor summarizes every 1,000 env steps of its own (the random warm-up's
    # 1,000 are not): 16 train steps per iteration of 256 env steps (not 128) make 128
    # train steps 8 iterations, about 2,000 env steps (less the uncounted autoreset
    # steps), as many as 1,024 train steps collected at 128 an iteration. Train
    # summaries at steps 64 and 128; the evaluation at the end.
    ('train_eval', ONE_PROCESS, [
        '--gin_bindings=Experiment.num_train_steps = 128',
        '--gin_bindings=Experiment.train_steps_per_iteration = 16']),
], ids=['train_eval'])
def test_each_program_writes_its_summaries(tmp_path, program, expected, extra):
  result = _run(program, tmp_path, *extra)
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  _assert_tags_written(str(tmp_path), expected)


def _assert_tags_written(root_dir, expected):
  for directory, tags in expected.items():
    found = _tags(os.path.join(root_dir, directory))
    assert tags <= set(found), (directory, sorted(found))
    assert all(found[tag] >= 1 for tag in tags)

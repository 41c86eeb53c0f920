"""benchmarks/offline.py and hybrid.py: a recorded run counts as done (is not run again)
and is reported only on the dataset as it is now, named by its content checksum; a
record of another checksum, or of none (made before runs recorded one), does not.

Both scripts define absl flags that another benchmark module imported in this process
defines too (--seeds and --jobs: ablation.py), so they run in a process of their own,
as their scripts do (a fork of the tests' preloaded process, tests/python_runs.py):
each test's code runs there with the flags it passes and prints its `result` as JSON.
"""
import json
import os
import textwrap
from typing import Any, Sequence

import python_runs  # tests/python_runs.py

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'benchmarks')
NEW, OLD = '0123456789abcdef', 'fedcba9876543210'  # the dataset now, and as made before
# A tfrl CQL run on LunarLander's mixed set with offline.py's default settings.
RUN = {'dataset': 'lunarlander_mixed', 'algo': 'tfrl_cql', 'grad_steps': 50_000,
       'hidden': [256, 256], 'train_bindings': []}


def _result(code: str, argv: Sequence[str] = ()) -> Any:
  """`result` after `code` runs with hybrid and offline imported and `argv` parsed."""
  script = textwrap.dedent(f'''
      import json, sys
      sys.path.insert(0, {BENCHMARKS!r})
      from absl import flags
      import hybrid, offline
      flags.FLAGS(['test', *{list(argv)!r}])
      NEW, OLD, RUN = {NEW!r}, {OLD!r}, {RUN!r}
  ''') + textwrap.dedent(code) + '\nprint(json.dumps(result))\n'
  done = python_runs.run(['-c', script], timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.splitlines()[-1])


def test_same_run_takes_a_record_only_on_the_data_of_its_checksum():
  result = _result('''
      records = [dict(RUN, seed=0, dataset_checksum=NEW),
                 dict(RUN, seed=0, dataset_checksum=OLD), dict(RUN, seed=0)]
      result = [[offline.same_run(r, NEW) for r in records],
                [offline.same_run(r, None) for r in records]]
  ''')
  # On the data now: only the record of its checksum. Any data (the report): all three.
  assert result == [[True, False, False], [True, True, True]]


def test_hybrid_counts_a_seed_only_on_the_data_of_its_checksum():
  result = _result('''
      run = dict(hybrid.settings(), seed=0, dataset='halfcheetah_medium_replay')
      result = [hybrid.same_run(dict(run, dataset_checksum=NEW), NEW),
                hybrid.same_run(dict(run, dataset_checksum=OLD), NEW),
                hybrid.same_run(run, NEW),
                hybrid.same_run(dict(run, dataset_checksum=NEW, utd=1), NEW)]
  ''')
  assert result == [True, False, False, False]


def test_train_runs_again_what_ran_on_other_data_or_on_data_of_no_checksum(tmp_path):
  data, out = tmp_path / 'data', tmp_path / 'runs.jsonl'
  data.mkdir()
  (data / 'datasets.json').write_text(json.dumps({'lunarlander_mixed': {
      'name': 'lunarlander_mixed', 'checksum': NEW}}))
  out.write_text(''.join(json.dumps(r) + '\n' for r in [
      dict(RUN, seed=0, dataset_checksum=NEW, curve=[]),
      dict(RUN, seed=1, dataset_checksum=OLD, curve=[]),
      dict(RUN, seed=2, curve=[])]))
  # Each run the train stage starts is recorded at once, without training.
  added = _result('''
      offline.tfrl_run = lambda *args: {'curve': [[10, 1.0, 5.0]], 'seconds': 1.0}
      offline.train_all()
      with open(flags.FLAGS.json_out) as f:
        result = [json.loads(line) for line in f][3:]
  ''', ['--datasets=lunarlander_mixed', '--algos=tfrl_cql', '--seeds=0,1,2', '--skip_peer',
        '--jobs=1', f'--data_dir={data}', f'--json_out={out}',
        f'--runs_dir={tmp_path / "roots"}'])
  assert sorted((r['seed'], r['dataset_checksum']) for r in added) == [(1, NEW), (2, NEW)]


def test_the_report_takes_the_runs_on_the_data_now_and_says_what_it_left_out():
  lines = _result('''
      curve = lambda final: [[50_000, 10.0, final]]
      runs = [dict(RUN, seed=0, dataset_checksum=OLD, curve=curve(-500.0), seconds=1.0),
              dict(RUN, seed=0, dataset_checksum=NEW, curve=curve(100.0), seconds=1.0),
              dict(RUN, seed=1, dataset_checksum=NEW, curve=curve(120.0), seconds=1.0)]
      info = {'episodes': 2, 'transitions': 100, 'mean_return': 0.0, 'checksum': NEW}
      # LunarLander has no D4RL score, and the line would import TensorFlow to say so.
      offline._d4rl_line = lambda *args: None
      result = offline.report_dataset('lunarlander_mixed', info, runs)
  ''', ['--png_dir='])
  text = '\n'.join(lines)
  assert '  left out: 1 run of these settings on other data' in text, text
  cql = next(line for line in lines if line.startswith('  tfrl CQL'))
  assert 's0 100.0, s1 120.0 |' in cql and '-500' not in cql, text


def test_the_peers_copy_of_a_remade_dataset_is_the_new_data(tmp_path):
  """describe_dataset rewrites <name>.npz (d3rlpy's input) for each dataset it describes:
  a copy kept from data since remade would have d3rlpy train on the old data under the
  new data's checksum."""
  result = _result('''
      import numpy as np
      from tfrl.datasets import rlds

      class Made:  # a dataset as rlds.read returns it, of one reward
        def __init__(self, reward):
          self.reward, self.num_episodes, self.num_transitions = reward, 1, 1
        def episode_returns(self):
          return np.array([self.reward])
        def checksum(self):
          return str(self.reward)

      offline.d3rlpy_data.d3rlpy_arrays = lambda made: {'rewards': np.array([made.reward])}
      result = []
      for reward in (1.0, 2.0):  # the dataset, then the dataset remade
        rlds.read = lambda directory, made=Made(reward): made
        checksum = offline.describe_dataset('lunarlander_mixed')['checksum']
        with np.load(offline.path('lunarlander_mixed') + '.npz') as npz:
          result.append([checksum, float(npz['rewards'][0])])
  ''', [f'--data_dir={tmp_path}'])
  assert result == [['1.0', 1.0], ['2.0', 2.0]]

"""Executes every notebook in colabs/ (small settings) and checks its key result."""
import os
import re
import subprocess
import sys
import types

import nbclient
import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLABS = os.path.join(REPO, 'colabs')


def execute(name, parameters, tmp_path):
  """Runs colabs/<name> with `parameters` injected after its parameters cell.

  Returns:
    All text the notebook printed, and the executed notebook.

  Raises:
    nbclient.exceptions.CellExecutionError: a cell failed (the message shows which).
  """
  notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
  index = next(i for i, cell in enumerate(notebook.cells)
               if 'parameters' in cell.metadata.get('tags', []))
  parameters = dict(parameters, ROOT_DIR=str(tmp_path / 'run'))
  injected = '\n'.join(f'{key} = {value!r}' for key, value in parameters.items())
  notebook.cells.insert(index + 1, nbformat.v4.new_code_cell(injected))
  client = nbclient.NotebookClient(notebook, timeout=900, kernel_name='python3',
                                   resources={'metadata': {'path': REPO}})
  client.execute()
  # What a reader sees: the notebook's own output, none of its dependencies' noise.
  shown = _printed(notebook)
  assert not [n for n in NOISE if n in shown], [n for n in NOISE if n in shown]
  text = []
  for cell in notebook.cells:
    for output in cell.get('outputs', []):
      if output.get('output_type') == 'stream':
        text.append(output['text'])
  return ''.join(text), notebook


def _has_image(notebook):
  return any('image/png' in output.get('data', {})
             for cell in notebook.cells for output in cell.get('outputs', []))


def _number(pattern, text):
  match = re.search(pattern, text)
  assert match, f'{pattern!r} not printed:\n{text[-3000:]}'
  return float(match.group(1))


def test_every_notebook_has_a_test():
  tested = {'quickstart.ipynb', 'distributed.ipynb', 'impala_clear.ipynb',
            'serving.ipynb', 'atari.ipynb'}
  assert set(f for f in os.listdir(COLABS) if f.endswith('.ipynb')) == tested


def test_every_notebook_opens_with_the_shared_setup_cell():
  """colabs/sync_notebooks.py --check passes, and each notebook's first code cell is
  colabs/setup_cell.py, its extras aside; no title carries a Colab badge."""
  result = subprocess.run([sys.executable, os.path.join(COLABS, 'sync_notebooks.py'),
                           '--check'], capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stdout + result.stderr
  with open(os.path.join(COLABS, 'setup_cell.py')) as f:
    setup_cell = f.read().rstrip('\n')
  extras = re.compile(r"^EXTRAS = '[\w,]+'", re.M)
  for name in sorted(os.listdir(COLABS)):
    if name.endswith('.ipynb'):
      notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
      setup = next(c for c in notebook.cells if c.cell_type == 'code').source
      assert extras.sub('EXTRAS', setup) == extras.sub('EXTRAS', setup_cell), name
      assert 'colab-badge' not in notebook.cells[0].source, name


def test_no_repository_url_for_tfrl_anywhere():
  """tfrl has no public repository: the README, docs/, colabs/ and deploy/ name no URL
  for it (no placeholder either); the notebooks install from a clone or from the git URL
  a reader puts in the environment variable TFRL_REPO_URL."""
  url = re.compile(r'tfrl-dev|github\.com/[\w.-]+/tfrl\b|colab\.research\.google\.com/github/')
  paths = [os.path.join(REPO, 'README.md')] + [
      os.path.join(folder, f) for top in ('docs', 'colabs', 'deploy')
      for folder, _, files in os.walk(os.path.join(REPO, top)) for f in files]
  checked = 0
  for path in paths:
    try:
      with open(path, encoding='utf-8') as f:
        text = f.read()
    except UnicodeDecodeError:
      continue  # an image
    checked += 1
    assert not url.search(text), (path, url.search(text).group(0))
  assert checked > 20, checked
  with open(os.path.join(COLABS, 'setup_cell.py')) as f:
    setup_cell = f.read()
  assert "os.environ.get('TFRL_REPO_URL')" in setup_cell
  assert '://' not in setup_cell


STOP = ('tfrl installs from a clone: open this notebook from one, or set TFRL_REPO_URL to '
        'the git URL you serve tfrl from (%env TFRL_REPO_URL=... in a cell above).')


def test_the_setup_cell_stops_outside_a_clone_without_tfrl_repo_url(tmp_path):
  """Run where tfrl is not importable (python -S -I: no site-packages), from a folder
  that is no clone and with TFRL_REPO_URL unset, the cell stops with one line before it
  installs or imports anything."""
  env = {k: v for k, v in os.environ.items() if k != 'TFRL_REPO_URL'}
  result = subprocess.run([sys.executable, '-S', '-I', os.path.join(COLABS, 'setup_cell.py')],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
  assert result.returncode == 1, result.stdout + result.stderr
  assert result.stdout == '', result.stdout  # no 'Installing ...'
  assert result.stderr == STOP + '\n', result.stderr


@pytest.mark.parametrize('where', ['clone', 'colabs_of_clone', 'url', 'clone_and_url'])
def test_the_setup_cell_installs_the_clone_else_tfrl_repo_url(where, tmp_path, monkeypatch):
  """What the cell hands pip when tfrl is not importable: the clone it runs in (from its
  root or colabs/), else the git URL in TFRL_REPO_URL. pip is not run."""
  with open(os.path.join(COLABS, 'setup_cell.py')) as f:
    source = f.read()
  code = source.replace('import importlib, importlib.util, os, subprocess, sys\n', '')
  assert code != source
  monkeypatch.chdir({'clone': REPO, 'colabs_of_clone': COLABS, 'url': tmp_path,
                     'clone_and_url': REPO}[where])
  monkeypatch.delenv('TFRL_REPO_URL', raising=False)
  if 'url' in where:
    monkeypatch.setenv('TFRL_REPO_URL', 'https://git.example/tfrl.git')
  calls = []

  class Installed(Exception):
    pass

  def check_call(args):
    calls.append(args)
    raise Installed  # stop before `import tfrl`

  fake_importlib = types.SimpleNamespace(
      util=types.SimpleNamespace(find_spec=lambda name: None), invalidate_caches=None)
  namespace = dict(importlib=fake_importlib, os=os, sys=sys,
                   subprocess=types.SimpleNamespace(check_call=check_call))
  with pytest.raises(Installed):
    exec(compile(code, 'setup_cell.py', 'exec'), namespace)  # pylint: disable=exec-used
  expected = (['tfrl[notebooks] @ git+https://git.example/tfrl.git'] if where == 'url'
              else ['-e', f'{REPO}[notebooks]'])
  assert calls == [[sys.executable, '-m', 'pip', 'install', '-q', *expected]]


def test_the_setup_cell_stops_on_a_python_tfrl_cannot_serve():
  """On Python 3.12+ (Colab's default runtimes since 2025) the first cell stops with
  one message saying what to do, before it installs anything."""
  with open(os.path.join(COLABS, 'setup_cell.py')) as f:
    source = f.read()
  for version in ((3, 12, 0), (3, 13, 1), (3, 8, 10)):
    fake_sys = type('sys', (), {'version_info': version,
                                'version': '.'.join(map(str, version)) + ' (fake)'})
    namespace = {}
    code = source.replace('import importlib, importlib.util, os, subprocess, sys',
                          'import importlib, importlib.util, os, subprocess')
    with pytest.raises(SystemExit) as stop:
      exec(compile(code, 'setup_cell.py', 'exec'), dict(namespace, sys=fake_sys))  # pylint: disable=exec-used
    message = str(stop.value)
    assert message.startswith('tfrl needs Python 3.9-3.11 and this runtime has '
                              f'{".".join(map(str, version))}.')
    assert 'Change runtime type' in message and '2025.07' in message
    assert 'python3.11 -m venv' in message and 'ipykernel install' in message
    assert 'pip install -e ".[notebooks]"' in message and '://' not in message


def test_committed_notebooks_carry_outputs_of_a_full_run():
  for name in os.listdir(COLABS):
    if name.endswith('.ipynb'):
      notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
      code = [c for c in notebook.cells if c.cell_type == 'code']
      assert all(c.get('execution_count') for c in code), f'{name} has unexecuted cells'
      assert _has_image(notebook) or name == 'serving.ipynb', f'{name} has no plots'


NOISE = ('Unable to register', 'cpu_feature_guard', 'unmaintained', '[reverb/cc/',
         'Path not found', 'signature_serialization', 'WARNING:tensorflow', 'ALSA lib')


def _printed(notebook) -> str:
  """Every text output of a notebook: streams, and the plain text of other outputs."""
  return ''.join(
      output.get('text', '') + output.get('data', {}).get('text/plain', '')
      for cell in notebook.cells for output in cell.get('outputs', []))


def test_committed_outputs_show_the_notebooks_own_output_only():
  """No TensorFlow CUDA-factory lines, gym notice or Reverb C++ lines, nothing a reader
  takes for an error: what the notebook itself prints, a progress bar, its plots."""
  for name in sorted(os.listdir(COLABS)):
    if name.endswith('.ipynb'):
      notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
      text = _printed(notebook)
      assert not [n for n in NOISE if n in text], (name, [n for n in NOISE if n in text])
      assert not re.search(r'^[EW]\d{4} ', text, re.M), name
      assert not [c for c in notebook.cells for o in c.get('outputs', [])
                  if o.get('output_type') == 'error'], name


@pytest.mark.slow
def test_quickstart(tmp_path):
  # 1,024 DQN train steps (two evaluations) play well past 50 (above 200 with seed 0),
  # and a clone of such a policy's noisy episodes plays as well as they do after 500 of
  # its train steps (seed 0: 250 against their 178): 1,000 (two evaluations) leave room,
  # where bc_cartpole.gin's 5,000 with no target evaluated ten times. (The dataset needs
  # at least as many episodes as bc_cartpole.gin's 16 envs.)
  text, notebook = execute('quickstart.ipynb', dict(
      NUM_TRAIN_STEPS=1024, TARGET_RETURN=None, EXPECTED_MIN_RETURN=50.0,
      DATASET_EPISODES=20, EXPECTED_MIN_CLONE_RETURN=0.0, CLONE_TRAIN_STEPS=1000),
      tmp_path)
  assert _number(r'FINAL_EVAL_RETURN = (-?[\d.]+)', text) >= 50.0
  assert 'Reloaded policy, one rendered episode' in text
  assert _has_image(notebook)
  # The half-trained policy's noisy episodes, cloned offline: the greedy clone plays at
  # least about as well as the data it learned from.
  assert 'Recorded 20 episodes' in text
  data_return = _number(r'DATASET_MEAN_RETURN = (-?[\d.]+)', text)
  assert 'Behaviour cloning, 0 env steps' in text
  assert _number(r'CLONE_RETURN = (-?[\d.]+)', text) >= 0.8 * data_return, text[-2000:]


@pytest.mark.slow
def test_atari(tmp_path):
  """A few train steps of Breakout: progress rows, a curve, an export that plays a game."""
  # A budget of train steps, not seconds, so that a loaded machine trains as far as a
  # fast one. Two games, not the config's 8: each train step's PPO epochs then go over
  # 256 frames, not 1,024 (the same networks, layout and export). The score needs a
  # finished game: the last progress row before the final evaluation's (train step 4)
  # is train step 3's, after 384 steps of each game.
  text, notebook = execute('atari.ipynb', dict(
      TRAIN_SECONDS=None, NUM_TRAIN_STEPS=4, LOG_INTERVAL=1, EXPECTED_MIN_SCORE=None,
      MAX_GAME_STEPS=300, GIN_BINDINGS=['Experiment.num_envs = 2', 'Experiment.batch_size = 2',
                                        'Experiment.env_workers = 1']), tmp_path)
  assert _number(r'FINAL_TRAIN_SCORE = (-?[\d.]+|nan)', text) >= 0.0
  assert re.search(r'frames uint8 \(84, 84, 4\); one game: score \d+ in \d+ steps', text), text
  assert _has_image(notebook)


@pytest.mark.slow
def test_distributed(tmp_path):
  # One collector: the server's rate limiter ties training to collection either way, and
  # each program is a process that imports TensorFlow.
  text, _ = execute('distributed.ipynb', dict(
      GIN_BINDINGS=['Experiment.num_train_steps = 1024', 'Experiment.eval_interval = 512'],
      NUM_COLLECTORS=1, STATUS_INTERVAL_S=2, TIMEOUT_S=600, EXPECTED_MIN_RETURN=30.0,
      PBT_GIN_BINDINGS=['Experiment.target_return = None', 'Experiment.num_train_steps = 16',
                        'Experiment.eval_interval = 4', 'Experiment.num_eval_episodes = 2'],
      PBT_POPULATION=2, PBT_READY_INTERVAL=2048), tmp_path)
  assert _number(r'FINAL_EVAL_RETURN = (-?[\d.]+)', text) >= 30.0
  assert _number(r'ORPHANS = (\d+)', text) == 0
  # The population: its best member's return and each member's lineage from its start.
  assert _number(r'PBT_BEST_RETURN = (-?[\d.]+)', text) > 0
  for member in (0, 1):
    assert re.search(rf'LINEAGE member {member} at +0 env steps: start +learning_rate ',
                     text), text[-2000:]


@pytest.mark.slow
def test_impala_clear(tmp_path):
  # The task sequence through all three tasks: 6 train steps of 512 env steps each.
  sequence = ['Experiment.task_env_steps = 1024', 'Experiment.num_train_steps = 6',
              'Experiment.eval_interval = 2', 'Experiment.num_eval_episodes = 1']
  # CartPole for 100 train steps, not 300: the loss summaries are written at train step
  # 100 (summary_interval), and the evaluation there gives each curve its point.
  text, notebook = execute('impala_clear.ipynb', dict(
      NUM_TRAIN_STEPS=100, TARGET_RETURN=None, EXPECTED_MIN_RETURN=0.0,
      SEQUENCE_BINDINGS=sequence, EXPECTED_MAX_FORGETTING_RATIO=None), tmp_path)
  assert _number(r'IMPALA_FINAL_RETURN = (-?[\d.]+)', text) > 0
  assert _number(r'CLEAR_FINAL_RETURN = (-?[\d.]+)', text) > 0
  tags = re.search(r'SUMMARY_TAGS = (.*)', text).group(1)
  for term in ('policy_loss', 'baseline_loss', 'policy_cloning_loss', 'value_cloning_loss'):
    assert f'losses/{term}' in tags
  for name in ('IMPALA', 'CLEAR'):  # a forgetting figure and every task's returns
    line = re.search(rf'{name}_MEAN_FORGETTING = (-?[\d.]+) \| (.*)', text)
    assert line and float(line.group(1)) >= 0.0, text[-2000:]
    for task in ('DoorKey-5x5', 'LavaGapS5', 'SimpleCrossingS9N1'):
      assert f'MiniGrid-{task}-v0: best ' in line.group(2)
  images = [c for c in notebook.cells for o in c.get('outputs', []) if 'image/png' in
            o.get('data', {})]
  assert len(images) == 3, len(images)  # CartPole's curves, the losses, the tasks


@pytest.mark.slow
def test_serving(tmp_path):
  text, _ = execute('serving.ipynb', dict(
      FIRST_TRAIN_STEPS=256, MORE_TRAIN_STEPS=512, NUM_CALLS=50,
      RECURRENT_TRAIN_STEPS=4), tmp_path)
  match = re.search(r'REFRESHED_FROM = (\d+) TO = (\d+)', text)
  assert match and int(match.group(2)) > int(match.group(1)), text[-2000:]
  assert _number(r'LATENCY_MS_BATCH_1 = ([\d.]+)', text) > 0
  assert _number(r'LATENCY_MS_BATCH_64 = ([\d.]+)', text) > 0
  # The LSTM export served with its state carried by the caller plays whole episodes.
  assert _number(r'RECURRENT_SERVED_RETURN = ([\d.]+)', text) >= 8.0
  assert "state inputs: ['policy_state" in text
  # predict on numpy acts as the signatures do, and carries the LSTM's state.
  assert 'PREDICT_EQUALS_SIGNATURE = True' in text, text[-3000:]
  assert 'PREDICT_RETURNS_EQUAL = True' in text, text[-3000:]
  # The TF Serving version directory exists and the request's answer has one action each.
  assert re.search(r"\| versions: \['\d+'", text), text[-3000:]
  assert re.search(r'answer: \{"predictions": \[\d, \d\]\}', text), text[-3000:]

"""Every program writes the TensorBoard summaries README.md lists, where it lists them:
one launched job (reverb_server, collect, train, eval) and one train_eval run."""
import collections
import glob
import os
import subprocess
import sys

import pytest
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Only the summaries' presence is checked: evaluations of 2 episodes (not 10) write the
# same tags.
BINDINGS = ['Experiment.num_train_steps = 512', 'Experiment.target_return = None',
            'Experiment.summary_interval = 64', 'Experiment.eval_interval = 256',
            'Experiment.num_eval_episodes = 2']

# directory under root_dir -> tags (README.md, "TensorBoard").
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
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  return subprocess.run(
      [sys.executable, '-m', f'learners.{program}', f'--root_dir={root_dir}',
       '--gin_file=dqn_cartpole.gin'] + [f'--gin_bindings={b}' for b in BINDINGS] +
      list(extra),  # later bindings win
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize('program, expected, extra', [
    ('launch', LAUNCHED, ['--num_collectors=1', '--timeout_s=300']),
    # The collect actor summarizes every 1,000 env steps of its own (the random warm-up's
    # 1,000 are not): 16 train steps per iteration of 256 env steps (not 128) make 128
    # train steps 8 iterations, about 2,000 env steps (less the uncounted autoreset
    # steps), as many as 1,024 train steps collected at 128 an iteration. Train
    # summaries at steps 64 and 128; the evaluation at the end.
    ('train_eval', ONE_PROCESS, [
        '--gin_bindings=Experiment.num_train_steps = 128',
        '--gin_bindings=Experiment.train_steps_per_iteration = 16']),
], ids=['launch', 'train_eval'])
def test_each_program_writes_its_summaries(tmp_path, program, expected, extra):
  result = _run(program, tmp_path, *extra)
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  for directory, tags in expected.items():
    found = _tags(os.path.join(tmp_path, directory))
    assert tags <= set(found), (directory, sorted(found))
    assert all(found[tag] >= 1 for tag in tags)

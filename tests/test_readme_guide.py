"""The "Your own agent" guide (docs/guides/own-agent.md, linked from the README) runs as
written: its builder trains under train_eval from the layout it names, and the policy it
exports plays."""
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import tfrl.envs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join('docs', 'guides', 'own-agent.md')
MARKER = '# guide: your own agent'


def guide_code() -> str:
  with open(os.path.join(REPO, GUIDE)) as f:
    page = f.read()
  blocks = re.findall(r'```python\n(.*?)```', page, flags=re.S)
  guides = [block for block in blocks if block.startswith(MARKER)]
  assert len(guides) == 1, f'{GUIDE} has one guide block'
  return guides[0]


@pytest.mark.integration
def test_the_guides_agent_trains_and_its_export_plays(tmp_path):
  code = guide_code()
  # The guide's two settings, shrunk for the suite (the lines must exist as written).
  for line, small in ((r"ROOT_DIR = 'runs/my_dqn'", f'ROOT_DIR = {str(tmp_path)!r}'),
                      ('NUM_TRAIN_STEPS = 20_000', 'NUM_TRAIN_STEPS = 200')):
    assert line in code
    code = code.replace(line, small)
  code += '\nresult_for_test = result\n'
  namespace = {'__name__': 'readme_guide'}
  exec(compile(code, f'{GUIDE} (guide)', 'exec'), namespace)  # pylint: disable=exec-used

  result = namespace['result_for_test']
  assert result['train_step'] >= 200  # whole iterations of the config's train steps
  assert type(namespace['create_my_dqn'](
      *_cartpole_specs(), tf.Variable(0, dtype=tf.int64))).__name__ == 'DqnAgent'
  policy = tf.saved_model.load(result['greedy_policy_dir'])
  env = tfrl.envs.make('CartPole-v1', num_envs=2, seed=0)
  time_step = env.reset()
  actions = policy.action(time_step, policy.get_initial_state(2)).action.numpy()
  env.close()
  assert actions.shape == (2,) and set(np.unique(actions)) <= {0, 1}


def _cartpole_specs():
  env = tfrl.envs.make('CartPole-v1', num_envs=1)
  specs = env.time_step_spec(), env.action_spec()
  env.close()
  return specs

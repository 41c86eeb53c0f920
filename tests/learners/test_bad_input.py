"""Bad input fails at configuration with one 'error:' line and exit status 2; the
Reverb exposure warning prints once; a mid-episode observation shape change
names its env; a full disk is one line and exit status 6; train_steps_per_sec is written
for DQN-like runs."""
import dataclasses
import errno
import functools
import glob
import os
import socket
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import python_runs  # tests/python_runs.py
import tensorflow as tf

import tfrl.envs
from learners import train_eval
from learners.configuration import config
from learners.configuration import validation
from learners.configuration.experiment import Experiment
from learners.processes import disk_full
from learners.processes import launcher as launcher_lib
from learners.processes import process
from tfrl import export
from tfrl import layouts
from tfrl import replay
from tfrl.replay import network

from programs import REPO, program_env  # tests/learners/programs.py
from test_train_eval import TINY, _summary_values  # tests/learners/test_train_eval.py

TIMEOUT_S = 300  # a TF program's start on a loaded machine; a hang fails, not slowness


def _cli(program, *args, prefix=()):
  if not prefix:
    return python_runs.run(['-m', f'learners.{program}', *args], timeout=TIMEOUT_S,
                           env=program_env())
  return subprocess.run([*prefix, sys.executable, '-m', f'learners.{program}', *args],
                        cwd=REPO, env=program_env(), capture_output=True, text=True,
                        timeout=TIMEOUT_S)


def _error_lines(stderr):
  return [l for l in stderr.splitlines() if l.startswith('error:')]


@pytest.fixture
def busy_port():
  """A port something listens on (IPv4 wildcard), as another server's would be."""
  with socket.socket() as sock:
    sock.bind(('0.0.0.0', 0))
    sock.listen()
    yield sock.getsockname()[1]


@pytest.mark.parametrize('field, value, message', [
    ('num_envs', 0, 'Experiment.num_envs = 0: must be an integer >= 1'),
    ('batch_size', -1, 'Experiment.batch_size = -1: must be an integer >= 1'),
    ('num_envs', 'four', "Experiment.num_envs = 'four': must be an integer >= 1"),
    ('gamma', 1.5, 'Experiment.gamma = 1.5: must be a number in [0, 1]'),
    ('layout_settings', {'n_step': 0}, 'TransitionReplay.n_step = 0: must be an integer '
     '>= 1'),
    ('layout_settings', {'replay_fraction': 0.5}, 'TransitionReplay.replay_fraction = 0.5: '
     'TransitionReplay has no such setting (its settings: n_step, steps_per_item, '),
    ('log_interval', 0, 'Experiment.log_interval = 0: must be an integer >= 1, or None'),
    ('env_name', 'CartPol-v1', "Experiment.env_name = 'CartPol-v1': Unknown environment "
     "id 'CartPol-v1'. Close registered ids: CartPole-v1"),
    ('env_name', 42, "Experiment.env_name = 42: must be a gymnasium id, a "
     "'module:function' string, a function returning a gymnasium env, or an env object"),
    ('env_name', 'no_such_module_q:make', "Experiment.env_name = 'no_such_module_q:make':"
     " Env 'no_such_module_q:make': cannot import 'no_such_module_q'"),
    ('env_backend', 'brax', "Experiment.env_backend = 'brax': must be one of 'gymnasium',"
     " 'envpool'"),
])
def test_a_bad_field_is_one_line_naming_field_value_and_what_is_allowed(field, value,
                                                                        message):
  with pytest.raises(validation.ValidationError) as raised:
    Experiment(**{field: value})
  assert raised.value.message.startswith(message) and '\n' not in raised.value.message
  # The Python entry point says the same, without a prefix that hides it.
  with pytest.raises(config.ConfigError) as raised:
    train_eval.run('unused', ['dqn_cartpole.gin'], **{field: value})
  assert str(raised.value).startswith(message)


@pytest.mark.parametrize('gin_file, binding, message', [
    ('dqn_cartpole.gin', 'create_dqn_agent.learning_rate = -1e-3',
     'create_dqn_agent.learning_rate = -0.001: must be a number in (0, 1]'),
    ('dqn_cartpole.gin', 'create_dqn_agent.epsilon_end = 1.5',
     'create_dqn_agent.epsilon_end = 1.5: must be a number in [0, 1]'),
    ('ppo_cartpole.gin', 'create_ppo_agent.entropy_cost = -0.01',
     'create_ppo_agent.entropy_cost = -0.01: must be a number >= 0'),
    ('ppo_cartpole.gin', 'create_ppo_agent.clip_ratio = 0',
     'create_ppo_agent.clip_ratio = 0: must be a number in (0, 1]'),
    ('ppo_cartpole.gin', 'create_ppo_agent.lambda_ = 2.0',
     'create_ppo_agent.lambda_ = 2.0: must be a number in [0, 1]'),
    ('ppo_cartpole.gin', 'create_ppo_agent.num_minibatches = 0',
     'create_ppo_agent.num_minibatches = 0: must be an integer >= 1'),
    ('sac_pendulum.gin', 'create_sac_agent.target_update_tau = 0.0',
     'create_sac_agent.target_update_tau = 0.0: must be a number in (0, 1]'),
    ('impala_cartpole.gin', 'create_impala_agent.fc_layer_params = (64, 0)',
     'create_impala_agent.fc_layer_params = (64, 0): must be a tuple of layer sizes'),
])
def test_an_agent_setting_out_of_range_fails_at_configuration(gin_file, binding, message):
  with pytest.raises(config.ConfigError) as raised:
    config.parse([gin_file], [binding])
  assert str(raised.value).startswith(message) and '\n' not in str(raised.value)


def test_a_partials_agent_settings_are_checked_too():
  from tfrl.agents import iql  # pylint: disable=g-import-not-at-top
  with pytest.raises(validation.ValidationError) as raised:
    Experiment(env_name='Pendulum-v1',
               agent_fn=functools.partial(iql.create_iql_agent, expectile=1.0))
  assert raised.value.message == ('create_iql_agent.expectile = 1.0: must be a number in '
                                  '(0, 1)')


def test_every_bundled_configs_agent_settings_pass_the_rules():
  for path in sorted(glob.glob(os.path.join(config.CONFIG_DIR, '*.gin'))):
    config.parse([path])  # raises ConfigError naming the setting


def test_a_negative_learning_rate_from_the_command_line_is_one_error_line(tmp_path):
  result = _cli('train_eval', f'--root_dir={tmp_path / "run"}', '--gin_file=dqn_cartpole.gin',
                '--gin_bindings=create_dqn_agent.learning_rate = -1e-3')
  assert result.returncode == 2, result.stderr[-2000:]
  assert _error_lines(result.stderr) == [
      'error: create_dqn_agent.learning_rate = -0.001: must be a number in (0, 1]']
  assert not (tmp_path / 'run').exists()


def test_an_agent_that_cannot_act_in_the_envs_action_space_names_both_and_the_way_out(
    tmp_path):
  with pytest.raises(config.ConfigError) as raised:
    config.parse(['dqn_cartpole.gin'], ["Experiment.env_name = 'Pendulum-v1'"])
  message = str(raised.value)
  assert message.startswith('create_dqn_agent acts in discrete action spaces; Pendulum-v1 '
                            'has continuous actions (Box(-2.0, 2.0, (1,), float32)). Use '
                            'another agent (configs for Pendulum-v1: '), message
  # Every bundled Pendulum config whose agent acts in a Box, and only those.
  assert message.endswith('cql_pendulum.gin, impala_pendulum.gin, iql_pendulum.gin, '
                          'ppo_pendulum.gin, sac_pendulum.gin).'), message
  # An env no config trains: the builders that can act there.
  with pytest.raises(config.ConfigError,
                     match=r'create_sac_agent acts in continuous action spaces; Acrobot-v1 '
                           r'has discrete actions \(Discrete\(3\)\)\. Use another agent '
                           r'\(agents that can: create_dqn_agent, create_bc_agent, '
                           r'create_ppo_agent, create_impala_agent, create_clear_agent\)'):
    config.parse(['sac_pendulum.gin'], ["Experiment.env_name = 'Acrobot-v1'"])
  # From Python with an Experiment object: refused before the job claims root_dir.
  from tfrl.agents import sac  # pylint: disable=g-import-not-at-top
  with pytest.raises(config.ConfigError, match='^create_sac_agent acts in continuous'):
    train_eval.train_eval(str(tmp_path / 'run'), experiment=Experiment(
        env_name='CartPole-v1', agent_fn=sac.create_sac_agent))
  assert not (tmp_path / 'run').exists()


def test_env_workers_beyond_num_envs():
  with pytest.raises(validation.ValidationError) as raised:
    Experiment(num_envs=2, env_workers=3)
  assert raised.value.message == ('Experiment.env_workers = 3: must be at most '
                                  'Experiment.num_envs (2): each worker steps at least '
                                  'one env')


def test_envpool_backend_with_env_workers_is_refused_at_configuration():
  with pytest.raises(ValueError, match="env_workers = 2 with env_backend = 'envpool'"):
    Experiment(env_backend='envpool', env_workers=2)


def test_the_backend_rule_allows_exactly_the_backends_tfrl_envs_has():
  rule = validation.EXPERIMENT_RULES['env_backend']
  assert all(rule.check(backend) for backend in tfrl.envs.BACKENDS)
  assert rule.allowed == 'must be one of ' + ', '.join(map(repr, tfrl.envs.BACKENDS))


def test_every_field_has_a_rule_and_a_later_field_is_ready():
  names = {f.name for f in Experiment.__dataclass_fields__.values()}
  assert names <= set(validation.EXPERIMENT_RULES)
  rule = validation.EXPERIMENT_RULES['env_step_timeout_s']
  assert rule.check(0) and rule.check(2.5) and not rule.check(-1) and not rule.check('x')


def test_every_layout_setting_has_a_rule():
  for layout_class in layouts.ALL:
    own = {f.name for f in dataclasses.fields(layout_class)} - set(
        validation.JOB_LAYOUT_FIELDS)
    assert own <= set(validation.LAYOUT_RULES), layout_class.__name__


def test_program_flags_out_of_range():
  class Flags:
    port, num_collectors, timeout_s = 8000, 0, 0.0
  with pytest.raises(validation.ValidationError,
                     match='^--num_collectors = 0: must be an integer >= 1$'):
    validation.check_flags(Flags, ('port', 'num_collectors', 'timeout_s'))
  Flags.num_collectors, Flags.port = 1, 70000
  with pytest.raises(validation.ValidationError, match=r'^--port = 70000: must be a port '):
    validation.check_flags(Flags, ('port', 'num_collectors', 'timeout_s'))


def test_root_dir_at_a_file(tmp_path):
  path = tmp_path / 'a_file'
  path.write_text('')
  with pytest.raises(validation.ValidationError,
                     match=f'--root_dir = {path}: is a file; it must be a directory'):
    validation.check_root_dir(str(path))
  with pytest.raises(validation.ValidationError, match=f'is below the file {path}'):
    validation.check_root_dir(str(path / 'run'))
  validation.check_root_dir(str(tmp_path / 'new' / 'run'))  # can be made: fine


def test_busy_port_named_before_anything_starts(tmp_path, busy_port):
  with pytest.raises(replay.PortInUseError,
                     match=f'^port {busy_port} is already in use \\(IPv4'):
    replay.check_port_free(busy_port)
  with pytest.raises(replay.PortInUseError, match=f'port {busy_port} is already in use'):
    replay.ReplayServer([replay.variables_table({'x': tf.TensorSpec((), tf.int64)})],
                        port=busy_port)
  with pytest.raises(config.ConfigError, match=f'^port {busy_port} is already in use'):
    launcher_lib.Launcher(str(tmp_path / 'job'), ['dqn_cartpole.gin'], port=busy_port)
  assert not os.path.exists(tmp_path / 'job' / 'logs' / 'reverb_server.log')


def test_a_running_reverb_server_port_counts_as_busy():
  # Reverb 0.14's gRPC listener sets SO_REUSEPORT, so a second server on its port
  # would start and share it: the check must still see the port as taken.
  server = replay.ReplayServer([replay.variables_table({'x': tf.TensorSpec((), tf.int64)})])
  try:
    with pytest.raises(replay.PortInUseError, match=f'port {server.port} is already'):
      replay.check_port_free(server.port)
  finally:
    server.stop()


def test_exposure_warning_once_per_process_on_stderr(monkeypatch, capfd):
  monkeypatch.setattr(network, '_warned', False)
  servers = [replay.ReplayServer([replay.variables_table(
      {'x': tf.TensorSpec((), tf.int64)})]) for _ in range(2)]
  for server in servers:
    server.stop()
  err = capfd.readouterr().err
  assert err.count('WARNING: Reverb server on port') == 1
  assert f'port {servers[0].port} listens on ALL network interfaces' in err


def test_eval_errors_on_a_missing_path_and_on_a_module_that_is_not_a_policy(tmp_path):
  with pytest.raises(FileNotFoundError, match='No SavedModel at'):
    export.load_policy(str(tmp_path / 'missing'))
  module = tf.Module()
  module.v = tf.Variable(1.0)
  tf.saved_model.save(module, str(tmp_path / 'module'))
  with pytest.raises(export.NotAPolicyError, match='is not an exported policy'):
    export.load_policy(str(tmp_path / 'module'))
  # And the program: one line, status 2.
  result = _cli('eval', f'--root_dir={tmp_path}', '--gin_file=dqn_cartpole.gin',
                f'--saved_model_dir={tmp_path / "module"}')
  assert result.returncode == 2, result.stderr[-2000:]
  assert _error_lines(result.stderr) == [
      f"error: --saved_model_dir: The SavedModel at '{tmp_path / 'module'}' is not an "
      'exported policy: it has no policy_specs.pbtxt (export one with '
      'tfrl.export.export_policy).'], result.stderr[-2000:]


def test_launch_validates_before_starting_and_blames_the_right_field(tmp_path):
  result = _cli('launch', f'--root_dir={tmp_path / "job"}', '--gin_file=dqn_cartpole.gin',
                '--gin_bindings=Experiment.batch_size = -1')
  assert result.returncode == 2, result.stderr[-2000:]
  assert _error_lines(result.stderr) == [
      'error: Experiment.batch_size = -1: must be an integer >= 1'], result.stderr[-2000:]
  assert 'Started' not in result.stdout + result.stderr  # no child was started


def test_train_eval_root_dir_at_a_file(tmp_path):
  path = tmp_path / 'a_file'
  path.write_text('')
  result = _cli('train_eval', f'--root_dir={path}', '--gin_file=dqn_cartpole.gin')
  assert result.returncode == 2, result.stderr[-2000:]
  assert _error_lines(result.stderr) == [
      f'error: --root_dir = {path}: is a file; it must be a directory (or a path where '
      'one can be made)'], result.stderr[-2000:]


class _ShapeShifter(gym.Env):
  """CartPole-sized observations until step 3 of an episode, then one more entry."""
  observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
  action_space = gym.spaces.Discrete(2)

  def reset(self, seed=None, options=None):
    super().reset(seed=seed)
    self._t = 0
    return np.zeros(4, np.float32), {}

  def step(self, action):
    self._t += 1
    return np.zeros(5 if self._t >= 3 else 4, np.float32), 1.0, False, False, {}


def test_observation_shape_change_names_env_sub_env_and_shapes():
  if 'tfrl-test/ShapeShifter-v0' not in gym.registry:
    gym.register('tfrl-test/ShapeShifter-v0', entry_point=_ShapeShifter)
  env = tfrl.envs.make('tfrl-test/ShapeShifter-v0', num_envs=3)
  env.reset()
  with pytest.raises(tfrl.envs.ObservationShapeError) as raised:
    for _ in range(3):
      env.step(np.zeros(3, np.int64))
  env.close()
  assert str(raised.value) == (
      "Env 'tfrl-test/ShapeShifter-v0' (sub-env 0) returned an observation of shape (5,) "
      'at step 3 of its episode; its observation space declares (4,)')


@pytest.mark.integration
def test_train_steps_per_sec_written_whenever_the_trigger_fires(tmp_path):
  # 5-step runs and a summary interval of 7, as DQN's 128-step runs and 1,000: the
  # trigger fires once 7 steps have passed since it last fired (steps 10, 20, 30),
  # none of them a multiple of 7, where the learner records nothing.
  root = str(tmp_path / 'dqn')
  train_eval.run(root, ['dqn_cartpole.gin'], num_train_steps=30, summary_interval=7,
                 **TINY)
  steps = [step for step, _ in _summary_values(os.path.join(root, 'train'))
           ['train_steps_per_sec']]
  assert steps == [10, 20, 30]


def test_disk_full_is_one_line_and_its_own_status(capsys):
  def work(unused_stop_event):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), '/data/job/train/ckpt-7.index')
  with pytest.raises(SystemExit) as exited:
    process.run_program(work, 'test')
  assert exited.value.code == process.EXIT_DISK_FULL == 6
  assert _error_lines(capsys.readouterr().err) == [
      'error: disk full writing /data/job/train/ckpt-7.index (No space left on device); '
      'free space there (or use a root_dir on another disk) and run again: the job '
      'resumes from its last complete checkpoint']
  # TensorFlow and Reverb keep no errno: their message is recognised, and its path.
  tf_error = tf.errors.ResourceExhaustedError(
      None, None, '{{function_node __wrapped__SaveV2_device_/job:localhost/task:0}} '
      '/data/job/reverb/tmp/tables.tfrecord; No space left on device [Op:SaveV2]')
  assert disk_full.disk_full_message(RuntimeError('checkpoint failed')) is None
  assert disk_full.disk_full_message(tf_error).startswith(
      'disk full writing /data/job/reverb/tmp/tables.tfrecord (No space left on device)')


def _unshare_works() -> bool:
  try:
    return subprocess.run(['unshare', '-rm', 'true'], capture_output=True,
                          timeout=30).returncode == 0
  except (OSError, subprocess.TimeoutExpired):
    return False


@pytest.mark.integration
def test_a_real_full_disk_ends_train_eval_with_status_6(tmp_path):
  """On a 256 KiB tmpfs (a private mount namespace: `unshare -rm`, no root needed);
  where user namespaces are off, the same program is run with `open` failing ENOSPC
  for files under root_dir (a simulation at the write layer)."""
  root = tmp_path / 'small'
  root.mkdir()
  args = [f'--root_dir={root}', '--gin_file=dqn_cartpole.gin',
          *[f'--gin_bindings=Experiment.{k} = {v}' for k, v in TINY.items()],
          '--gin_bindings=Experiment.num_train_steps = 50']
  if _unshare_works():
    command = ['unshare', '-rm', 'sh', '-c',
               f'mount -t tmpfs -o size=256k tmpfs {root} && exec "$@"', 'sh',
               sys.executable, '-m', 'learners.train_eval', *args]
  else:
    simulate = ('import builtins, errno, os, runpy, sys\n'
                'real = builtins.open\n'
                'def full(path, mode="r", *a, **k):\n'
                f'  if "w" in mode and str(path).startswith({str(root)!r}):\n'
                '    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))\n'
                '  return real(path, mode, *a, **k)\n'
                'builtins.open = full\n'
                'sys.argv = ["train_eval"] + sys.argv[1:]\n'
                'runpy.run_module("learners.train_eval", run_name="__main__")\n')
    command = [sys.executable, '-c', simulate, *args]
  result = subprocess.run(command, cwd=REPO, env=program_env(), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
  assert result.returncode == process.EXIT_DISK_FULL, result.stderr[-3000:]
  lines = _error_lines(result.stderr)
  assert len(lines) == 1 and lines[0].startswith(f'error: disk full writing {root}/'), (
      result.stderr[-3000:])


def test_launcher_failure_line_carries_the_childs_error_line(tmp_path):
  launcher = launcher_lib.Launcher(str(tmp_path / 'job'), ['dqn_cartpole.gin'])

  class Exited:  # a reverb_server that ended on a full disk
    pid, returncode = 1, process.EXIT_DISK_FULL

    def poll(self):
      return self.returncode

    def wait(self, timeout=None):
      return self.returncode

  with open(launcher.log_path('reverb_server'), 'w') as f:
    f.write('I1125 Serving tables\nerror: disk full writing /x/reverb/t (No space left '
            'on device); free space there\n')
  launcher.processes['reverb_server'] = Exited()
  with pytest.raises(launcher_lib.JobFailedError) as raised:
    launcher.done()
  assert str(raised.value).splitlines()[0] == (
      'reverb_server stopped: disk full (exit status 6): error: disk full writing '
      '/x/reverb/t (No space left on device); free space there. Last lines of '
      f'{launcher.log_path("reverb_server")}:')

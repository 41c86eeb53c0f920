"""Pixel and Dict observations end to end: env -> Actor -> Reverb -> dataset -> agent,
uint8 all the way to the encoder; PPO, IMPALA and DQN train a step; exports serve uint8
observations in plain TensorFlow; PPO on pixels under MirroredStrategy on 2 CPUs trains
exactly as on one device."""
import functools
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tfrl import actors
from tfrl import export
from tfrl.agents import dqn
from tfrl.agents import impala
from tfrl.agents import ppo
from tfrl.envs import toy
from tfrl.networks import encoders
from learners.configuration.experiment import Experiment
import strategy_runs  # tests/agents/strategy_runs.py

ENVS = [toy.PIXEL_CATCH, toy.PIXEL_CATCH_DICT]


class SmallImpalaCnn(encoders.ImpalaCnnEncoder):
  """IMPALA's CNN with one section of one residual block (conv, max pool, residual
  block, dense: every kind of layer the full torso has) and few channels. These tests
  are about dtypes, data paths and exports, not capacity; the full torso's 15
  convolutions made tracing (twice per replica and epoch under MirroredStrategy) and
  SavedModel export most of this file's cost."""

  def __init__(self, observation_spec, channels=(8,), blocks_per_section=1,
               dense_units=16, **kwargs):
    super().__init__(observation_spec, channels=channels,
                     blocks_per_section=blocks_per_section, dense_units=dense_units,
                     **kwargs)


class RecordingCnn(SmallImpalaCnn):
  """The small IMPALA CNN, recording the dtype of every image it is called on."""

  input_dtypes = []

  def call(self, observation):
    RecordingCnn.input_dtypes.append(observation.dtype)
    return super().call(observation)


def agent_fn(builder):
  """`builder` with a small torso (and one PPO gradient step per train call)."""
  kwargs = dict(cnn=RecordingCnn, fc_layer_params=(16,))
  if builder is ppo.create_ppo_agent:
    kwargs.update(num_epochs=1, num_minibatches=1)
  return functools.partial(builder, **kwargs)


UNROLL = 4


def sequence_experiment(env_name, builder, **overrides):
  settings = dict(env_name=env_name, agent_fn=agent_fn(builder), num_envs=4, batch_size=4,
                  layout_settings=dict(unroll_length=UNROLL, queue_capacity=64))
  settings.update(overrides)
  return Experiment(**settings)


def fill(exp, server, agent, vector_steps):
  """Collects `vector_steps` with the collect policy into the experiment's tables."""
  env = exp.make_env()
  writer = exp.layout.make_writer(server.client)
  actors.Actor(env, agent.collect_policy, [writer]).run(vector_steps)
  writer.close()
  env.close()
  return writer.items_created


def observation_dtypes(nest):
  """{'image': uint8, ...} (or {'': uint8}) for a nest of specs or tensors."""
  flat = tf.nest.flatten(nest)
  keys = sorted(nest) if isinstance(nest, dict) else ['']
  return {key: tf.as_dtype(x.dtype) for key, x in zip(keys, flat)}


EXPECTED_DTYPES = {toy.PIXEL_CATCH: {'': tf.uint8},
                   toy.PIXEL_CATCH_DICT: {'image': tf.uint8, 'paddle': tf.float32}}


def encoder_kernels(agent):
  return [v for v in agent._network.trainable_variables  # pylint: disable=protected-access
          if 'encoder' in v.name and 'kernel' in v.name]


@pytest.mark.parametrize('env_name', ENVS)
@pytest.mark.parametrize('builder', [ppo.create_ppo_agent, impala.create_impala_agent],
                         ids=['ppo', 'impala'])
def test_actor_critic_trains_on_uint8_unrolls_from_reverb(env_name, builder, tmp_path,
                                                          reverb_server_factory):
  exp = sequence_experiment(env_name, builder)
  train_step, agent = exp.build_agent()
  server = reverb_server_factory(exp.layout.tables(agent))
  expected = EXPECTED_DTYPES[env_name]
  # The table's signature, what the dataset yields: the env's uint8, not float32.
  signature = server.client.server_info()[exp.layout.experience_table].signature
  assert observation_dtypes(signature['experience'].observation) == expected
  assert fill(exp, server, agent, UNROLL + 1) == 1
  dataset = exp.layout.dataset_fn(server.address, agent)(tf.distribute.InputContext())
  assert observation_dtypes(dataset.element_spec[0].observation) == expected

  before = [v.numpy() for v in encoder_kernels(agent)]
  assert before
  RecordingCnn.input_dtypes.clear()
  learner = exp.make_learner(str(tmp_path), server.address, agent, train_step,
                             sample_timeout_ms=30_000)
  loss_info = learner.run(iterations=1)
  assert learner.train_step_numpy == 1
  assert np.isfinite(float(loss_info.loss))
  assert all(np.abs(b - v.numpy()).max() > 0 for b, v in zip(before, encoder_kernels(agent)))
  # The CNN got the images as uint8 (it scales them itself): nothing cast them earlier.
  assert RecordingCnn.input_dtypes and set(RecordingCnn.input_dtypes) == {tf.uint8}


@pytest.mark.parametrize('env_name', ENVS)
def test_dqn_trains_on_uint8_transitions_from_reverb(env_name, tmp_path,
                                                     reverb_server_factory):
  exp = Experiment(env_name=env_name, agent_fn=agent_fn(dqn.create_dqn_agent),
                   num_envs=4, batch_size=4, layout_settings=dict(capacity=1000))
  train_step, agent = exp.build_agent()
  # The target network is a copy with its own CNN (tf-agents copies the encoder layers).
  online = agent._q_network.trainable_variables  # pylint: disable=protected-access
  target = agent._target_q_network.trainable_variables  # pylint: disable=protected-access
  assert len(online) == len(target) > 4
  assert not {id(v) for v in online} & {id(v) for v in target}
  server = reverb_server_factory(exp.layout.tables(agent))
  signature = server.client.server_info()[exp.layout.experience_table].signature
  assert observation_dtypes(signature['experience'].observation) == EXPECTED_DTYPES[env_name]
  assert fill(exp, server, agent, 3) == 3
  before = [v.numpy() for v in online]
  RecordingCnn.input_dtypes.clear()
  learner = exp.make_learner(str(tmp_path), server.address, agent, train_step,
                             sample_timeout_ms=30_000)
  loss_info = learner.run(iterations=1)
  assert learner.train_step_numpy == 1 and np.isfinite(float(loss_info.loss))
  assert any(np.abs(b - v.numpy()).max() > 0 for b, v in zip(before, online))
  assert RecordingCnn.input_dtypes and set(RecordingCnn.input_dtypes) == {tf.uint8}


def test_dqn_pixel_torso_is_tfrls_encoder():
  exp = Experiment(env_name=toy.PIXEL_CATCH, num_envs=1, batch_size=1,
                   agent_fn=functools.partial(
                       dqn.create_dqn_agent, cnn='impala', fc_layer_params=()))
  _, agent = exp.build_agent()
  layers = agent._q_network._encoder._flat_preprocessing_layers  # pylint: disable=protected-access
  assert [type(layer) for layer in layers] == [encoders.ImpalaCnnEncoder]


@pytest.mark.parametrize('env_name', ENVS)
@pytest.mark.parametrize('builder', [ppo.create_ppo_agent, dqn.create_dqn_agent],
                         ids=['ppo', 'dqn'])
def test_export_serves_uint8_observations_in_plain_tensorflow(env_name, builder, tmp_path):
  exp = Experiment(env_name=env_name, num_envs=2, batch_size=2,
                   agent_fn=functools.partial(builder, cnn=SmallImpalaCnn))
  _, agent = exp.build_agent()
  path = export.export_policy(agent.policy, str(tmp_path / 'policy'))

  model = tf.saved_model.load(path)
  env = exp.make_env()
  time_step = env.reset()
  env.close()
  signature = model.signatures['action']
  _, inputs = signature.structured_input_signature
  observation = time_step.observation
  if isinstance(observation, dict):
    named = {f'observation_{key}': value for key, value in observation.items()}
  else:
    named = {'observation': observation}
  assert {name: inputs[name].dtype for name in named} == {
      name: tf.as_dtype(value.dtype) for name, value in named.items()}
  outputs = signature(step_type=tf.constant(time_step.step_type),
                      reward=tf.constant(time_step.reward),
                      discount=tf.constant(time_step.discount),
                      **{name: tf.constant(value) for name, value in named.items()})
  actions = outputs['action'].numpy()
  assert actions.shape == (2,) and set(actions) <= {0, 1, 2}
  # The structured function gives the same (the greedy policy is deterministic).
  step = model.action(tf.nest.map_structure(tf.constant, time_step), ())
  np.testing.assert_array_equal(step.action.numpy(), actions)
  np.testing.assert_array_equal(
      actions, agent.policy.action(tf.nest.map_structure(tf.constant, time_step)).action)


_MIRRORED_SCRIPT = textwrap.dedent('''
    import functools, json, tempfile
    import numpy as np
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import tensorflow as tf
    from tfrl import actors, replay
    from tfrl import learner as learner_lib
    from tfrl.agents import ppo
    from tfrl.envs import toy
    from tfrl.networks import encoders
    from learners.configuration.experiment import Experiment

    B = 8  # rows: 2 items of 4 envs, one per replica under MirroredStrategy

    def experiment(env_name):
      return Experiment(
          env_name=env_name, num_envs=4, batch_size=B,
          layout_settings=dict(unroll_length=4, queue_capacity=64),
          agent_fn=functools.partial(
              # The IMPALA torso with one section of one residual block: each replica
              # traces it per epoch, and the full torso's 15 convolutions made these
              # traces most of the comparison's cost.
              ppo.create_ppo_agent, fc_layer_params=(16,), num_epochs=2,
              cnn=functools.partial(encoders.ImpalaCnnEncoder, channels=(8,),
                                    blocks_per_section=1, dense_units=16),
              num_minibatches=1, gradient_clipping=0.5, entropy_cost=0.01))

    def collect(env_name):
      """One batch of unrolls through Actor, SequenceWriter and Reverb, as numpy."""
      exp = experiment(env_name)
      _, agent = exp.build_agent()
      with replay.ReplayServer(exp.layout.tables(agent)) as server:
        env = exp.make_env()
        writer = exp.layout.make_writer(server.client)
        actors.Actor(env, agent.collect_policy, [writer]).run(2 * 4 + 1)
        writer.close()
        env.close()
        dataset = exp.layout.dataset_fn(server.address, agent, 30_000)(
            tf.distribute.InputContext())
        experience, _ = next(iter(dataset))
      return tf.nest.map_structure(lambda x: x.numpy(), experience)

    def train(strategy, env_name, experience):
      exp = experiment(env_name)
      tf.keras.utils.set_random_seed(0)
      train_step, agent = exp.build_agent(strategy)
      with strategy.scope():
        agent._optimizer = tf.keras.optimizers.SGD(0.1)
        agent._optimizer.build(agent._network.trainable_variables)
      init = np.random.RandomState(2)
      for v in agent._network.variables:
        v.assign(0.1 * init.randn(*v.shape).astype(np.float32))
      initial = [v.numpy() for v in agent._network.variables]

      def dataset_fn(context):
        return tf.data.Dataset.from_tensor_slices({'experience': experience}).batch(
            context.get_per_replica_batch_size(B), drop_remainder=True).map(
                lambda x: (x, ())).repeat()

      learner = learner_lib.Learner(
          tempfile.mkdtemp(), train_step, agent, experience_dataset_fn=dataset_fn,
          strategy=strategy, checkpoint_interval=0, summary_interval=0,
          use_kwargs_in_agent_train=True)
      info = learner.run(iterations=1)
      return {'replicas': strategy.num_replicas_in_sync,
              'train_step': learner.train_step_numpy,
              'loss_info': [float(info.loss)] + [float(x) for x in info.extra],
              'variables': [v.numpy().tolist() for v in agent._network.variables],
              'cnn_trained': all(
                  np.abs(v.numpy() - i).max() > 0
                  for v, i in zip(agent._network.variables, initial)
                  if 'encoder' in v.name and 'kernel' in v.name)}

    strategies = {'default': distribute.get_strategy('default'),
                  'mirrored': distribute.get_strategy('mirrored', devices=devices)}
    result = {}
    for env_name in (toy.PIXEL_CATCH, toy.PIXEL_CATCH_DICT):
      experience = collect(env_name)
      images = experience.observation['image'] if isinstance(
          experience.observation, dict) else experience.observation
      result[env_name] = {kind: train(strategy, env_name, experience)
                          for kind, strategy in strategies.items()}
      result[env_name]['image_dtype'] = str(images.dtype)
    print('RESULT ' + json.dumps(result))
''')


@pytest.fixture(scope='module')
def mirrored_runs():
  return strategy_runs.run_result_script(_MIRRORED_SCRIPT, timeout=600)


@pytest.mark.integration
@pytest.mark.parametrize('env_name', ENVS)
def test_pixel_ppo_under_mirrored_strategy_matches_one_device(mirrored_runs, env_name):
  runs = mirrored_runs[env_name]
  assert runs['image_dtype'] == 'uint8'
  default, mirrored = runs['default'], runs['mirrored']
  assert (default['replicas'], mirrored['replicas']) == (1, 2)
  assert default['train_step'] == mirrored['train_step'] == 1
  assert np.all(np.isfinite(mirrored['loss_info']))
  assert default['cnn_trained'] and mirrored['cnn_trained']
  np.testing.assert_allclose(mirrored['loss_info'], default['loss_info'], rtol=2e-4,
                             atol=2e-6)
  for got, want in zip(mirrored['variables'], default['variables']):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6)

"""Observation encoders: shapes, uint8 scaling inside the CNNs, Dict concatenation, the
encoder make_encoder picks, its errors, copies (what tf-agents' networks make), and the
actor-critic network on image and Dict observations."""
import collections

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from tfrl.networks import actor_critic
from tfrl.networks import encoders
from tfrl.networks import initializers

ATARI = tf.TensorSpec([84, 84, 4], tf.uint8, name='observation')
SMALL = tf.TensorSpec([20, 10, 1], tf.uint8, name='observation')
VECTOR = tf.TensorSpec([3], tf.float32, name='paddle')
DICT = {'image': SMALL, 'paddle': VECTOR}


@pytest.fixture(autouse=True)
def _seed():
  tf.keras.utils.set_random_seed(0)


def images(spec, batch, seed=0):
  rng = np.random.RandomState(seed)
  return rng.randint(0, 256, [batch] + spec.shape.as_list()).astype(np.uint8)


@pytest.mark.parametrize('spec, cnn, encoder_class, features', [
    (ATARI, 'nature', encoders.NatureCnnEncoder, 512),
    (ATARI, 'impala', encoders.ImpalaCnnEncoder, 256),
    (SMALL, 'impala', encoders.ImpalaCnnEncoder, 256),
    (tf.TensorSpec([36, 36, 3], tf.uint8), 'nature', encoders.NatureCnnEncoder, 512),
])
def test_cnn_output_shape_and_dtype(spec, cnn, encoder_class, features):
  encoder = encoders.make_encoder(spec, cnn=cnn)
  assert type(encoder) is encoder_class  # pylint: disable=unidiomatic-typecheck
  out = encoder(tf.constant(images(spec, 5)))
  assert out.shape == (5, features) and out.dtype == tf.float32
  assert np.all(out.numpy() >= 0)  # a relu layer's output


def test_nature_cnn_is_the_nature_papers_torso():
  encoder = encoders.NatureCnnEncoder(ATARI)
  encoder(tf.zeros([1, 84, 84, 4], tf.uint8))
  kernels = [v.shape.as_list() for v in encoder.trainable_variables if 'kernel' in v.name]
  assert kernels == [[8, 8, 4, 32], [4, 4, 32, 64], [3, 3, 64, 64], [7 * 7 * 64, 512]]


def test_impala_cnn_is_three_residual_sections():
  encoder = encoders.ImpalaCnnEncoder(ATARI)
  encoder(tf.zeros([1, 84, 84, 4], tf.uint8))
  kernels = [v.shape.as_list() for v in encoder.trainable_variables if 'kernel' in v.name]
  # Per section: the entry conv and 2 blocks of 2 convs; 84 -> 42 -> 21 -> 11.
  convs = [k for k in kernels if len(k) == 4]
  assert len(convs) == 15
  assert [c[-1] for c in convs] == [16] * 5 + [32] * 5 + [32] * 5
  assert kernels[-1] == [11 * 11 * 32, 256]


@pytest.mark.parametrize('cnn', ['nature', 'impala'])
def test_uint8_images_are_scaled_inside_the_encoder(cnn):
  encoder = encoders.make_encoder(ATARI, cnn=cnn)
  full = encoder(tf.fill([2, 84, 84, 4], tf.constant(255, tf.uint8)))
  ones = encoder(tf.ones([2, 84, 84, 4], tf.float32))
  np.testing.assert_allclose(full.numpy(), ones.numpy(), rtol=1e-6, atol=1e-6)
  assert np.abs(ones.numpy()).max() > 0
  # Any image: uint8 x gives what the float image x / 255 gives (to float32 rounding,
  # which the deep torso amplifies a little).
  x = images(ATARI, 3)
  from_uint8 = encoder(tf.constant(x)).numpy()
  np.testing.assert_allclose(from_uint8,
                             encoder(tf.constant(x.astype(np.float32) / 255.0)).numpy(),
                             rtol=0, atol=1e-5 * np.abs(from_uint8).max())


def test_dict_encoder_concatenates_each_keys_features_in_sorted_key_order():
  encoder = encoders.make_encoder(DICT, fc_layer_params=(8,), cnn='impala')
  assert isinstance(encoder, encoders.DictEncoder)
  per_key = dict(encoder.encoders)
  assert [key for key, _ in encoder.encoders] == ['image', 'paddle']
  assert isinstance(per_key['image'], encoders.ImpalaCnnEncoder)
  assert isinstance(per_key['paddle'], encoders.MlpEncoder)
  observation = {'image': tf.constant(images(SMALL, 4)),
                 'paddle': tf.constant(np.random.RandomState(1).rand(4, 3), tf.float32)}
  features = encoder(observation)
  assert features.shape == (4, 256 + 8)
  expected = tf.concat([per_key['image'](observation['image']),
                        per_key['paddle'](observation['paddle'])], -1)
  np.testing.assert_allclose(features.numpy(), expected.numpy(), rtol=1e-6)


def test_dict_encoder_optional_joint_layer_and_nested_entries():
  spec = {'a': VECTOR, 'inner': {'b': tf.TensorSpec([], tf.int64), 'image': SMALL}}
  encoder = encoders.DictEncoder(spec, fc_layer_params=(), cnn='impala', joint_units=16)
  out = encoder({'a': tf.zeros([2, 3]), 'inner': {'b': tf.zeros([2], tf.int64),
                                                  'image': tf.zeros([2, 20, 10, 1], tf.uint8)}})
  assert out.shape == (2, 16)
  assert isinstance(dict(encoder.encoders)['inner'], encoders.DictEncoder)


def test_tuple_observations_are_encoded_per_entry():
  point = collections.namedtuple('Point', ['image', 'paddle'])
  for spec in [(SMALL, VECTOR), point(SMALL, VECTOR)]:
    encoder = encoders.make_encoder(spec, fc_layer_params=(4,), cnn='impala')
    value = type(spec)(*[tf.zeros([3] + s.shape.as_list(), s.dtype) for s in spec]) \
        if hasattr(spec, '_fields') else tuple(
            tf.zeros([3] + s.shape.as_list(), s.dtype) for s in spec)
    assert encoder(value).shape == (3, 260)


@pytest.mark.parametrize('spec, expected', [
    (ATARI, encoders.NatureCnnEncoder),
    ({'image': ATARI, 'paddle': VECTOR}, encoders.DictEncoder),
    (VECTOR, encoders.MlpEncoder),
    (tf.TensorSpec([128], tf.uint8), encoders.MlpEncoder),  # e.g. Atari's RAM
    (tf.TensorSpec([84, 84, 4], tf.float32), encoders.MlpEncoder),  # only uint8 is an image
    (tf.TensorSpec([], tf.int64), encoders.MlpEncoder),
])
def test_make_encoder_picks(spec, expected):
  assert type(encoders.make_encoder(spec)) is expected  # pylint: disable=unidiomatic-typecheck


@pytest.mark.parametrize('spec, kwargs, match', [
    (SMALL, {}, r'NatureCnnEncoder needs images of at least 36x36 pixels, got '
                r'uint8\[20, 10, 1\]'),
    (tf.TensorSpec([84, 84], tf.uint8, name='frame'), {}, r'uint8\[84, 84\] \(frame\)'),
    (tf.TensorSpec([4, 84, 84, 1], tf.uint8), {}, r'uint8\[4, 84, 84, 1\].*channel-last'),
    (tf.TensorSpec([2], tf.string, name='text'), {}, r'string\[2\] \(text\)'),
    (tf.TensorSpec([None], tf.float32), {}, r'float32\[None\]'),
    ({}, {}, 'non-empty nest'),
    (ATARI, {'cnn': 'resnet'}, "cnn must be one of \\['grid', 'impala', 'nature'\\]"),
    (tf.TensorSpec([3, 3, 3], tf.uint8), {'cnn': 'grid'},
     r'GridCnnEncoder needs images of at least 4x4 pixels, got uint8\[3, 3, 3\]'),
    ({'image': SMALL}, {}, r'uint8\[20, 10, 1\]'),
])
def test_unserved_observations_raise_one_line_naming_the_spec(spec, kwargs, match):
  with pytest.raises(ValueError, match=match) as error:
    encoders.make_encoder(spec, **kwargs)
  assert '\n' not in str(error.value)


GRID = tf.TensorSpec([7, 7, 3], tf.uint8, name='image')  # MiniGrid's view


def test_grid_cnn_takes_cell_codes_unscaled():
  """MiniGrid's codes (at most 10) reach the convolutions as they are: doubling every
  code changes the features, and the [7, 7, 3] view ends in 1x1x64 before the dense."""
  encoder = encoders.make_encoder({'image': GRID, 'direction': tf.TensorSpec([], tf.int64)},
                                  fc_layer_params=(16,), cnn='grid')
  grid = dict(encoder.encoders)['image']
  assert type(grid) is encoders.GridCnnEncoder  # pylint: disable=unidiomatic-typecheck
  codes = np.random.RandomState(0).randint(0, 11, [4, 7, 7, 3]).astype(np.uint8)
  features = grid(tf.constant(codes)).numpy()
  as_floats = grid(tf.constant(codes.astype(np.float32))).numpy()
  np.testing.assert_allclose(features, as_floats, rtol=1e-6)  # cast only, no 1/255
  assert features.shape == (4, 64)
  kernels = [v.shape.as_list() for v in grid.trainable_variables if 'kernel' in v.name]
  assert kernels == [[2, 2, 3, 16], [2, 2, 16, 32], [2, 2, 32, 64], [64, 64]]
  # One changed cell moves the features about 255 times more than it would if the codes
  # were scaled as pixels are.
  changed = codes.copy()
  changed[:, 3, 3, 0] = 10
  moved = np.abs(grid(tf.constant(changed)).numpy() - features).max()
  scaled = lambda x: grid(tf.constant(x.astype(np.float32) / 255.0)).numpy()
  moved_if_scaled = np.abs(scaled(changed) - scaled(codes)).max()
  assert moved > 100 * moved_if_scaled > 0


@pytest.mark.parametrize('spec, cnn', [(ATARI, 'nature'), (SMALL, 'impala'), (DICT, 'impala'),
                                       (GRID, 'grid')])
def test_copies_from_config_build_the_same_encoder_with_new_weights(spec, cnn):
  """What tf-agents' EncodingNetwork does to preprocessing layers (and so to targets)."""
  encoder = encoders.make_encoder(spec, cnn=cnn)
  copy = type(encoder).from_config(encoder.get_config())
  observation = tf.nest.map_structure(lambda s: tf.zeros([2] + s.shape.as_list(), s.dtype),
                                      spec)
  assert copy(observation).shape == encoder(observation).shape
  shapes = lambda layer: [v.shape for v in layer.trainable_variables]
  assert shapes(copy) == shapes(encoder)
  assert not any(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(
      copy.trainable_variables, encoder.trainable_variables) if 'kernel' in a.name)


@pytest.mark.parametrize('observation_spec, cnn', [(ATARI, 'nature'), (DICT, 'impala')])
def test_actor_critic_network_on_images_and_dicts(observation_spec, cnn):
  """[B] and time-major [T, B] calls: every leaf's outer dims are flattened and back."""
  spec = tf.nest.map_structure(
      lambda s: tensor_spec.BoundedTensorSpec(s.shape, s.dtype, 0,
                                              255 if s.dtype == tf.uint8 else 1), observation_spec)
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 2)
  for shared_torso in (True, False):
    net = actor_critic.ActorCriticNetwork(spec, action_spec, (16,), cnn=cnn,
                                          shared_torso=shared_torso)
    actor_critic.create_variables(net, spec)
    for outer in ([5], [3, 2]):
      observation = tensor_spec.sample_spec_nest(spec, outer_dims=outer)
      (params, value), _ = net(observation)
      assert params['logits'].shape == outer + [3]
      assert value.shape == outer
  # The uint8 observation reaches the encoder as uint8: it is the CNN that scales it.
  image_spec = spec['image'] if isinstance(spec, dict) else spec
  assert image_spec.dtype == tf.uint8


def test_lstm_network_on_images():
  action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 2)
  spec = tensor_spec.BoundedTensorSpec([20, 10, 1], tf.uint8, 0, 255)
  net = actor_critic.ActorCriticNetwork(spec, action_spec, cnn='impala', lstm_size=8)
  observation = tensor_spec.sample_spec_nest(spec, outer_dims=[4, 2])
  step_type = tf.fill([4, 2], int(ts.StepType.MID))
  (params, value), state = net(observation, step_type, net.get_initial_state(2))
  assert params['logits'].shape == (4, 2, 3) and value.shape == (4, 2)
  assert state[0].shape == (2, 8)


@pytest.mark.parametrize('spec, categories', [
    (tensor_spec.BoundedTensorSpec([], tf.int64, 0, 3), 4),  # MiniGrid's direction
    (tensor_spec.BoundedTensorSpec([], tf.int32, 2, 6), 5),  # Discrete(5, start=2)
    (tf.TensorSpec([], tf.int64), 0),  # unbounded: a number
    (tensor_spec.BoundedTensorSpec([], tf.int64, 0, 2 ** 40), 0),  # too wide: a number
    (tensor_spec.BoundedTensorSpec([128], tf.uint8, 0, 255), 0),  # Atari's RAM: numbers
    (tensor_spec.BoundedTensorSpec([], tf.float32, 0.0, 3.0), 0),
])
def test_a_discrete_index_enters_the_mlp_one_hot(spec, categories):
  """As SB3's preprocess_obs: a Discrete space's index is a category, not a magnitude."""
  assert encoders.category_count(spec) == categories
  encoder = encoders.MlpEncoder(spec, fc_layer_params=())
  low = int(getattr(spec, 'minimum', 0)) if spec.shape.rank == 0 else 0
  values = np.arange(low, low + max(categories, 3)).astype(spec.dtype.as_numpy_dtype)
  if spec.shape.rank:
    values = np.stack([np.full(spec.shape.as_list(), v) for v in values])
  features = encoder(tf.constant(values)).numpy()
  if categories:
    np.testing.assert_array_equal(features, np.eye(categories, dtype=np.float32))
  else:
    np.testing.assert_array_equal(features, values.reshape(len(values), -1))


def test_ppo_minigrid_doorkey_builds_its_network_with_a_one_hot_direction():
  """The config's agent builds on the env's raw Dict observation: its direction MLP
  takes 4 one-hot inputs, and the collect policy acts on raw observations."""
  import gin  # pylint: disable=g-import-not-at-top
  from learners.configuration import config  # pylint: disable=g-import-not-at-top
  from learners.configuration import experiment  # pylint: disable=g-import-not-at-top
  config.parse(['ppo_minigrid_doorkey.gin'])
  try:
    exp = experiment.Experiment()
    _, agent = exp.build_agent()
    env = exp.make_eval_env()
    time_step = env.reset()
    action = agent.collect_policy.action(time_step).action
    env.close()
  finally:
    gin.clear_config()
  spec = agent.time_step_spec.observation['direction']
  assert (spec.dtype, int(spec.minimum), int(spec.maximum)) == (tf.int64, 0, 3)
  direction = dict(agent._network._encoder.encoders)['direction']  # pylint: disable=protected-access
  kernel = direction.trainable_variables[0]
  assert kernel.shape == (4, 16)  # one input per direction, fc_layer_params = (16,)
  # Its features are those of the one-hot rows: direction d selects kernel row d.
  bias = direction.trainable_variables[1]
  np.testing.assert_allclose(direction(tf.constant([0, 1, 2, 3], tf.int64)),
                             np.tanh(kernel.numpy() + bias.numpy()), rtol=1e-5, atol=1e-6)
  assert action.shape == (time_step.observation['direction'].shape[0],)


HALFCHEETAH_OBS = tensor_spec.BoundedTensorSpec([17], tf.float32, -1e3, 1e3)
HALFCHEETAH_ACTIONS = tensor_spec.BoundedTensorSpec([6], tf.float32, -1.0, 1.0)


def _dense_layers(net):
  """(kernel, bias) of each dense layer of an actor-critic network, by kernel name."""
  variables = {v.name: v.numpy() for v in net.trainable_variables}
  return {name: (kernel, variables[name.replace('kernel', 'bias')])
          for name, kernel in variables.items() if 'kernel' in name}


def test_fan_in_uniform_starts_every_dense_layer_as_pytorch_linear():
  """SB3's ortho_init=False (RL-Zoo's HalfCheetah PPO): kernels and biases uniform in
  +-1/sqrt(fan_in), the heads included; 'orthogonal' keeps zero biases and orthogonal
  kernels scaled by their gains."""
  layers = {}
  for initializer in initializers.INITIALIZERS:
    net = actor_critic.ActorCriticNetwork(HALFCHEETAH_OBS, HALFCHEETAH_ACTIONS, (256, 256),
                                          activation='relu', shared_torso=False,
                                          initializer=initializer)
    actor_critic.create_variables(net, HALFCHEETAH_OBS)
    layers[initializer] = _dense_layers(net)
  assert len(layers['fan_in_uniform']) == len(layers['orthogonal']) == 6
  for name, (kernel, bias) in layers['fan_in_uniform'].items():
    bound = kernel.shape[0] ** -0.5
    for weights in (kernel, bias):
      assert np.abs(weights).max() <= bound, name
      if weights.size >= 64:  # a uniform's std is its bound / sqrt(3)
        np.testing.assert_allclose(weights.std(), bound / 3 ** 0.5, rtol=0.25, err_msg=name)
    assert np.abs(bias).max() > 0, name
  for name, (kernel, bias) in layers['orthogonal'].items():
    assert not bias.any(), name
    gram = kernel.T @ kernel if kernel.shape[0] >= kernel.shape[1] else kernel @ kernel.T
    gain = np.sqrt(np.mean(np.diag(gram)))
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(len(gram)), atol=1e-4 + 1e-4 * gain,
                               err_msg=name)
    assert gain == pytest.approx({256: 2 ** 0.5, 6: 0.01, 1: 1.0}[kernel.shape[1]], rel=1e-3)


def test_an_encoders_initializer_survives_its_copy_and_a_wrong_one_is_refused():
  encoder = encoders.make_encoder(DICT, cnn='impala', initializer='fan_in_uniform')
  copy = type(encoder).from_config(encoder.get_config())
  assert copy.get_config()['initializer'] == 'fan_in_uniform'
  copy(tf.nest.map_structure(lambda s: tf.zeros([2] + s.shape.as_list(), s.dtype), DICT))
  biases = [v.numpy() for v in copy.trainable_variables if 'paddle' in v.name and 'bias' in v.name]
  assert biases and all(b.any() for b in biases)
  with pytest.raises(ValueError, match="initializer must be one of .*got 'xavier'"):
    actor_critic.ActorCriticNetwork(HALFCHEETAH_OBS, HALFCHEETAH_ACTIONS, initializer='xavier')

"""Observation encoders: a nest of observations with flattened outer dims [N, ...] ->
features [N, F]. The actor-critic network runs one before its heads (and its LSTM), and
DQN's Q-network runs the same classes as its preprocessing layer.

`make_encoder(observation_spec, ...)` picks the encoder for a spec:
- a nest (a Dict or Tuple space's spec): `DictEncoder`, one encoder per entry, their
  features concatenated;
- an image, a rank-3 uint8 spec [H, W, C]: a CNN, `NatureCnnEncoder` (the default),
  `ImpalaCnnEncoder`, or `GridCnnEncoder` for symbolic grids (MiniGrid's cell codes);
- anything else numeric: `MlpEncoder` over the flattened observation; a Discrete
  space's index (a scalar integer spec with bounds, e.g. MiniGrid's 'direction' 0-3)
  one-hot first, as SB3's `preprocess_obs` does (see `category_count`).

Images stay uint8 from the environment through Reverb to the learner (a quarter of the
bytes of float32 everywhere on the way); the CNNs cast and scale them to [0, 1] as their
first operation. A float image given to a CNN is taken as already scaled.

Every encoder's constructor takes only plain arguments and `get_config` returns them,
so tf-agents can copy one (`type(layer).from_config(layer.get_config())`, which its
EncodingNetwork does to preprocessing layers and `Network.copy` to target networks).
"""
from typing import Any, Callable, Optional, Sequence, Union

import tensorflow as tf

from tfrl.networks import initializers

# A CNN choice: a name in CNNS, or (image_spec, name=...) -> an encoder layer.
CnnChoice = Union[str, Callable[..., tf.keras.layers.Layer]]

def describe_spec(spec: Any) -> str:
  """'uint8[84, 84, 4] (observation)': a spec (or nest of specs) in one line."""
  if tf.nest.is_nested(spec):
    return str(tf.nest.map_structure(describe_spec, spec))
  name = f' ({spec.name})' if getattr(spec, 'name', None) else ''
  return f'{spec.dtype.name}{spec.shape.as_list()}{name}'


def is_image_spec(spec: Any) -> bool:
  """Whether `spec` is an image a CNN encodes: rank 3 ([H, W, C]) and uint8."""
  return (not tf.nest.is_nested(spec) and spec.shape.rank == 3 and
          spec.dtype == tf.uint8)


def _as_images(observation: tf.Tensor) -> tf.Tensor:
  """uint8 images -> float32 in [0, 1]; float images are taken as already scaled."""
  if observation.dtype == tf.uint8:
    return tf.cast(observation, tf.float32) * (1.0 / 255.0)
  return tf.cast(observation, tf.float32)


class _SpecLayer(tf.keras.layers.Layer):
  """A layer built for one observation spec, whose config holds its constructor's
  arguments (see the module docstring on copies)."""

  def __init__(self, observation_spec, name: str, config: dict, **kwargs):
    super().__init__(name=name, **kwargs)
    # Set past Keras's attribute tracking, which would wrap a dict spec (and the
    # config) in its own mapping types.
    object.__setattr__(self, '_observation_spec', observation_spec)
    object.__setattr__(self, '_config', dict(config, observation_spec=observation_spec))

  @property
  def observation_spec(self):
    return self._observation_spec

  def get_config(self) -> dict:
    return dict(super().get_config(), **self._config)


def _check_image_spec(spec, encoder: str, min_size: int = 1) -> None:
  """Raises a one-line ValueError unless `spec` is an image `encoder` can take."""
  if tf.nest.is_nested(spec) or spec.shape.rank != 3 or not spec.shape.is_fully_defined():
    raise ValueError(f'{encoder} takes one image observation [H, W, C] of known size, '
                     f'got {describe_spec(spec)}.')
  height, width, _ = spec.shape.as_list()
  if min(height, width) < min_size:
    raise ValueError(f'{encoder} needs images of at least {min_size}x{min_size} pixels, '
                     f'got {describe_spec(spec)}; use cnn=\'impala\' (any size) or larger '
                     'images.')


# A bounded scalar integer spanning at most this many values is a category index.
MAX_ONE_HOT = 1024


def category_count(spec) -> int:
  """How many categories a Discrete observation's spec holds; 0 if it is no category.

  A scalar integer spec with bounds over at most `MAX_ONE_HOT` values (a gym Discrete
  space) indexes categories: as a raw number its values would be ordered and scaled
  (MiniGrid's direction 3 is not thrice direction 1), so the MLP gets it one-hot.
  Unbounded or wider integers (counters, RAM bytes) stay numbers.
  """
  if (tf.nest.is_nested(spec) or not spec.dtype.is_integer or spec.shape.rank != 0 or
      not all(hasattr(spec, bound) for bound in ('minimum', 'maximum'))):
    return 0
  count = int(spec.maximum) - int(spec.minimum) + 1
  return count if 0 < count <= MAX_ONE_HOT else 0


class MlpEncoder(_SpecLayer):
  """Flattens one observation (cast to float32) and applies dense layers; a category
  index (`category_count`) is one-hot first."""

  def __init__(self, observation_spec, fc_layer_params: Sequence[int] = (64, 64),
               activation: str = 'tanh', name: str = 'mlp_encoder',
               initializer: str = 'orthogonal', **kwargs):
    """Args:
      observation_spec: one (not nested) numeric spec of known shape.
      fc_layer_params: hidden layer sizes (none: the flattened observation itself, or
        its one-hot).
      activation: hidden activation.
      name: layer name.
      initializer: how the dense layers start (one of `initializers.INITIALIZERS`).
      **kwargs: Keras layer arguments (what `from_config` passes back).

    Raises:
      ValueError: a nested or non-numeric spec, one of unknown size, or an unknown
        initializer.
    """
    super().__init__(observation_spec, name, dict(
        fc_layer_params=tuple(fc_layer_params), activation=activation,
        initializer=initializer), **kwargs)
    if tf.nest.is_nested(observation_spec):
      raise ValueError('MlpEncoder takes one flat observation, got the nest '
                       f'{describe_spec(observation_spec)}; use DictEncoder.')
    if not (observation_spec.dtype.is_floating or observation_spec.dtype.is_integer or
            observation_spec.dtype.is_bool) or not observation_spec.shape.is_fully_defined():
      raise ValueError('MlpEncoder takes a numeric observation of known shape, got '
                       f'{describe_spec(observation_spec)}.')
    self._categories = category_count(observation_spec)
    self._minimum = int(observation_spec.minimum) if self._categories else 0
    self._size = self._categories or int(observation_spec.shape.num_elements())
    self._layers = [initializers.dense(units, activation, initializer=initializer)
                    for units in fc_layer_params]

  def call(self, observation):
    if self._categories:
      # Out-of-range indices give zeros (tf.one_hot), never another category.
      x = tf.one_hot(tf.reshape(tf.cast(observation, tf.int32) - self._minimum, [-1]),
                     self._categories, dtype=tf.float32)
    else:
      x = tf.reshape(tf.cast(observation, tf.float32), [-1, self._size])
    for layer in self._layers:
      x = layer(x)
    return x


class NatureCnnEncoder(_SpecLayer):
  """The DQN Nature paper's torso (Mnih et al. 2015): conv 32 8x8 stride 4, conv 64
  4x4 stride 2, conv 64 3x3 stride 1 (valid padding, relu), flatten, dense relu.

  Images need at least 36x36 pixels (the three valid convolutions leave 1x1 of a 36x36
  image). uint8 images are scaled to [0, 1] here.
  """

  MIN_SIZE = 36

  def __init__(self, observation_spec, dense_units: int = 512, name: str = 'nature_cnn',
               **kwargs):
    """Args:
      observation_spec: an image spec [H, W, C] (uint8, or float already in [0, 1]).
      dense_units: units of the dense layer after the convolutions.
      name: layer name.
      **kwargs: Keras layer arguments (what `from_config` passes back).

    Raises:
      ValueError: not an image spec, or an image smaller than 36x36.
    """
    super().__init__(observation_spec, name, dict(dense_units=dense_units), **kwargs)
    _check_image_spec(observation_spec, 'NatureCnnEncoder', self.MIN_SIZE)
    self._convs = [initializers.conv(32, 8, 4, activation='relu'),
                   initializers.conv(64, 4, 2, activation='relu'),
                   initializers.conv(64, 3, 1, activation='relu')]
    self._flatten = tf.keras.layers.Flatten()
    self._dense = initializers.dense(dense_units, 'relu')

  def call(self, observation):
    x = _as_images(observation)
    for conv in self._convs:
      x = conv(x)
    return self._dense(self._flatten(x))


class _ResidualBlock(tf.keras.layers.Layer):
  """x + conv(relu(conv(relu(x)))), two 3x3 same-padded convolutions.

  The second convolution's bias is added after the residual sum (the same function):
  with it inside, TF 2.15's grappler remapper tries to fuse conv + bias + add + relu
  although the sum also feeds the next block's skip connection, logs "remapper failed
  ... fanout exist for missing node" and drops its optimizations for the whole graph.
  """

  def __init__(self, channels: int, name: str):
    super().__init__(name=name)
    self._conv_a = initializers.conv(channels, 3, padding='same')
    self._conv_b = tf.keras.layers.Conv2D(
        channels, 3, padding='same', use_bias=False,
        kernel_initializer=tf.keras.initializers.Orthogonal(initializers.RELU_GAIN))
    self._bias_b = self.add_weight('bias', [channels], initializer='zeros')

  def call(self, x):
    residual = self._conv_b(tf.nn.relu(self._conv_a(tf.nn.relu(x))))
    return tf.nn.bias_add(x + residual, self._bias_b)


class ImpalaCnnEncoder(_SpecLayer):
  """IMPALA's "deep" residual torso (Espeholt et al. 2018, figure 3): per section a 3x3
  conv, a 3x3 max pool of stride 2 and residual blocks; then relu, flatten, dense relu.

  Same padding throughout, so any image size works (each section halves it, rounding
  up). uint8 images are scaled to [0, 1] here.
  """

  def __init__(self, observation_spec, channels: Sequence[int] = (16, 32, 32),
               blocks_per_section: int = 2, dense_units: int = 256,
               name: str = 'impala_cnn', **kwargs):
    """Args:
      observation_spec: an image spec [H, W, C] (uint8, or float already in [0, 1]).
      channels: output channels of each section.
      blocks_per_section: residual blocks after each section's pooling.
      dense_units: units of the dense layer after the sections.
      name: layer name.
      **kwargs: Keras layer arguments (what `from_config` passes back).

    Raises:
      ValueError: not an image spec.
    """
    super().__init__(observation_spec, name, dict(
        channels=tuple(channels), blocks_per_section=blocks_per_section,
        dense_units=dense_units), **kwargs)
    _check_image_spec(observation_spec, 'ImpalaCnnEncoder')
    self._sections = []
    for i, depth in enumerate(channels):
      section = [initializers.conv(depth, 3, padding='same'),
                 tf.keras.layers.MaxPool2D(3, strides=2, padding='same')]
      section += [_ResidualBlock(depth, name=f'section_{i}_block_{j}')
                  for j in range(blocks_per_section)]
      self._sections.append(section)
    self._flatten = tf.keras.layers.Flatten()
    self._dense = initializers.dense(dense_units, 'relu')

  def call(self, observation):
    x = _as_images(observation)
    for section in self._sections:
      for layer in section:
        x = layer(x)
    return self._dense(self._flatten(tf.nn.relu(x)))


class GridCnnEncoder(_SpecLayer):
  """A small CNN for symbolic grids: each cell holds small integer codes, not pixel
  intensities (MiniGrid's and BabyAI's [7, 7, 3] view: object, colour and state
  indices, at most 10).

  The codes reach the convolutions unscaled: the image CNNs' 1/255 would shrink them to
  below 0.04, where the first layer's outputs barely differ between a wall, a key and
  a door. Convolutions of 2x2 (16, then a 2x2 max pool, 32, 64; valid padding, relu)
  as in the MiniGrid baselines (lcswillems/rl-starter-files), then a dense relu layer.
  Grids need at least 4x4 cells.
  """

  MIN_SIZE = 4

  def __init__(self, observation_spec, channels: Sequence[int] = (16, 32, 64),
               dense_units: int = 64, name: str = 'grid_cnn', **kwargs):
    """Args:
      observation_spec: a grid spec [H, W, C] of integer codes (uint8 or float).
      channels: output channels of the three 2x2 convolutions.
      dense_units: units of the dense layer after the convolutions.
      name: layer name.
      **kwargs: Keras layer arguments (what `from_config` passes back).

    Raises:
      ValueError: not a grid spec [H, W, C], or a grid smaller than 4x4.
    """
    super().__init__(observation_spec, name, dict(
        channels=tuple(channels), dense_units=dense_units), **kwargs)
    _check_image_spec(observation_spec, 'GridCnnEncoder', self.MIN_SIZE)
    first, second, third = channels
    self._layers = [initializers.conv(first, 2, activation='relu'),
                    tf.keras.layers.MaxPool2D(2),
                    initializers.conv(second, 2, activation='relu'),
                    initializers.conv(third, 2, activation='relu'),
                    tf.keras.layers.Flatten(),
                    initializers.dense(dense_units, 'relu')]

  def call(self, observation):
    x = tf.cast(observation, tf.float32)  # codes, not intensities: no scaling
    for layer in self._layers:
      x = layer(x)
    return x


CNNS = {'nature': NatureCnnEncoder, 'impala': ImpalaCnnEncoder, 'grid': GridCnnEncoder}


def _cnn_class(cnn: CnnChoice) -> Callable[..., tf.keras.layers.Layer]:
  if callable(cnn):
    return cnn
  if cnn not in CNNS:
    raise ValueError(f'cnn must be one of {sorted(CNNS)} or a callable, got {cnn!r}.')
  return CNNS[cnn]


def _entries(observation_spec) -> list:
  """(label, key, spec) of a nest's top level, in `tf.nest.flatten` order (a dict's
  keys sorted): the order the encoders' features are concatenated in. `key` indexes
  the observation (a dict key, or a position in a tuple or namedtuple)."""
  if isinstance(observation_spec, dict):
    return [(str(key), key, spec) for key, spec in sorted(observation_spec.items())]
  labels = getattr(observation_spec, '_fields', range(len(observation_spec)))
  return [(str(label), i, spec)
          for i, (label, spec) in enumerate(zip(labels, observation_spec))]


class DictEncoder(_SpecLayer):
  """One encoder per entry of a nested observation (a CNN for images, an MLP for the
  rest, a DictEncoder for a nest inside), their features concatenated, then
  optionally one dense layer.

  Entries are encoded in `tf.nest.flatten` order (a dict's keys sorted), so features
  line up with the order tf-agents flattens observations in.
  """

  def __init__(self, observation_spec, fc_layer_params: Sequence[int] = (64, 64),
               activation: str = 'tanh', cnn: CnnChoice = 'nature',
               joint_units: Optional[int] = None, name: str = 'dict_encoder',
               initializer: str = 'orthogonal', **kwargs):
    """Args:
      observation_spec: a dict, tuple or namedtuple of specs (nests inside allowed).
      fc_layer_params: hidden layer sizes of each non-image entry's MLP.
      activation: the MLPs' hidden activation (and the joint layer's).
      cnn: the image entries' CNN ('nature', 'impala', 'grid' or a callable, see
        `make_encoder`).
      joint_units: units of a dense layer over the concatenated features (None: the
        concatenation is the output).
      name: layer name.
      initializer: how the MLPs' and the joint layer's dense layers start (one of
        `initializers.INITIALIZERS`; the CNNs start orthogonal).
      **kwargs: Keras layer arguments (what `from_config` passes back).

    Raises:
      ValueError: a spec that is not a nest, an empty nest, an entry no encoder
        serves (the message names it), or an unknown initializer.
    """
    super().__init__(observation_spec, name, dict(
        fc_layer_params=tuple(fc_layer_params), activation=activation, cnn=cnn,
        joint_units=joint_units, initializer=initializer), **kwargs)
    if not tf.nest.is_nested(observation_spec) or not tf.nest.flatten(observation_spec):
      raise ValueError('DictEncoder takes a non-empty nest of observation specs, got '
                       f'{observation_spec!r}.')
    self._keys = []
    self._encoders = []
    for label, key, spec in _entries(observation_spec):
      if tf.nest.is_nested(spec) and not tf.nest.flatten(spec):
        continue  # an empty entry holds no data (and tf.nest.flatten skips it too)
      self._keys.append(key)
      self._encoders.append(make_encoder(spec, fc_layer_params, activation,
                                         name=f'{name}_{label}', cnn=cnn,
                                         initializer=initializer))
    self._joint = (initializers.dense(joint_units, activation, initializer=initializer)
                   if joint_units else None)

  @property
  def encoders(self) -> list:
    """(key, encoder) per entry, in the order their features are concatenated."""
    return list(zip(self._keys, self._encoders))

  def call(self, observation):
    features = [encoder(observation[key])
                for encoder, key in zip(self._encoders, self._keys)]
    x = features[0] if len(features) == 1 else tf.concat(features, axis=-1)
    return self._joint(x) if self._joint is not None else x


def make_encoder(observation_spec, fc_layer_params: Sequence[int] = (64, 64),
                 activation: str = 'tanh', name: str = 'encoder',
                 cnn: CnnChoice = 'nature', initializer: str = 'orthogonal'
                 ) -> tf.keras.layers.Layer:
  """The encoder for `observation_spec` (see the module docstring for the choice).

  Args:
    observation_spec: a spec or a nest of specs, without outer (batch) dims.
    fc_layer_params: hidden layer sizes of the MLPs (of a flat observation, or of a
      nest's non-image entries). A CNN ends in its own dense layer and does not use
      them.
    activation: the MLPs' hidden activation.
    name: layer name.
    cnn: the CNN for images: 'nature' (`NatureCnnEncoder`, needs >= 36x36), 'impala'
      (`ImpalaCnnEncoder`, any size), 'grid' (`GridCnnEncoder`, symbolic grids such as
      MiniGrid's, unscaled), or a callable (image_spec, name=) -> layer.
    initializer: how the MLPs' dense layers start (one of
      `initializers.INITIALIZERS`); CNNs start orthogonal whatever it says.

  Returns:
    A Keras layer mapping observations with flattened outer dims [N, ...] (a nest
    for a nested spec) to float32 features [N, F].

  Raises:
    ValueError: an observation no encoder serves (one line naming the spec): a uint8
      observation of rank 2 or above 3 (an image without its channel axis, or frames
      stacked on a leading axis), a non-numeric or unknown-shape one, an empty nest,
      an image too small for the chosen CNN, an unknown `cnn` or initializer.
  """
  initializers.check_initializer(initializer)
  if tf.nest.is_nested(observation_spec):
    return DictEncoder(observation_spec, fc_layer_params, activation, cnn=cnn, name=name,
                       initializer=initializer)
  if is_image_spec(observation_spec):
    return _cnn_class(cnn)(observation_spec, name=name)
  if observation_spec.dtype == tf.uint8 and observation_spec.shape.rank not in (0, 1):
    raise ValueError(
        f'No encoder for the uint8 observation {describe_spec(observation_spec)}: images '
        'must be [H, W, C] (add a channel axis; stack frames channel-last, as '
        'tfrl.envs.make(frame_stack=) does).')
  return MlpEncoder(observation_spec, fc_layer_params, activation, name=name,
                    initializer=initializer)


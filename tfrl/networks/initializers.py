"""How the networks' layers start: orthogonal (the PPO and IMPALA references', SB3's
default) or as PyTorch's `nn.Linear` (SB3 with ortho_init=False).

`dense(units, activation, gain, initializer)` is the one place a network's dense layer
is made; `conv` the CNNs' (always orthogonal).
"""
import tensorflow as tf

RELU_GAIN = 2.0 ** 0.5
# How dense layers start: 'orthogonal' (scaled by a gain, zero biases: what PPO and
# IMPALA reference implementations use, SB3's ortho_init=True), or 'fan_in_uniform'
# (kernel and bias uniform in +-1/sqrt(fan_in): PyTorch's nn.Linear default, which SB3
# keeps with ortho_init=False, as RL-Zoo's MuJoCo PPO settings set it).
INITIALIZERS = ('orthogonal', 'fan_in_uniform')


class FanInUniformDense(tf.keras.layers.Dense):
  """Dense whose kernel and bias start uniform in +-1/sqrt(fan_in), as PyTorch's
  nn.Linear (its kaiming_uniform with a = sqrt(5) has that bound). Keras' bias
  initializers do not see the fan-in, so both are set when the input shape is known."""

  def build(self, input_shape):
    bound = float(tf.TensorShape(input_shape)[-1]) ** -0.5
    self.kernel_initializer = tf.keras.initializers.RandomUniform(-bound, bound)
    self.bias_initializer = tf.keras.initializers.RandomUniform(-bound, bound)
    super().build(input_shape)


def check_initializer(initializer: str) -> None:
  """Raises ValueError unless `initializer` is one of INITIALIZERS."""
  if initializer not in INITIALIZERS:
    raise ValueError(f'initializer must be one of {INITIALIZERS}, got {initializer!r}.')


def dense(units: int, activation=None, gain: float = RELU_GAIN,
          initializer: str = 'orthogonal') -> tf.keras.layers.Dense:
  """A Dense layer started as `initializer` says.

  Args:
    units: output units.
    activation: the layer's activation.
    gain: the orthogonal kernel's scale (sqrt(2) before ReLU/tanh, 0.01 for a policy's
      output, 1 for a value); unused by 'fan_in_uniform', as SB3 applies its gains only
      with ortho_init.
    initializer: one of INITIALIZERS.

  Returns:
    The layer.

  Raises:
    ValueError: an unknown initializer.
  """
  check_initializer(initializer)
  if initializer == 'fan_in_uniform':
    return FanInUniformDense(units, activation=activation)
  return tf.keras.layers.Dense(units, activation=activation,
                               kernel_initializer=tf.keras.initializers.Orthogonal(gain))


def conv(filters: int, kernel_size: int, strides: int = 1, padding: str = 'valid',
         activation=None) -> tf.keras.layers.Conv2D:
  """Conv2D with orthogonal initialization (gain sqrt(2)), as the CNN encoders use."""
  return tf.keras.layers.Conv2D(
      filters, kernel_size, strides=strides, padding=padding, activation=activation,
      kernel_initializer=tf.keras.initializers.Orthogonal(RELU_GAIN))

"""Strategy selection: default | mirrored | multi_worker | tpu."""
from typing import Optional, Sequence

import tensorflow as tf

from tfrl import logs

STRATEGIES = ('default', 'mirrored', 'multi_worker', 'tpu')


def split_cpu(num_devices: int = 2) -> Sequence[str]:
  """Splits the CPU into `num_devices` logical devices (for testing distribution).

  Must run before TensorFlow initializes its devices (before any op runs).

  Returns:
    The logical device names, e.g. ['/cpu:0', '/cpu:1'].

  Raises:
    RuntimeError: TensorFlow already initialized its devices with another split.
  """
  cpu = tf.config.list_physical_devices('CPU')[0]
  current = tf.config.get_logical_device_configuration(cpu)
  if not current or len(current) != num_devices:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
  return [f'/cpu:{i}' for i in range(num_devices)]


def get_strategy(kind: str = 'default',
                 tpu: Optional[str] = None,
                 devices: Optional[Sequence[str]] = None) -> tf.distribute.Strategy:
  """Returns the `tf.distribute.Strategy` named by `kind`.

  Args:
    kind: 'default' (one device), 'mirrored' (all local GPUs, or `devices`),
      'multi_worker' (MultiWorkerMirroredStrategy; the cluster comes from TF_CONFIG),
      or 'tpu' (needs `tpu`).
    tpu: the TPU's name or grpc address ('local' for a TPU VM), for kind='tpu'.
    devices: explicit devices for 'mirrored' (e.g. from `split_cpu`).

  Returns:
    The strategy.

  Raises:
    ValueError: an unknown kind, or kind='tpu' without `tpu`.
  """
  if kind == 'default':
    return tf.distribute.get_strategy()
  if kind == 'mirrored':
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    logs.progress('MirroredStrategy over %d replicas.', strategy.num_replicas_in_sync)
    return strategy
  if kind == 'multi_worker':
    return tf.distribute.MultiWorkerMirroredStrategy()
  if kind == 'tpu':
    if not tpu:
      raise ValueError("kind='tpu' needs the TPU address: get_strategy('tpu', tpu='...').")
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f'Unknown strategy {kind!r}; choose one of {", ".join(STRATEGIES)}.')

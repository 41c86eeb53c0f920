"""Priority updates for prioritized tables, usable inside a `tf.function`."""
import reverb
import tensorflow as tf


class PriorityUpdater:
  """Writes new priorities back to a Reverb table from inside the training graph.

  Rows that share an item (writers with envs_per_item > 1) share a key; the item gets
  the largest of its rows' priorities, so an item stays likely while any row in it has
  a large error.
  """

  def __init__(self, server_address: str, table_name: str):
    """Args:
      server_address: 'host:port' of the Reverb server.
      table_name: the prioritized table.
    """
    self._table = table_name
    self._client = reverb.TFClient(server_address)

  def __call__(self, keys: tf.Tensor, priorities: tf.Tensor) -> tf.Operation:
    """Updates the items `keys` (uint64, one per row) to `priorities` (one per row).

    Returns:
      The update op (eager: already run). Keys no longer in the table are ignored.
    """
    # tf.unique has no uint64 kernel: bitcast to int64 and back.
    signed = tf.bitcast(tf.cast(keys, tf.uint64), tf.int64)
    unique, index = tf.unique(tf.reshape(signed, [-1]))
    item_priorities = tf.math.unsorted_segment_max(
        tf.cast(tf.reshape(priorities, [-1]), tf.float64), index, tf.size(unique))
    return self._client.update_priorities(
        self._table, tf.bitcast(unique, tf.uint64), item_priorities)


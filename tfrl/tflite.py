"""Exported policies as TensorFlow Lite models, for phones and microcontrollers.

`convert(saved_model_dir, path)` converts an export's `serving_default` signature (the
observation in, the action out; `tfrl.export`) with TFLite's built-in ops only, so the
model runs on any TFLite runtime. Feed-forward policies convert (tested: the converted
model's actions equal the SavedModel's); a recurrent policy does not (its LSTM needs
TensorFlow Select ops, which a plain TFLite runtime lacks) and is refused with that
reason, as is anything else the converter cannot take.
"""
import tensorflow as tf

from tfrl import loaded_policy

SIGNATURE = 'serving_default'


class NotConvertibleError(ValueError):
  """A policy TFLite's built-in ops cannot express (the message says why)."""


def convert(saved_model_dir: str, path: str) -> str:
  """Converts the policy exported at `saved_model_dir` to a TFLite model at `path`.

  Args:
    saved_model_dir: an export (`tfrl.export`).
    path: the .tflite file to write (any TensorFlow filesystem).

  Returns:
    `path`.

  Raises:
    FileNotFoundError, tfrl.export.NotAPolicyError: no exported policy there.
    NotConvertibleError: a recurrent policy, or ops TFLite's built-ins lack.
  """
  policy = loaded_policy.load_policy(saved_model_dir)
  if tf.nest.flatten(policy.policy_state_spec):
    raise NotConvertibleError(
        f'{saved_model_dir} is a recurrent policy: its LSTM state needs TensorFlow '
        'Select ops, which a plain TFLite runtime lacks; convert a feed-forward policy.')
  converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir,
                                                       signature_keys=[SIGNATURE])
  try:
    model = converter.convert()
  except Exception as e:  # pylint: disable=broad-except (the converter's many errors)
    reason = next((line for line in str(e).splitlines() if 'error' in line.lower()),
                  str(e).splitlines()[0] if str(e) else type(e).__name__)
    raise NotConvertibleError(f'TFLite cannot convert {saved_model_dir}: '
                              f'{reason.strip()[:300]}') from e
  with tf.io.gfile.GFile(path, 'wb') as f:
    f.write(model)
  return path

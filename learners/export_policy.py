r"""The export program: converts an exported policy for another runtime.

    tfrl-export --saved_model_dir=runs/job/policies/greedy_policy --tflite=policy.tflite

`--tflite` writes a TensorFlow Lite model of the policy's `serving_default` signature
(observation in, action out) with TFLite's built-in ops (`tfrl.tflite`): feed-forward
policies convert; a recurrent one fails with status 2 and the reason.
"""
from absl import flags

# Only what parsing the command line needs: tfrl (TensorFlow with it) is imported in
# `_main`, so `--help` and a bad command line import no TensorFlow.
from learners.configuration import config
from learners.processes import program

flags.DEFINE_string('saved_model_dir', None, 'The exported policy to convert.')
flags.DEFINE_string('tflite', None, 'Write a TensorFlow Lite model of it here.')
FLAGS = flags.FLAGS


def _main() -> None:
  # pylint: disable=g-import-not-at-top (see the module's imports)
  from tfrl import export
  from tfrl import logs
  from tfrl import tflite
  # pylint: enable=g-import-not-at-top
  if not FLAGS.saved_model_dir or not FLAGS.tflite:
    config.fail('--saved_model_dir and --tflite are both required.')
  try:
    path = tflite.convert(FLAGS.saved_model_dir, FLAGS.tflite)
  except (FileNotFoundError, export.NotAPolicyError, tflite.NotConvertibleError) as e:
    config.fail(f'--saved_model_dir: {e}')
  logs.progress('TFLite model of %s written to %s.', FLAGS.saved_model_dir, path)


def run_main():
  """Console-script entry point (tfrl-export)."""
  program.run_main(_main, root_dir_required=False, extra_arguments_ok=False)


if __name__ == '__main__':
  run_main()

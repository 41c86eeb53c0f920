r"""The dataset converter: writes a D4RL, Minari or TFDS dataset as tfrl's RLDS.

    python -m learners.convert_dataset --source=halfcheetah-medium-v2.hdf5 \
        --out=datasets/halfcheetah_medium

`--source` is anything `Experiment.dataset_dir` reads (`tfrl.datasets.formats`): a
D4RL .hdf5 file, a Minari dataset directory, or an RLDS / TFDS directory (with
':<version>'); `--out` a new directory, which `tfds.builder_from_directory` and
`Experiment.dataset_dir` then read. A source that cannot be read, or an `--out` that
already holds files, ends the program with one 'error:' line and status 2.
"""
from absl import flags

# Only what parsing the command line needs: tfrl (TensorFlow with it) is imported in
# `_main`, so `--help` and a bad command line import no TensorFlow.
from learners.configuration import config
from learners.processes import program

flags.DEFINE_string('source', None, 'The dataset to convert (D4RL .hdf5, Minari or '
                    'TFDS directory).')
flags.DEFINE_string('out', None, 'The new RLDS dataset directory.')
FLAGS = flags.FLAGS


def _main() -> None:
  # pylint: disable=g-import-not-at-top (see the module's imports)
  from tfrl import logs
  from tfrl.datasets import formats
  from tfrl.datasets import rlds
  # pylint: enable=g-import-not-at-top
  if not FLAGS.source or not FLAGS.out:
    config.fail('--source and --out are both required.')
  try:
    recorder = formats.convert(FLAGS.source, FLAGS.out)
  except rlds.DatasetError as e:
    config.fail(f'--source: {e}')
  except FileExistsError as e:
    config.fail(f'--out: {e}')
  logs.progress('Wrote %d episodes (%d steps) of %s to %s.', recorder.episodes,
                recorder.steps, FLAGS.source, FLAGS.out)


def run_main():
  """Entry point (`python -m learners.convert_dataset`)."""
  program.run_main(_main, root_dir_required=False, extra_arguments_ok=False)


if __name__ == '__main__':
  run_main()

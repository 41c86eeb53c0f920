"""The command-line entry every program shares: absl's `app.run` around its main."""
from typing import Callable

from absl import app
from absl import flags

from learners.processes import child_process


def run_main(main: Callable[[], None], root_dir_required: bool = True,
             extra_arguments_ok: bool = True) -> None:
  """Dies with the parent if asked (`child_process`), parses the command line, runs
  `main()`, and exits 0 without interpreter teardown.

  `main` reads the parsed FLAGS; it ends the process itself for any other status (bad
  input, an error it reports in one line). absl's own logging stays quiet unless asked
  for (see `tfrl.logs.quiet_absl_unless_asked`).

  Args:
    main: the program, once the flags are parsed.
    root_dir_required: absl refuses a command line without --root_dir (status 1) before
      `main` runs; otherwise `main` checks it (`config.parse_from_flags`: status 2).
    extra_arguments_ok: whether arguments that are not flags are ignored; if not, absl
      prints the usage and exits 1.
  """
  # First, before the flags are parsed (and, in the programs whose --help loads no
  # TensorFlow, before it loads): a program its launcher started ends with it, even if
  # the launcher is killed in the seconds before.
  child_process.die_with_parent_if_asked()
  if root_dir_required:
    flags.mark_flag_as_required('root_dir')

  def absl_main(argv):
    if not extra_arguments_ok and len(argv) > 1:
      raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
    # Only now, with the flags parsed: --help and a bad command line import no
    # TensorFlow (tfrl imports it).
    # pylint: disable=g-import-not-at-top
    from learners.processes import process
    from tfrl import logs
    from tfrl.envs import worker_env
    # pylint: enable=g-import-not-at-top
    logs.quiet_absl_unless_asked()
    # Env workers need nothing of a program's main module but would import TensorFlow
    # with it.
    worker_env.main_module_defines_no_envs()
    main()
    process.exit_now(0)

  app.run(absl_main)

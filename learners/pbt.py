"""tfrl-pbt: population-based training of one config (Jaderberg et al. 2017).

Starts `--population_size` members, each a one-process job (`learners.pbt_member`) or,
with `--member_program=launch`, a launched job (`learners.launch`, its trainer reporting:
`learners.job.trainer_member`) in `<root_dir>/member_<i>` with hyperparameters drawn from
`--bounds`. At each ready point (every `--ready_interval` env steps, at the member's
next evaluation, a greedy one) a member reports that evaluation's return and waits for
its decision. With `--mode=sync` (the default) the rounds are synchronous: once all
running members have reported, the bottom `--quantile` (20%, at least one member) each
copy a random top-quantile member's checkpoint and take its hyperparameters, perturbed
(`learners.population.population`). With `--mode=async` each report is decided at
once, against the other running members' latest scores, each the mean of a member's
last `--score_window` reports (3): no member waits for another. The history goes to `<root_dir>/pbt/lineage.jsonl`
and TensorBoard (`<root_dir>/pbt/tensorboard`); the member with the best final
evaluation is the population's result (`<root_dir>/pbt/best.json`, its exported
policies).

A member that reaches the config's target ends the population: the others are stopped
(they save). A member killed (a signal, a stalled simulator) restarts from its last
checkpoint; one that fails with an error restarts as a copy of a top member (its
checkpoint, perturbed hyperparameters: `member_<i>/replacement_<n>.json`), or with fresh
hyperparameters before any member has reported. Each member restarts up to
`--max_restarts` times; bad settings and a full disk, which a restart cannot fix, end
the population at once, with the member's own error line and its exit status (2 for a
configuration). Bounds on a hyperparameter the config's agent does not have are refused
before any member starts (`check_bounds`: the agent builder declares its names,
`tfrl.agents.interface.tunable`).

`--backend=ray --ray_address=HOST:PORT` places the members on a Ray cluster's nodes, as
tfrl-launch places its programs (`learners.processes.ray_backend`; Ray Core actors, each
running one member process): root_dir must be on a path every node sees, and
`--ray_resources='{"pbt_member": {...}}'` pins members to nodes with those resources.

One runner holds a population's root_dir at a time (its lock, `tfrl.run_dir`). Run again
on the same root_dir, a population that was stopped resumes: every member from its
checkpoint, the rounds from its reports. One that ended (every member's job ended, or one
reached the target: `<root_dir>/pbt/finished.json`) is not trained again with the same
gin files and bindings: the runner says so and returns its best.json, as a finished
single job does (`learners.job.finished_job`); with others (more train steps, a target) it
resumes, and each member's job decides, as a single job does, whether it asks for more.
`--overwrite` starts afresh: the population's records (`pbt/`) and each member's
root_dir are deleted first, each member's under its job lock (as `tfrl.run_dir.claim`
deletes one job's checkpoints and exports with `overwrite`), so a member job still
running is named rather than deleted under.

    tfrl-pbt --root_dir=/tmp/pbt --gin_file=ppo_lunarlander.gin --population_size=4 \
        --ready_interval=50000 \
        --bounds=learning_rate=1e-5:1e-2,entropy_cost=0:0.05:linear
"""
from absl import flags

# Only what parsing the command line needs: the runner
# (learners/population/population_runner.py, which imports TensorFlow) is imported in
# `_main`, so --help imports no TensorFlow.
from learners.configuration import config
from learners.population import population
from learners.processes import program

flags.DEFINE_integer('population_size', 4, 'Members.')
population.define_ready_interval_flag()
flags.DEFINE_string('bounds', None, 'name=low:high[:linear][:int],... : the hyperparameters '
                    'to search and where (log scale unless :linear).')
flags.DEFINE_integer('seed', 0, "The population's seed (member i runs Experiment.seed = "
                     'seed * 1000 + i).')
flags.DEFINE_float('quantile', population.QUANTILE, 'Fraction of the population at each '
                   'end (at least one member): the bottom copies the top. 0.2 is Jaderberg '
                   "et al.'s truncation; Ray Tune's default is 0.25.")
flags.DEFINE_float('resample_probability', population.RESAMPLE_PROBABILITY, 'Chance a '
                   'hyperparameter is resampled instead of perturbed (Ray Tune\'s default).')
flags.DEFINE_integer('max_restarts', 2, 'Restarts of one member (killed: from its '
                     'checkpoint; failed with an error: as a copy of a top member).')
flags.DEFINE_enum('member_program', 'train_eval', list(population.MEMBER_PROGRAMS),
                  'train_eval: each member is one process; launch: each is a launched job '
                  '(Reverb server, trainer, collectors, evaluator), its trainer reporting.')
flags.DEFINE_enum('mode', 'sync', list(population.MODES), "sync: a round is decided once "
                  'every running member has reported it (members wait at the barrier); '
                  'async: each report is decided at once against the other members\' latest '
                  "scores (as Sample Factory's PBT), no member waiting for another.")
flags.DEFINE_integer('score_window', None, "Reports a member's score is the mean of "
                     '(default: 1 with --mode=sync, 3 with --mode=async).', lower_bound=1)
flags.DEFINE_integer('member_collectors', 1, 'With --member_program=launch: collectors of '
                     'each member.')
flags.DEFINE_float('ray_member_gpus', 0.0, 'With --backend=ray: GPUs each member asks for '
                   '(a fraction: members share a GPU).')
config.define_common_flags()
config.define_ray_flags()
FLAGS = flags.FLAGS


def _main() -> None:
  # pylint: disable=g-import-not-at-top (see the imports)
  from learners.population import population_runner
  population_runner.main()


def run_main():
  """Console-script entry point (tfrl-pbt)."""
  program.run_main(_main, extra_arguments_ok=False)


if __name__ == '__main__':
  run_main()

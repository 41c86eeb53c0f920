"""tfrl's programs and the packages they are built from.

The programs are the modules here, each run as `python -m learners.<program>` (all but
pbt_member also as a `tfrl-*` console script): train_eval (one process),
reverb_server, collect, train, eval and launch (separate programs), pbt and pbt_member
(population-based training), export_policy and convert_dataset. Their parts:
- `learners.configuration`: what a job is (gin parsing, `Experiment`, its checks, task
  sequences);
- `learners.processes`: how programs run as processes (the shared entry, signals and
  exit statuses, starting and watching children, the launcher);
- `learners.population`: population-based training's decisions, records and runner;
- `learners.job`: the parts of one job (the one-process loop, trainer, collector,
  evaluator, server) and what they share.

Importing this package, or any of those, only defines things: no TensorFlow, nothing
run. A program asks to die with the process that started it first thing in its main
(`learners.processes.program.run_main`).
"""

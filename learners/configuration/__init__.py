"""What a job is, before anything runs: `config` (gin parsing with errors that name the
problem, and the options every program declares once as dataclass fields and flags),
`experiment` (`Experiment`, the settings every program of one job shares, and what it
builds from them), `validation` (each field's own range) and `experiment_checks` (the
rules between fields), `tasks` (the task sequences, multi-task envs and targets an
`Experiment` builds) and `transfer` (a sequence's accuracy matrix and its backward and
forward transfer). Its modules import tfrl and each other, nothing else of
`learners`; `config` and `validation` import no TensorFlow at the top, since a
program's --help parses them alone, and `transfer` imports numpy alone, since the
benchmarks' page generator reads recorded runs with it. The bundled gin files stay in learners/configs.
"""

"""How tfrl's programs run as processes, whatever job they do: `program` (the
command-line entry every program shares), `process` (stopping on signals in bounded
time, exit statuses, waiting out a lost server), `stop_plan` (the stop grace split
between the stages of an ordered stop), `disk_full` (a full disk told as such),
`child_process` (children that die with their parent), `fork_server` (programs
started as forks of one process that has imported their libraries), `ray_backend`
(programs placed on a Ray cluster's nodes), `heartbeat` (each program's liveness and
the monitor that reads it), `job_status` (the status line read from a job's server)
and `launcher` (`Launcher`: one job's programs started, watched and stopped in order).
Its modules import tfrl, each other and `learners.configuration` (the launcher parses
the job's config), nothing else of `learners`.
"""

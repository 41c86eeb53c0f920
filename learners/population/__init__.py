"""Population-based training (`learners.pbt`): `population` (the exploit and explore
choices and the lineage that records them), `decisions` (the runner's answers to the
members' reports, in synchronous rounds or asynchronously), `ready_points` (a member's
side: report at each ready point, then apply the decision, whichever program trains the
member) and `population_runner` (the pbt program's body: `Population`, which runs the
members). Its modules import tfrl, each other, `learners.configuration` and
`learners.processes`; the jobs that take part import `ready_points`, never the reverse.
"""

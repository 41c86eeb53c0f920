"""Population-based training (`learners.pbt`): `population` (the exploit and explore
decisions and the lineage that records them), `ready_points` (a member's side: report
at each ready point, then apply the decision, whichever program trains the member) and
`population_runner` (the pbt program's body: `Population`, which runs the members and
the rounds). Its modules import tfrl, each other, `learners.configuration` and
`learners.processes`; the jobs that take part import `ready_points`, never the reverse.
"""

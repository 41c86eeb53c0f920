"""The parts of one job that train, act, evaluate and serve. The one-process job
(`learners.train_eval`): `one_process_job` (its phases), `collected_training` (its train
calls on what it collected), `callbacks`, `progress_bar` and `training_result`. The
separate programs' bodies: `server_program` (reverb_server), `collector` (collect),
`trainer` (train), `evaluator` (eval) and `launched_job` (launch). What they share:
`finished_job` (a job's recorded end), `confirmations` (the target's confirmation),
`eval_barrier` (the trainer held still while the
evaluator confirms a policy), `pacing` (an on-policy collector paced to the trainer)
and `trainer_member` (a launched trainer as a population member). Its modules import
tfrl, each other, `learners.configuration`, `learners.processes` and
`learners.population`; never the program modules, which import them.
"""

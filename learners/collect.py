r"""The collect program: a batched actor writing experience into a Reverb server.

    python -m learners.collect --root_dir=runs/job --reverb_address=host:8000 \
      --gin_file=dqn_cartpole.gin --task_id=0

It pulls the newest policy variables (and train step, which tags each item as its
policy version) from the server's variables table before every unroll of the sequence
layouts and every 50 vector steps of the replay layouts (--variable_update_period
overrides both). It waits for the trainer's first push (logging that it does, up to
--variables_timeout_s) rather than act with untrained weights. It warms up as the layout
says (`Layout.warm_up`): task 0 of a replay layout collects
Experiment.initial_collect_steps random env steps first, while the trainer starts; each
collector of a sequence layout acts one step after the push, which aligns its unrolls
with its pulls. A collector of an on-policy agent (PPO) starts each unroll only once
the trainer has pushed the version that will train on it (learners/pacing.py). If the
server goes away it logs, retries with backoff for up to --reconnect_timeout_s, and
carries on when it returns; any other error (from the environment or the policy) ends
it with that error and a non-zero status. SIGTERM/SIGINT stop it cleanly, also while a rate limiter holds its
writes (what is still unsent after 5 s is dropped and logged).
"""
import dataclasses
import os
import threading
import time
from typing import Optional

from absl import app
from absl import flags
from absl import logging
from tf_agents.policies import random_tf_policy

from learners import config
from learners import heartbeat
from learners import pacing
from learners import stop_plan
from learners import process
from learners.experiment import Experiment
from tfrl import actors
from tfrl import logs
from tfrl import metrics as tfrl_metrics
from tfrl import replay
from tfrl.agents import interface


@dataclasses.dataclass(frozen=True)
class Options:
  """How a collector runs (the flags of the same names).

  Attributes:
    task_id: this collector's index: seeds its envs (seed + 1000 * task_id) and picks
      its exploration among `num_collectors` (the agent's `collect_policy_for_task`).
    num_collectors: how many collectors the job runs.
    num_envs: envs in this collector (None: Experiment.num_envs); a multiple of the
      envs per item.
    variable_update_period: vector steps between pulls of the policy variables (None:
      the layout's `vector_steps_per_pull`, one unroll or 50 steps).
    variables_timeout_s: how long to wait for the trainer to push variables.
    write_timeout_s: how long a write may wait for the server to take items.
    reconnect_timeout_s: how long to keep retrying an unreachable server.
    max_env_steps: stop after this many env steps (0: never).
    log_interval_s: seconds between progress lines.
  """
  task_id: int = 0
  num_collectors: int = 1
  num_envs: Optional[int] = None
  variable_update_period: Optional[int] = None
  variables_timeout_s: float = 600.0
  write_timeout_s: float = 600.0
  reconnect_timeout_s: float = 600.0
  max_env_steps: int = 0
  log_interval_s: float = 10.0


config.define_common_flags()
flags.DEFINE_string('reverb_address', '127.0.0.1:8000', 'host:port of the Reverb server.')
flags.DEFINE_integer('num_envs', Options.num_envs, 'Envs in this collector (default: '
                     'Experiment.num_envs); a multiple of the envs per item.')
flags.DEFINE_integer('task_id', Options.task_id, 'This collector\'s index: seeds its envs '
                     'and sets its exploration (see --num_collectors).')
flags.DEFINE_integer('num_collectors', Options.num_collectors,
                     'How many collectors the job runs; with DQN, collector i explores with '
                     'epsilon_end ** (1 + i / (num_collectors - 1)) (Ape-X style spread).')
flags.DEFINE_integer('variable_update_period', Options.variable_update_period,
                     'Vector steps between pulls of the policy variables (default: '
                     'before every unroll of a sequence layout, every 50 vector steps '
                     'of a replay layout).')
flags.DEFINE_float('variables_timeout_s', Options.variables_timeout_s,
                   'How long to wait for the trainer to push variables.')
flags.DEFINE_float('write_timeout_s', Options.write_timeout_s,
                   'How long a write may wait for the server to take items (a server '
                   'that is gone, or a rate limiter holding inserts) before the collector '
                   'treats the server as lost and reconnects (at least 10 s).')
flags.DEFINE_float('reconnect_timeout_s', Options.reconnect_timeout_s,
                   'How long to keep retrying an unreachable server before giving up.')
flags.DEFINE_integer('max_env_steps', Options.max_env_steps,
                     'Stop after this many env steps (0: never).')
flags.DEFINE_float('log_interval_s', Options.log_interval_s,
                   'Seconds between progress lines.')
FLAGS = flags.FLAGS
_CLOSE_TIMEOUT_S = 5.0  # at most; less when the launcher's stop gives less (stop_plan)


def collect(root_dir: str, address: str, stop_event: threading.Event,
            options: Options = Options()) -> int:
  """Runs a collector until stopped (or `options.max_env_steps`).

  Args:
    root_dir: the job's directory (collectors keep no files there).
    address: 'host:port' of the Reverb server.
    stop_event: set to stop.
    options: see `Options`.

  Returns:
    The env steps it took.

  Raises:
    replay.VariablesNotPushedError: no variables within `variables_timeout_s`.
    Exception: an error of the environment or the policy, unchanged.
  """
  experiment, task_id = Experiment(), options.task_id
  layout = experiment.layout
  num_envs = options.num_envs or experiment.num_envs
  replay.wait_for_server(address)
  env = experiment.make_env(num_envs=num_envs, seed=experiment.seed + 1000 * task_id)
  train_step, agent = experiment.build_agent()
  replay.check_table_signature(address, layout.experience_table,
                               layout.item_signature(agent))
  client = replay.ReplayServer.connect(address).client
  writer = layout.make_writer(client, flush_timeout_ms=int(options.write_timeout_s * 1000),
                              stop_event=stop_event)
  variables = replay.VariableContainer(address,
                                       experiment.pushed_variables(agent, train_step))
  policy = interface.collect_policy(agent, task_id, options.num_collectors)
  pull_period = options.variable_update_period or layout.vector_steps_per_pull
  # Summaries after every run of pull_period vector steps.
  actor = actors.Actor(env, policy, [writer], policy_version=train_step,
                       summary_dir=os.path.join(root_dir, 'collect', f'task_{task_id}'),
                       summary_interval=1)
  random_actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(
      env.time_step_spec(), env.action_spec()), [writer], policy_version=-1)
  # Replay's warm-up (task 0's random actions) needs no policy: it runs while the
  # trainer starts. A sequence layout's warm-up acts with the policy: after its push.
  replay_warm_up = task_id == 0 and not layout.trains_on_collected_items
  if replay_warm_up and experiment.initial_collect_steps:
    layout.warm_up(actor, random_actor, experiment.initial_collect_steps)
  logs.progress('Collector %d waiting for the trainer\'s first variables push '
               '(up to %.0f s).', task_id, options.variables_timeout_s)
  try:
    variables.update(timeout_s=options.variables_timeout_s, stop_event=stop_event)
  except replay.VariablesNotPushedError:
    if stop_event.is_set():  # Stopped while waiting: not an error.
      return random_actor.env_steps
    raise
  logs.progress('Collector %d acting with policy version %d.', task_id, int(train_step))
  if layout.trains_on_collected_items:
    layout.warm_up(actor, random_actor, experiment.initial_collect_steps)
  random_steps = random_actor.env_steps

  def new_pacing() -> Optional[pacing.UnrollPacing]:
    """PPO's unrolls each wait for the push that trains on them (learners/pacing.py)."""
    if not (layout.trains_on_collected_items and interface.on_policy(agent)):
      return None
    return pacing.UnrollPacing(
        task_id, options.num_collectors, items_per_unroll=num_envs // layout.envs_per_item,
        items_per_push=experiment.train_steps_per_iteration * layout.items_per_train_step)

  paced = new_pacing()
  beat = heartbeat.Heartbeat(root_dir, f'collect_{task_id}').start()
  last_log = time.monotonic()
  while not stop_event.is_set():
    if options.max_env_steps and actor.env_steps + random_steps >= options.max_env_steps:
      break
    try:
      if paced is not None:
        with beat.doing('wait for the policy'):
          if not paced.wait_for_turn(variables.pushes, stop_event,
                                     options.variables_timeout_s):
            break
        variables.update(timeout_s=options.variables_timeout_s, stop_event=stop_event)
      with beat.doing('env step'):
        metrics = actor.run(pull_period)
      beat.progress(env_steps=actor.env_steps + random_steps)
      if paced is None:
        variables.update(timeout_s=options.variables_timeout_s, stop_event=stop_event)
      else:
        with beat.doing('wait for the queue'):  # the trainer's to empty, not a stall
          writer.send_all()  # the unroll the trainer waits for, before this one waits
    except (replay.WriterStoppedError, replay.VariablesNotPushedError,
            pacing.PolicyVersionTimeoutError):
      if stop_event.is_set():  # a write or pull that waited saw the stop signal
        break
      raise
    except Exception as e:  # pylint: disable=broad-except
      # Only a lost server is worth a retry; an error from the environment or the
      # policy ends the collector with that error.
      if not replay.is_server_lost(e):
        raise
      if stop_event.is_set():
        break
      logging.warning('Lost the Reverb server at %s (%s: %s); reconnecting.', address,
                      type(e).__name__, e)
      writer.abandon()
      actor.reset()
      if not process.wait_for_server_with_backoff(address, options.reconnect_timeout_s,
                                                  stop_event):
        break
      paced = new_pacing()  # a restarted server counts pushes from 0
      logs.progress('Reverb server %s is back; collecting again.', address)
      continue
    if time.monotonic() - last_log >= options.log_interval_s:
      last_log = time.monotonic()
      logs.progress('collector %d | env steps %d | %.0f env steps/s | avg return %s | '
                   'policy version %d', task_id, actor.env_steps + random_steps,
                   metrics['EnvStepsPerSecond'],
                   tfrl_metrics.format_return(metrics['AverageReturn']), int(train_step))
  # Briefly, and well inside this program's share of the stop: once the trainer has
  # stopped, a rate limiter may hold these for good.
  close_timeout_s = min(_CLOSE_TIMEOUT_S, 0.4 * stop_plan.program_grace_s())
  try:
    writer.close(timeout_ms=int(close_timeout_s * 1000))
  except Exception as e:  # pylint: disable=broad-except
    if not replay.is_server_lost(e):
      raise
    logging.warning('The last items were not accepted within %.1f s (%s); dropped.',
                    close_timeout_s, e)
  beat.stop()
  env.close()
  logs.progress('Collector %d stopped after %d env steps.', task_id,
               actor.env_steps + random_steps)
  return actor.env_steps + random_steps


def main(argv):
  del argv
  logs.quiet_absl_unless_asked()
  config.parse_from_flags()
  options = config.options_from_flags(Options, FLAGS)
  process.run_program(lambda stop_event: collect(
      FLAGS.root_dir, FLAGS.reverb_address, stop_event, options),
                      f'collector {options.task_id}')
  process.exit_now(0)


def run_main():
  app.run(main)


if __name__ == '__main__':
  run_main()

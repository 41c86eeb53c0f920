r"""The collect program: a batched actor writing experience into a Reverb server.

    python -m learners.collect --root_dir=runs/job --reverb_address=host:8000 \
      --gin_file=dqn_cartpole.gin --task_id=0

Every --variable_update_period vector steps it pulls the newest policy variables (and
train step, which tags each item as its policy version) from the server's variables
table. It waits for the trainer's first push (logging that it does, up to
--variables_timeout_s) rather than act with untrained weights; task 0 first collects
Experiment.initial_collect_steps random env steps. If the server goes away it logs,
retries with backoff for up to --reconnect_timeout_s, and carries on when it returns;
any other error (from the environment or the policy) ends it with that error and a
non-zero status. SIGTERM/SIGINT stop it cleanly, also while a rate limiter holds its
writes (what is still unsent after 5 s is dropped and logged).
"""
import threading
import time

from absl import app
from absl import flags
from absl import logging
import gin
from tf_agents.policies import random_tf_policy

from learners import config
from learners import process
from learners.experiment import Experiment
from tfrl import actors
from tfrl import replay
from tfrl.agents import dqn

config.define_common_flags()
flags.DEFINE_string('reverb_address', '127.0.0.1:8000', 'host:port of the Reverb server.')
flags.DEFINE_integer('num_envs', None, 'Envs in this collector (default: Experiment.'
                     'num_envs); a multiple of the envs per item.')
flags.DEFINE_integer('task_id', 0, 'This collector\'s index: seeds its envs and sets its '
                     'exploration (see --num_collectors).')
flags.DEFINE_integer('num_collectors', 1,
                     'How many collectors the job runs; with DQN, collector i explores with '
                     'epsilon_end ** (1 + i / (num_collectors - 1)) (Ape-X style spread).')
flags.DEFINE_integer('variable_update_period', 50,
                     'Vector steps between pulls of the policy variables.')
flags.DEFINE_float('variables_timeout_s', 600.0,
                   'How long to wait for the trainer to push variables.')
flags.DEFINE_float('write_timeout_s', 600.0,
                   'How long a write may wait for the server to take items (a server '
                   'that is gone, or a rate limiter holding inserts) before the collector '
                   'treats the server as lost and reconnects (at least 10 s).')
flags.DEFINE_float('reconnect_timeout_s', 600.0,
                   'How long to keep retrying an unreachable server before giving up.')
flags.DEFINE_integer('max_env_steps', 0, 'Stop after this many env steps (0: never).')
flags.DEFINE_float('log_interval_s', 10.0, 'Seconds between progress lines.')
FLAGS = flags.FLAGS
_CLOSE_TIMEOUT_MS = 5_000

def _set_task_exploration(experiment: Experiment, task_id: int, num_collectors: int) -> None:
  """Spreads DQN's final epsilon over collectors: task 0 keeps the configured value,
  the last gets its square (Ape-X's spread, anchored at the config). Others: no change."""
  if experiment.agent_fn is not dqn.create_dqn_agent or num_collectors < 2:
    return
  epsilon_end = gin.query_parameter('create_dqn_agent.epsilon_end') if _bound(
      'create_dqn_agent.epsilon_end') else 0.05
  epsilon = epsilon_end ** (1 + task_id / (num_collectors - 1))
  with gin.unlock_config():
    gin.bind_parameter('create_dqn_agent.epsilon_end', epsilon)
  logging.info('Collector %d explores with epsilon_end=%.4g.', task_id, epsilon)


def _bound(parameter: str) -> bool:
  try:
    gin.query_parameter(parameter)
    return True
  except ValueError:
    return False


def collect(root_dir: str, address: str, task_id: int, num_envs: int,
            stop_event: threading.Event) -> int:
  """Runs the collector until stopped; returns the env steps it took."""
  del root_dir  # Collectors keep no files; logs go to the launcher's log file.
  experiment = Experiment()
  replay.wait_for_server(address)
  env = experiment.make_env(num_envs=num_envs, seed=experiment.seed + 1000 * task_id)
  _set_task_exploration(experiment, task_id, FLAGS.num_collectors)
  train_step, agent = experiment.build_agent()
  replay.check_table_signature(address, experiment.experience_table,
                              experiment.item_signature(agent))
  client = replay.ReplayServer.connect(address).client
  writer = experiment.make_writer(client,
                                  flush_timeout_ms=int(FLAGS.write_timeout_s * 1000),
                                  stop_event=stop_event)
  variables = replay.VariableContainer(address,
                                       experiment.pushed_variables(agent, train_step))
  actor = actors.Actor(env, agent.collect_policy, [writer], policy_version=train_step)
  random_steps = 0
  if task_id == 0 and experiment.initial_collect_steps > 0:
    random_actor = actors.Actor(env, random_tf_policy.RandomTFPolicy(
        env.time_step_spec(), env.action_spec()), [writer], policy_version=-1)
    random_actor.run(max(1, experiment.initial_collect_steps // num_envs))
    random_steps = random_actor.env_steps
    actor.reset()
  logging.info('Collector %d waiting for the trainer\'s first variables push '
               '(up to %.0f s).', task_id, FLAGS.variables_timeout_s)
  try:
    variables.update(timeout_s=FLAGS.variables_timeout_s, stop_event=stop_event)
  except replay.VariablesNotPushedError:
    if stop_event.is_set():  # Stopped while waiting: not an error.
      return random_steps
    raise
  logging.info('Collector %d acting with policy version %d.', task_id, int(train_step))

  last_log = time.monotonic()
  while not stop_event.is_set():
    if FLAGS.max_env_steps and actor.env_steps + random_steps >= FLAGS.max_env_steps:
      break
    try:
      metrics = actor.run(FLAGS.variable_update_period)
      variables.update(timeout_s=FLAGS.variables_timeout_s, stop_event=stop_event)
    except (replay.WriterStoppedError, replay.VariablesNotPushedError):
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
      if not process.wait_for_server_with_backoff(address, FLAGS.reconnect_timeout_s,
                                                  stop_event):
        break
      logging.info('Reverb server %s is back; collecting again.', address)
      continue
    if time.monotonic() - last_log >= FLAGS.log_interval_s:
      last_log = time.monotonic()
      logging.info('collector %d | env steps %d | %.0f env steps/s | avg return %.1f | '
                   'policy version %d', task_id, actor.env_steps + random_steps,
                   metrics['EnvStepsPerSecond'], metrics['AverageReturn'], int(train_step))
  try:
    # Briefly: once the trainer has stopped, a rate limiter may hold these for good.
    writer.close(timeout_ms=_CLOSE_TIMEOUT_MS)
  except Exception as e:  # pylint: disable=broad-except
    if not replay.is_server_lost(e):
      raise
    logging.warning('The last items were not accepted within %d s (%s); dropped.',
                    _CLOSE_TIMEOUT_MS // 1000, e)
  env.close()
  logging.info('Collector %d stopped after %d env steps.', task_id,
               actor.env_steps + random_steps)
  return actor.env_steps + random_steps


def main(argv):
  del argv
  config.parse_from_flags()
  num_envs = FLAGS.num_envs or Experiment().num_envs
  process.run_program(lambda stop_event: collect(
      FLAGS.root_dir, FLAGS.reverb_address, FLAGS.task_id, num_envs, stop_event),
                      f'collector {FLAGS.task_id}')


def run_main():
  app.run(main)


if __name__ == '__main__':
  run_main()

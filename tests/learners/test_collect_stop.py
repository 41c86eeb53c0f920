"""A collector's run meeting what stops it or holds it up: stopped during its random
warm-up while its writes wait on the replay table's rate limiter (a job that ends before
collector 0 has warmed up), it ends cleanly; its server gone while it pulls the policy
every step, it says so, waits for the server and collects again.

Each collector runs in a fresh process (`learners.collect` defines program flags that
other program modules imported by the suite define too)."""
import json
import os
import textwrap

import pytest

import python_runs  # tests/python_runs.py

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What both scripts import: a collector and its settings, run in a thread of the script.
_IMPORTS = textwrap.dedent('''
    import json, logging, sys, threading, time
    from learners import collect
    from learners.configuration.experiment import Experiment
    from learners.job import collector
    from tfrl import layouts, replay
''')

_SCRIPT = _IMPORTS + textwrap.dedent('''
    # Nobody samples, so the limiter holds inserts back soon after the table's minimum.
    experiment = Experiment(env_name='CartPole-v1', num_envs=4, batch_size=4,
                            samples_per_insert=1.0, initial_collect_steps=20_000)
    train_step, agent = experiment.build_agent()
    server = replay.ReplayServer(experiment.tables(agent, train_step))
    stop_event, outcome = threading.Event(), {}

    def run():
      try:
        outcome['env_steps'] = collector.collect(
            experiment, sys.argv[1], server.address, stop_event,
            collect.Options(task_id=0, write_timeout_s=600))
      except Exception as e:  # pylint: disable=broad-except
        outcome['error'] = repr(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    size = lambda: server.client.server_info()[layouts.REPLAY_TABLE].current_size
    while size() < 8 and time.monotonic() < deadline:  # the warm-up has begun
      time.sleep(0.2)
    time.sleep(3)  # its writes now wait on the limiter
    outcome['alive_before_stop'] = thread.is_alive()
    stop_event.set()
    thread.join(30)
    outcome['stopped'] = not thread.is_alive()
    print('RESULT ' + json.dumps(outcome), flush=True)
    server.stop()
''')


@pytest.mark.integration
def test_a_collector_stopped_in_its_rate_limited_warm_up_returns_cleanly(tmp_path):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = python_runs.run(['-c', _SCRIPT, str(tmp_path)], timeout=300, env=env)
  assert 'RESULT ' in result.stdout, result.stderr[-3000:]
  outcome = json.loads(result.stdout.split('RESULT ', 1)[1])
  assert outcome['alive_before_stop'] and outcome['stopped'], outcome
  assert 'error' not in outcome, outcome['error']
  assert 0 < outcome['env_steps'] < 20_000


_OUTAGE_SCRIPT = _IMPORTS + textwrap.dedent('''
    collector._PULL_LOST_AFTER_S = 2.0  # the outage below lasts seconds, not minutes
    logged = []

    class Recorder(logging.Handler):
      def emit(self, record):
        logged.append(record.getMessage())

    logging.getLogger('absl').addHandler(Recorder())  # beside absl's own, on the root

    experiment = Experiment(env_name='CartPole-v1', num_envs=2, batch_size=4,
                            samples_per_insert=None, initial_collect_steps=0)
    train_step, agent = experiment.build_agent()
    tables = lambda: experiment.tables(agent, train_step)
    server = replay.ReplayServer(tables())
    address, port = server.address, int(server.address.rsplit(':', 1)[1])
    pushed = experiment.pushed_variables(agent, train_step)
    replay.VariableContainer(address, pushed).push()
    stop_event, outcome = threading.Event(), {}

    def run():
      try:
        # A pull every vector step and writes that wait 600 s: the pull meets the outage.
        collector.collect(experiment, sys.argv[1], address, stop_event,
                          collect.Options(task_id=0, variable_update_period=1,
                                          write_timeout_s=600, reconnect_timeout_s=120))
      except Exception as e:  # pylint: disable=broad-except
        outcome['error'] = repr(e)

    def wait(what, condition, timeout_s=120):
      deadline = time.monotonic() + timeout_s
      while not condition():
        if time.monotonic() > deadline or not thread.is_alive():
          outcome['gave_up_waiting_for'] = what
          return False
        time.sleep(0.2)
      return True

    inserted = lambda: replay.inserted_items(address, layouts.REPLAY_TABLE, timeout_s=10)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if wait('inserts before the outage', lambda: inserted() > 20):
      server.stop()
      # The server comes back only once the collector has said it is lost.
      wait('the collector to log the lost server',
           lambda: any('Lost the Reverb server' in line for line in logged))
      server = replay.ReplayServer(tables(), port=port)
      replay.VariableContainer(address, pushed).push()
      wait('inserts after the outage', lambda: inserted() > 20)
    outcome['alive'] = thread.is_alive()
    stop_event.set()
    thread.join(60)
    outcome['stopped'] = not thread.is_alive()
    print('RESULT ' + json.dumps(outcome), flush=True)
    server.stop()
''')


@pytest.mark.integration
def test_a_collector_whose_server_goes_away_mid_pull_says_so_and_collects_again(tmp_path):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = python_runs.run(['-c', _OUTAGE_SCRIPT, str(tmp_path)], timeout=300, env=env)
  assert 'RESULT ' in result.stdout, result.stderr[-3000:]
  outcome = json.loads(result.stdout.split('RESULT ', 1)[1])
  assert outcome == {'alive': True, 'stopped': True}, (outcome, result.stderr[-3000:])
  log = result.stderr
  lost = log.find('Lost the Reverb server')
  assert lost >= 0, log[-3000:]
  assert log.find('is back; collecting again', lost) > lost, log[-3000:]

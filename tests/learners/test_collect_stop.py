"""A collector stopped during its random warm-up, while its writes wait on the replay
table's rate limiter (a job that ends before collector 0 has warmed up), ends cleanly."""
import threading
import time

from learners import collect
from learners.experiment import Experiment
from tfrl import layouts


def test_a_collector_stopped_in_its_rate_limited_warm_up_returns_cleanly(tmp_path,
                                                                         reverb_server_factory):
  # Nobody samples, so the limiter holds inserts back soon after the table's minimum.
  experiment = Experiment(env_name='CartPole-v1', num_envs=4, batch_size=4,
                          samples_per_insert=1.0, initial_collect_steps=20_000)
  train_step, agent = experiment.build_agent()
  server = reverb_server_factory(experiment.tables(agent, train_step))
  stop_event = threading.Event()
  outcome = {}

  def run():
    try:
      outcome['env_steps'] = collect.collect(
          experiment, str(tmp_path), server.address, stop_event,
          collect.Options(task_id=0, write_timeout_s=600))
    except Exception as e:  # pylint: disable=broad-except
      outcome['error'] = e

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  deadline = time.monotonic() + 120
  inserted = lambda: server.client.server_info()[layouts.REPLAY_TABLE].current_size
  while inserted() < 8 and time.monotonic() < deadline:  # the warm-up has begun
    time.sleep(0.2)
  time.sleep(3)  # its writes now wait on the limiter
  assert thread.is_alive(), outcome
  stop_event.set()
  thread.join(30)
  assert not thread.is_alive(), 'the collector did not stop within 30 s'
  assert 'error' not in outcome, outcome['error']
  assert 0 < outcome['env_steps'] < 20_000

"""Tests for what happens when the Reverb server is gone, full or slow.

Reverb 0.14 waits forever in several calls (opening a writer, sampling); these tests
check that tfrl bounds them, names the address in its errors, lets a blocked writer
stop, and tells "the server is lost" errors from bugs.
"""
import threading
import time
import types

import gymnasium
import numpy as np
import ports  # tests/ports.py
import pytest
import reverb
import tensorflow as tf
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import time_step as ts

from test_writers import COLLECT_DATA_SPEC  # tests/replay/test_writers.py
from tfrl import replay
from tfrl.replay import variables as variables_lib


def unused_address():
  return f'127.0.0.1:{ports.free_port()}'


def raised_within(seconds, fn):
  """The exception `fn()` raises, failing (not hanging) if it takes over `seconds`.

  Without the bounds under test these calls block forever; the test thread must not.
  """
  outcome = []

  def run():
    try:
      fn()
    except Exception as e:  # pylint: disable=broad-except
      outcome.append(e)
    else:
      outcome.append(None)

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  thread.join(seconds)
  assert outcome, f'still blocked after {seconds} s'
  return outcome[0]


def mid_step_write(t, num_envs=1):
  """Write `t` of one long episode: (time_step, policy_step, next_time_step, version)."""

  def time_step(i):
    step_type = ts.StepType.FIRST if i == 0 else ts.StepType.MID
    return ts.TimeStep(step_type=np.full(num_envs, step_type, np.int32),
                       reward=np.ones(num_envs, np.float32),
                       discount=np.ones(num_envs, np.float32),
                       observation=np.full(num_envs, i, np.float32))

  action = np.full(num_envs, t, np.int64)
  return time_step(t), policy_step_lib.PolicyStep(action, (), ()), time_step(t + 1), t


# call_with_timeout.


def test_call_with_timeout_returns_the_result():
  assert replay.call_with_timeout(lambda: 42, 5, 'nothing') == 42
  assert replay.call_with_timeout(lambda: 'direct', None, 'nothing') == 'direct'


def test_call_with_timeout_reraises_the_error():
  error = KeyError('missing')

  def fail():
    raise error

  with pytest.raises(KeyError) as raised:
    replay.call_with_timeout(fail, 5, 'nothing')

  assert raised.value is error


def test_call_with_timeout_gives_up_naming_what_and_discards_late_results():
  release, discarded = threading.Event(), []
  start = time.monotonic()

  with pytest.raises(replay.ReplayServerUnreachableError) as error:
    replay.call_with_timeout(lambda: release.wait(10) and 'late', 0.3,
                             "the Reverb server at 'localhost:1'",
                             discard=discarded.append)

  assert time.monotonic() - start < 8  # the 0.3 s bound, not the call's 10 s
  assert "the Reverb server at 'localhost:1'" in str(error.value)
  assert '0.3 s' in str(error.value)
  release.set()
  for _ in range(100):  # The abandoned call now returns; its result is handed back.
    if discarded:
      break
    time.sleep(0.02)
  assert discarded == ['late']


# Bounded waits on a server that is gone.


def test_writer_to_absent_server_fails_naming_the_address():
  address = unused_address()
  writer = replay.NStepTransitionWriter(reverb.Client(address), 'queue', n=1,
                                        connect_timeout_s=1)

  error = raised_within(5, lambda: writer.write(*mid_step_write(0)))

  assert isinstance(error, replay.ReplayServerUnreachableError), error
  assert address in str(error) and 'queue' in str(error)
  assert replay.is_server_lost(error)
  writer.close()  # No Reverb writer was opened: nothing to flush.


def test_push_to_absent_server_fails_naming_address_and_table():
  variables = {'w': tf.Variable([1.0, 2.0])}
  address = unused_address()
  container = replay.VariableContainer(address, variables)

  error = raised_within(5, lambda: container.push(timeout_s=1))

  assert isinstance(error, replay.ReplayServerUnreachableError), error
  assert address in str(error) and "'variables'" in str(error)


def test_push_that_the_server_does_not_take_times_out(reverb_server_factory):
  # A full queue holds the insert back: the writer opens, the flush cannot finish.
  server = reverb_server_factory([replay.queue_table('full', 1, None)])
  server.client.insert(np.float32(0), priorities={'full': 1.0})
  container = replay.VariableContainer(server.address, {'w': tf.Variable([1.0])},
                                       table_name='full')

  error = raised_within(5, lambda: container.push(timeout_s=1))

  assert isinstance(error, replay.ReplayServerUnreachableError), error
  assert server.address in str(error) and "'full'" in str(error)
  assert isinstance(error.__cause__, reverb.errors.DeadlineExceededError)


def container_whose_size_check_sees_an_item(reverb_server_factory, monkeypatch):
  """(server, container) where the pull's size check sees an item the read will not
  find: one pushed before a server restart, or a server lost after the check."""
  variables = {'w': tf.Variable([1.0])}
  server = reverb_server_factory([
      replay.variables_table(replay.VariableContainer.signature(variables))])
  monkeypatch.setattr(variables_lib.server_lib, 'wait_for_server', lambda *unused: {
      'variables': types.SimpleNamespace(current_size=1)})
  return server, replay.VariableContainer(server.address, variables)


def test_pull_is_bounded_when_the_table_empties_before_the_read(
    reverb_server_factory, monkeypatch):
  server, container = container_whose_size_check_sees_an_item(reverb_server_factory,
                                                              monkeypatch)

  error = raised_within(5, lambda: container.pull(timeout_s=1))

  assert isinstance(error, replay.ReplayServerUnreachableError), error
  assert server.address in str(error) and "'variables'" in str(error)


def test_pull_read_of_a_server_lost_after_the_size_check_is_bounded_inside_the_timeout(
    reverb_server_factory, monkeypatch):
  # A collector's first pull waits up to 600 s for a push; a server that dies between the
  # size check and the read must not hold it that long (CI once saw this), but end in
  # the read's own bound, as a lost server its caller reconnects to.
  _, container = container_whose_size_check_sees_an_item(reverb_server_factory,
                                                         monkeypatch)
  monkeypatch.setattr(variables_lib, '_READ_TIMEOUT_S', 1.0)

  error = raised_within(10, lambda: container.pull(timeout_s=600,
                                                   stop_event=threading.Event()))

  assert isinstance(error, replay.ReplayServerUnreachableError), error
  assert "reading variables from table 'variables'" in str(error)
  assert replay.is_server_lost(error)


def test_pull_waiting_on_a_lost_server_stops_at_the_stop_signal():
  # A collector waiting for its first push when the server dies: SIGTERM must end the
  # wait in seconds, not after the pull's timeout (it once sat out the scheduler's grace).
  container = replay.VariableContainer(unused_address(), {'w': tf.Variable([1.0])})
  stop_event = threading.Event()
  threading.Timer(0.5, stop_event.set).start()

  error = raised_within(10, lambda: container.pull(timeout_s=600, stop_event=stop_event))

  assert isinstance(error, replay.VariablesNotPushedError), error


def test_pull_from_a_lost_server_fails_naming_it_at_the_timeout():
  address = unused_address()
  container = replay.VariableContainer(address, {'w': tf.Variable([1.0])})

  error = raised_within(15, lambda: container.pull(timeout_s=3,
                                                   stop_event=threading.Event()))

  assert isinstance(error, replay.ReplayServerUnreachableError), error
  assert address in str(error)


def test_pull_told_when_a_server_is_lost_raises_long_before_its_timeout():
  # A collector's pull: a server silent for `lost_after_s` is lost (the collector then
  # logs it and reconnects), not waited for up to the 600-s timeout without a word.
  address = unused_address()
  container = replay.VariableContainer(address, {'w': tf.Variable([1.0])})

  error = raised_within(15, lambda: container.pull(timeout_s=600,
                                                   stop_event=threading.Event(),
                                                   lost_after_s=3))

  assert isinstance(error, replay.ReplayServerUnreachableError), error
  assert address in str(error) and replay.is_server_lost(error)


@pytest.mark.parametrize('error, lost', [
    (RuntimeError('Connection reset by peer'), True),  # the server died mid-call
    (RuntimeError('an unrelated bug'), False),
])
def test_wait_for_server_tells_a_lost_connection_from_a_bug(error, lost):
  def server_info(timeout):
    del timeout
    raise error
  client = types.SimpleNamespace(server_info=server_info)
  if lost:
    with pytest.raises(replay.ReplayServerUnreachableError):
      replay.wait_for_server('127.0.0.1:1', 1, client)
  else:
    with pytest.raises(RuntimeError, match='unrelated bug'):
      replay.wait_for_server('127.0.0.1:1', 1, client)


# A writer held back by a rate limiter.


def blocked_writer(server, **kwargs):
  """A writer whose second item waits: queue of 1, every item confirmed before return."""
  writer = replay.NStepTransitionWriter(server.client, 'queue', n=1,
                                        max_in_flight_items=0, **kwargs)
  writer.write(*mid_step_write(0))  # Fills the queue.
  return writer


@pytest.fixture
def queue_of_one(reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 1)
  return reverb_server_factory([replay.queue_table('queue', 1, signature)])


def test_set_stop_event_stops_a_writer_waiting_on_the_rate_limiter(queue_of_one):
  stop_event = threading.Event()
  writer = blocked_writer(queue_of_one, stop_event=stop_event)
  threading.Timer(0.3, stop_event.set).start()

  error = raised_within(3, lambda: writer.write(*mid_step_write(1)))

  assert isinstance(error, replay.WriterStoppedError), error
  assert 'queue' in str(error)
  assert not replay.is_server_lost(replay.WriterStoppedError('stopped'))
  # The unconfirmed item cannot be flushed in 0.2 s; the writer is released anyway.
  start = time.monotonic()
  with pytest.raises(reverb.errors.DeadlineExceededError):
    writer.close(timeout_ms=200)
  assert time.monotonic() - start < 8  # bounds on a loaded machine, not a speed check
  writer.close()  # Already released: returns at once, no second flush.
  assert queue_of_one.table_info()['queue'].current_size == 1


def test_stop_event_set_early_does_not_stop_writes_that_need_no_wait(queue_of_one):
  stop_event = threading.Event()
  stop_event.set()
  blocked_writer(queue_of_one, stop_event=stop_event).close(timeout_ms=1000)

  assert queue_of_one.table_info()['queue'].current_size == 1


def test_writer_wait_ends_at_flush_timeout(queue_of_one):
  writer = blocked_writer(queue_of_one, flush_timeout_ms=500)
  start = time.monotonic()

  with pytest.raises(reverb.errors.DeadlineExceededError, match='not accepted'):
    writer.write(*mid_step_write(1))

  assert time.monotonic() - start < 8  # Not a whole 10 s wait slice.
  writer.abandon()


# is_server_lost.


@pytest.mark.parametrize('error, lost', [
    (replay.ReplayServerUnreachableError('no server at localhost:1'), True),
    (reverb.errors.DeadlineExceededError('Flush call did not complete'), True),
    (tf.errors.UnavailableError(None, None, 'Socket closed'), True),
    (tf.errors.DeadlineExceededError(None, None, 'Deadline Exceeded'), True),
    (tf.errors.CancelledError(None, None, 'cancelled'), True),
    (ConnectionResetError('reset by peer'), True),
    (ConnectionError('gone'), True),
    (RuntimeError('UNAVAILABLE: failed to connect to all addresses'), True),
    (RuntimeError('DEADLINE_EXCEEDED: Deadline Exceeded'), True),
    (RuntimeError('Socket closed'), True),
    (RuntimeError('Deadline Exceeded'), True),  # Reverb's raw ServerInfo timeout.
    (RuntimeError('Timeout exceeded'), True),  # Reverb's raw Flush timeout.
    (RuntimeError('connections to all backends failing'), True),  # Client.checkpoint.
    (ValueError('Sample failed: UNAVAILABLE: Connection reset by peer'), True),
    (tf.errors.UnknownError(None, None, 'Stream removed: Socket closed'), True),
    (RuntimeError('boom'), False),
    (RuntimeError('the resource is unavailable'), False),  # Not a gRPC status.
    (NotImplementedError('UNAVAILABLE'), False),
    (ValueError('bad shape'), False),
    (ValueError("Unable to create item in table 'nope' since the table could not be "
                'found.'), False),
    (tf.errors.InvalidArgumentError(None, None, 'bad shape'), False),
    (gymnasium.error.Error('env broke'), False),
    (gymnasium.error.ResetNeeded('reset first'), False),
    (replay.VariablesNotPushedError('no push'), False),
    (replay.WriterStoppedError('stopped'), False),
    (KeyError('x'), False),
])
def test_is_server_lost(error, lost):
  assert replay.is_server_lost(error) is lost


def test_errors_of_a_stopped_server_count_as_lost(reverb_server_factory):
  signature = tf.TensorSpec((), tf.int64)
  server = reverb_server_factory([replay.queue_table('queue', 5, signature)])
  client = server.client
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  writer.append(np.int64(1))
  server.stop()
  writer.create_item('queue', 1.0, writer.history[-1])  # Buffered: does not raise.

  raised = []
  for call in (lambda: writer.flush(timeout_ms=300),
               lambda: client.server_info(timeout=1),
               client.checkpoint):
    with pytest.raises(Exception) as error:  # pylint: disable=broad-except
      call()
    raised.append(error.value)
  writer.close()

  assert [replay.is_server_lost(e) for e in raised] == [True] * 3, raised


def test_pushes_counts_the_tables_inserts_with_one_client(reverb_server_factory,
                                                          monkeypatch):
  variables = {'w': tf.Variable([1.0])}
  server = reverb_server_factory([
      replay.variables_table(replay.VariableContainer.signature(variables))])
  container = replay.VariableContainer(server.address, variables)
  assert container.pushes() == 0
  container.push()
  container.push()
  address = unused_address()
  error = raised_within(5, lambda: replay.VariableContainer(address, variables).pushes(
      timeout_s=1))
  assert isinstance(error, replay.ReplayServerUnreachableError) and address in str(error)
  # A collector polls this every few ms while it waits: no new client (channel) each time.
  made = []
  monkeypatch.setattr(reverb, 'Client', lambda *args: made.append(args))
  assert container.pushes() == 2
  assert not made

"""Writer tests driven by one table of cases: a hand-made trajectory -> expected items.

Every case feeds the same kind of batched stream to a writer against a real Reverb
server, reads every item back from a queue table (FIFO, so in creation order) and
compares it with items written out by hand below.

The streams follow what `tfrl.envs.batched_env.BatchedEnv` produces: after a LAST step comes the
boundary step (LAST -> FIRST, reward 0, discount 1). Observations encode where a step
comes from, `obs = 100 * env + t`, actions equal observations, and write `t` is tagged
with policy version `t`, so a wrong step, env or version shows in the numbers.
"""
import collections
import dataclasses
from typing import Any, Callable, Sequence, Tuple

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import policy_step as policy_step_lib
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory as trajectory_lib

from tfrl import replay

F, M, L = (int(ts.StepType.FIRST), int(ts.StepType.MID), int(ts.StepType.LAST))

# Per env: step types of time steps t = 0..6 ('L' terminated: discount 0; 'T' truncated:
# LAST with discount 1) and the rewards they carry (0 on FIRST steps, as BatchedEnv does).
# Env 0 terminates at t=3, env 1 is truncated at t=4, env 2 never ends, env 3 terminates
# after one step and is truncated at t=4.
STREAMS = {
    0: ('FMMLFMM', (0, 1, 2, 3, 0, 5, 6)),
    1: ('FMMMTFM', (0, 2, 4, 6, 8, 0, 12)),
    2: ('FMMMMMM', (0, 1, 1, 1, 1, 1, 1)),
    3: ('FLFMTFM', (0, 10, 0, 1, 10, 0, 1)),
}
NUM_WRITES = 6  # Write t takes (time step t, time step t + 1).
GAMMA = 0.5

# One-step rows, as `Trajectory.from_transition(time_step[t], ..., time_step[t + 1])`:
# (observation, step_type, next_step_type, reward, discount, policy_version).
Step = collections.namedtuple('Step', 'obs type next_type reward discount version')
STEPS = {
    0: [Step(0, F, M, 1, 1, 0), Step(1, M, M, 2, 1, 1), Step(2, M, L, 3, 0, 2),
        Step(3, L, F, 0, 1, 3), Step(4, F, M, 5, 1, 4), Step(5, M, M, 6, 1, 5)],
    1: [Step(100, F, M, 2, 1, 0), Step(101, M, M, 4, 1, 1), Step(102, M, M, 6, 1, 2),
        Step(103, M, L, 8, 1, 3), Step(104, L, F, 0, 1, 4), Step(105, F, M, 12, 1, 5)],
    2: [Step(200, F, M, 1, 1, 0), Step(201, M, M, 1, 1, 1), Step(202, M, M, 1, 1, 2),
        Step(203, M, M, 1, 1, 3), Step(204, M, M, 1, 1, 4), Step(205, M, M, 1, 1, 5)],
    3: [Step(300, F, L, 10, 0, 0), Step(301, L, F, 0, 1, 1), Step(302, F, M, 1, 1, 2),
        Step(303, M, L, 10, 1, 3), Step(304, L, F, 0, 1, 4), Step(305, F, M, 1, 1, 5)],
}

# Transition rows: start/end observations, n-step reward and discount (gamma^(k-1) times
# the env discount at the end), step types at start and end, policy version. Rows that
# start on a boundary step only need their start, version and a zero mask.
Row = collections.namedtuple('Row', 'obs end_obs reward discount types version')


def boundary(obs, version):
  return Row(obs, None, None, None, (L, None), version)


# n = 1: the transition is the one step; boundary steps are masked.
ROWS_N1 = {
    (0, 0): Row(0, 1, 1, 1, (F, M), 0),
    (0, 1): Row(1, 2, 2, 1, (M, M), 1),
    (0, 2): Row(2, 3, 3, 0, (M, L), 2),
    (0, 3): boundary(3, 3),
    (0, 4): Row(4, 5, 5, 1, (F, M), 4),
    (0, 5): Row(5, 6, 6, 1, (M, M), 5),
    (1, 0): Row(100, 101, 2, 1, (F, M), 0),
    (1, 1): Row(101, 102, 4, 1, (M, M), 1),
    (1, 2): Row(102, 103, 6, 1, (M, M), 2),
    (1, 3): Row(103, 104, 8, 1, (M, L), 3),
    (1, 4): boundary(104, 4),
    (1, 5): Row(105, 106, 12, 1, (F, M), 5),
    (2, 0): Row(200, 201, 1, 1, (F, M), 0),
    (2, 1): Row(201, 202, 1, 1, (M, M), 1),
    (2, 2): Row(202, 203, 1, 1, (M, M), 2),
    (2, 3): Row(203, 204, 1, 1, (M, M), 3),
    (2, 4): Row(204, 205, 1, 1, (M, M), 4),
    (2, 5): Row(205, 206, 1, 1, (M, M), 5),
    (3, 0): Row(300, 301, 10, 0, (F, L), 0),
    (3, 1): boundary(301, 1),
    (3, 2): Row(302, 303, 1, 1, (F, M), 2),
    (3, 3): Row(303, 304, 10, 1, (M, L), 3),
    (3, 4): boundary(304, 4),
    (3, 5): Row(305, 306, 1, 1, (F, M), 5),
}

# n = 3, gamma = 0.5: sums stop at the first LAST; terminated ends get discount 0,
# truncated ones gamma^(k-1); rows start at t = 0..3 (later ones never complete).
ROWS_N3 = {
    (0, 0): Row(0, 3, 1 + .5 * 2 + .25 * 3, 0, (F, L), 0),  # 2.75
    (0, 1): Row(1, 3, 2 + .5 * 3, 0, (M, L), 1),  # 3.5
    (0, 2): Row(2, 3, 3, 0, (M, L), 2),
    (0, 3): boundary(3, 3),
    (1, 0): Row(100, 103, 2 + .5 * 4 + .25 * 6, .25, (F, M), 0),  # 5.5
    (1, 1): Row(101, 104, 4 + .5 * 6 + .25 * 8, .25, (M, L), 1),  # 9.0
    (1, 2): Row(102, 104, 6 + .5 * 8, .5, (M, L), 2),  # 10.0
    (1, 3): Row(103, 104, 8, 1, (M, L), 3),
    (2, 0): Row(200, 203, 1.75, .25, (F, M), 0),
    (2, 1): Row(201, 204, 1.75, .25, (M, M), 1),
    (2, 2): Row(202, 205, 1.75, .25, (M, M), 2),
    (2, 3): Row(203, 206, 1.75, .25, (M, M), 3),
    (3, 0): Row(300, 301, 10, 0, (F, L), 0),
    (3, 1): boundary(301, 1),
    (3, 2): Row(302, 304, 1 + .5 * 10, .5, (F, L), 2),  # 6.0
    (3, 3): Row(303, 304, 10, 1, (M, L), 3),
}


def transition_items(rows, starts, groups):
  """Items in creation order: for each start step, one item per env group."""
  return [[rows[(env, t)] for env in group] for t in starts for group in groups]


def sequence_items(times_per_item, groups):
  """[T][G] items of one-step rows, for each item's time steps and each env group."""
  return [[[STEPS[env][t] for env in group] for t in times]
          for times in times_per_item for group in groups]


COLLECT_DATA_SPEC = trajectory_lib.Trajectory(
    step_type=tf.TensorSpec((), tf.int32),
    observation=tf.TensorSpec((), tf.float32),
    action=tf.TensorSpec((), tf.int64),
    policy_info=(),
    next_step_type=tf.TensorSpec((), tf.int32),
    reward=tf.TensorSpec((), tf.float32),
    discount=tf.TensorSpec((), tf.float32))


@dataclasses.dataclass(frozen=True)
class Case:
  """A stream of `envs` fed to `make_writer(client, table)`, and the items it must make.

  `expected` holds transition items (lists of `Row`s) when `layout` is 'transition', and
  nested lists of `Step`s ([T][G], 'sequence') otherwise.
  """
  id: str
  envs: Tuple[int, ...]
  make_writer: Callable[[Any, str], Any]
  signature: Any
  layout: str
  expected: Sequence[Any]


ALL4 = (0, 1, 2, 3)
CASES = [
    Case('nstep1_one_item_per_step', ALL4,
         lambda c, t: replay.NStepTransitionWriter(c, t, n=1, discount=GAMMA),
         replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 4), 'transition',
         transition_items(ROWS_N1, range(6), [ALL4])),
    Case('nstep1_one_item_per_env', ALL4,
         lambda c, t: replay.NStepTransitionWriter(c, t, n=1, envs_per_item=1),
         replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 1), 'transition',
         transition_items(ROWS_N1, range(6), [(0,), (1,), (2,), (3,)])),
    Case('nstep3_one_item_per_step', ALL4,
         lambda c, t: replay.NStepTransitionWriter(c, t, n=3, discount=GAMMA),
         replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 4), 'transition',
         transition_items(ROWS_N3, range(4), [ALL4])),
    Case('nstep3_one_item_per_env', ALL4,
         lambda c, t: replay.NStepTransitionWriter(c, t, n=3, discount=GAMMA,
                                                   envs_per_item=1),
         replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 1), 'transition',
         transition_items(ROWS_N3, range(4), [(0,), (1,), (2,), (3,)])),
    Case('nstep3_two_envs_per_item', ALL4,
         lambda c, t: replay.NStepTransitionWriter(c, t, n=3, discount=GAMMA,
                                                   envs_per_item=2),
         replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 2), 'transition',
         transition_items(ROWS_N3, range(4), [(0, 1), (2, 3)])),
    # Overlapping unrolls: items end at writes 3 and 5.
    Case('sequence_length3_stride2', (0, 1),
         lambda c, t: replay.SequenceWriter(c, t, length=3, stride=2),
         replay.SequenceWriter.item_signature(COLLECT_DATA_SPEC, 3, 2), 'sequence',
         sequence_items([(0, 1, 2), (2, 3, 4)], [(0, 1)])),
    # Gaps between unrolls: items end at writes 2 and 5.
    Case('sequence_length2_stride3_one_env_per_item', (0, 1),
         lambda c, t: replay.SequenceWriter(c, t, length=2, stride=3, envs_per_item=1),
         replay.SequenceWriter.item_signature(COLLECT_DATA_SPEC, 2, 1), 'sequence',
         sequence_items([(0, 1), (3, 4)], [(0,), (1,)])),
]


def make_stream(envs):
  """The batched writes (time_step, policy_step, next_time_step, version) of `envs`."""
  types = np.array([[{'F': F, 'M': M, 'L': L, 'T': L}[c] for c in STREAMS[e][0]]
                    for e in envs], dtype=np.int32).T  # [7, N]
  terminated = np.array([[c == 'L' for c in STREAMS[e][0]] for e in envs]).T
  rewards = np.array([STREAMS[e][1] for e in envs], dtype=np.float32).T
  observations = np.array([[100 * e + t for t in range(7)] for e in envs],
                          dtype=np.float32).T
  time_steps = [
      ts.TimeStep(step_type=types[t], reward=rewards[t],
                  discount=np.where(terminated[t], 0.0, 1.0).astype(np.float32),
                  observation=observations[t])
      for t in range(NUM_WRITES + 1)]
  return [(time_steps[t],
           policy_step_lib.PolicyStep(action=observations[t].astype(np.int64), state=(),
                                      info=()),
           time_steps[t + 1], t)
          for t in range(NUM_WRITES)]


def read_all(server, table, expected_count):
  """Every item of queue `table`, in insertion order, as numpy nests."""
  assert server.client.server_info()[table].current_size == expected_count
  samples = server.client.sample(table, num_samples=expected_count, emit_timesteps=False,
                                 unpack_as_table_signature=True)
  items = [sample.data for sample in samples]
  assert server.client.server_info()[table].current_size == 0
  return items


def check_transition_item(item, rows):
  experience, versions = item['experience'], item['policy_version']
  assert experience.step_type.shape == (len(rows), 2)
  mask = replay.valid_mask(experience).numpy()
  for g, row in enumerate(rows):
    where = f'row {g} ({row})'
    assert experience.observation[g, 0] == row.obs, where
    np.testing.assert_array_equal(experience.action[g], [row.obs, row.obs], err_msg=where)
    assert versions[g] == row.version, where
    assert experience.step_type[g, 0] == row.types[0], where
    if row.end_obs is None:  # Starts on a boundary: no experience.
      assert mask[g] == 0.0, where
      continue
    assert mask[g] == 1.0, where
    assert experience.observation[g, 1] == row.end_obs, where
    assert experience.step_type[g, 1] == row.types[1], where
    # tf-agents' to_transition reads the end step type from next_step_type[0].
    assert experience.next_step_type[g, 0] == row.types[1], where
    np.testing.assert_allclose(experience.reward[g, 0], row.reward, rtol=1e-6,
                               err_msg=where)
    np.testing.assert_allclose(experience.discount[g, 0], row.discount, rtol=1e-6,
                               err_msg=where)


def check_step_item(item, steps):
  """Compares a [T, G] (sequence) item with one-step rows."""
  steps = np.array(steps, dtype=np.float64)  # [..., 6] with Step's fields last.
  experience = item['experience']
  fields = {'observation': 0, 'action': 0, 'step_type': 1, 'next_step_type': 2,
            'reward': 3, 'discount': 4}
  for name, index in fields.items():
    np.testing.assert_array_equal(getattr(experience, name), steps[..., index],
                                  err_msg=name)
  np.testing.assert_array_equal(item['policy_version'], steps[..., 5],
                                err_msg='policy_version')


@pytest.fixture(scope='module')
def server(module_reverb_server_factory):
  return module_reverb_server_factory(
      [replay.queue_table(case.id, 100, case.signature) for case in CASES])


@pytest.mark.parametrize('case', CASES, ids=[case.id for case in CASES])
def test_writer_items(server, case):
  writer = case.make_writer(server.client, case.id)
  for time_step, policy_step, next_time_step, version in make_stream(case.envs):
    writer.write(time_step, policy_step, next_time_step, version)
  writer.close()

  items = read_all(server, case.id, len(case.expected))

  for i, (item, expected) in enumerate(zip(items, case.expected)):
    try:
      if case.layout == 'transition':
        check_transition_item(item, expected)
      else:
        check_step_item(item, expected)
    except AssertionError as e:
      raise AssertionError(f'item {i}: {e}') from e


def test_every_table_gets_every_item(reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 2)
  server = reverb_server_factory([replay.queue_table('queue', 10, signature),
                                  replay.uniform_table('replay', 10, signature)])
  writer = replay.NStepTransitionWriter(server.client, ['queue', 'replay'], n=2)
  for write in make_stream((0, 1)):
    writer.write(*write)
  writer.close()

  info = server.client.server_info()
  assert info['queue'].current_size == NUM_WRITES - 1
  assert info['replay'].current_size == NUM_WRITES - 1
  assert writer.table_names == ('queue', 'replay')


def test_reset_drops_the_partial_window(reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 4)
  server = reverb_server_factory([replay.queue_table('queue', 10, signature)])
  writer = replay.NStepTransitionWriter(server.client, 'queue', n=3, discount=GAMMA)
  stream = make_stream(ALL4)
  for write in stream[:2]:
    writer.write(*write)
  writer.reset()
  for write in stream[2:]:
    writer.write(*write)
  writer.close()

  # 4 writes after the reset complete 2 transitions, which start at t = 2 and 3.
  items = read_all(server, 'queue', 2)
  check_transition_item(items[0], [ROWS_N3[(env, 2)] for env in ALL4])
  check_transition_item(items[1], [ROWS_N3[(env, 3)] for env in ALL4])


@pytest.mark.parametrize('make_writer', [
    lambda: replay.NStepTransitionWriter(None, 'table', n=0),
    lambda: replay.SequenceWriter(None, 'table', length=0),
    lambda: replay.SequenceWriter(None, 'table', length=2, stride=-1),
    lambda: replay.NStepTransitionWriter(None, [], n=1),
], ids=['n0', 'length0', 'negative_stride', 'no_tables'])
def test_invalid_writer_arguments_raise(make_writer):
  with pytest.raises(ValueError):
    make_writer()


def test_envs_per_item_must_divide_num_envs():
  writer = replay.NStepTransitionWriter(None, 'table', n=1, envs_per_item=3)
  with pytest.raises(ValueError, match='envs_per_item=3'):
    writer.write(*make_stream(ALL4)[0])


def test_number_of_envs_cannot_change(reverb_server_factory):
  signature = replay.NStepTransitionWriter.item_signature(COLLECT_DATA_SPEC, 1)
  server = reverb_server_factory([replay.queue_table('queue', 20, signature)])
  writer = replay.NStepTransitionWriter(server.client, 'queue', n=1, envs_per_item=1)
  writer.write(*make_stream(ALL4)[0])
  with pytest.raises(ValueError, match='4 envs'):
    writer.write(*make_stream((0, 1))[1])
  writer.close()

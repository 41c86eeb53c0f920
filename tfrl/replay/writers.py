"""Batched Reverb writers (Acme calls them adders).

Every writer takes one batched environment step at a time from N parallel envs:

    writer.write(time_step, policy_step, next_time_step, policy_version)

and turns the stream into Reverb items. Both share one item structure:

    {'experience': tf-agents Trajectory nest, 'policy_version': int64}

with leading "row" dimensions that depend on the writer:

| writer                    | item leading dims | a row is                           |
| ------------------------- | ----------------- | ---------------------------------- |
| NStepTransitionWriter     | [G, 2]            | an n-step transition as a 2-step Trajectory |
| SequenceWriter            | [T, G]            | a fixed-length unroll (time-major)  |

G (`envs_per_item`) groups envs into one item: G = N (the default) writes one item per
vector step, the fastest layout; G = 1 gives one item per env (exact per-row priorities
at a throughput cost). Per-item overhead, not bytes, bounds Reverb, so choose G by
measurement (benchmarks/collect_throughput.py).

Episode boundaries: a step whose `time_step` is LAST and `next_time_step` is FIRST (the
gymnasium autoreset step, `Trajectory.is_boundary()`) is no experience. Transition rows
that start there keep step_type LAST at index 0, so learners mask them
(`tfrl.replay.dataset.valid_mask`; tf-agents' DqnAgent already does); sequences keep them
so a learner can mask across an unroll.
"""
from typing import Any, List, Optional, Sequence, Union

import numpy as np
import reverb
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory as trajectory_lib

from tfrl.replay.batched_writer import BatchedWriter

_LAST = ts.StepType.LAST
EXPERIENCE = 'experience'
POLICY_VERSION = 'policy_version'
POLICY_STATE = 'policy_state'


def _plain_spec(spec: Any) -> Any:
  """Drops bounds and names: Reverb signatures only need shape and dtype."""
  return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape, s.dtype), spec)


# Rows are flat lists in the order tf.nest.flattens an item (see batched_writer): the
# dict's keys sorted, a Trajectory's fields in declaration order. Checked once here, so
# a change in either order fails at import rather than writing misordered columns.
_TRAJECTORY_FIELDS = ('step_type', 'observation', 'action', 'policy_info',
                      'next_step_type', 'reward', 'discount')
assert tf.nest.flatten(trajectory_lib.Trajectory(*_TRAJECTORY_FIELDS)) == list(
    _TRAJECTORY_FIELDS)
assert tf.nest.flatten({EXPERIENCE: 0, POLICY_STATE: 1, POLICY_VERSION: 2}) == [0, 1, 2]


def _flat_row(time_step, policy_step, next_time_step, policy_version: int,
              policy_state: Any = ()) -> List[np.ndarray]:
  """The flat item row of one batched step: the Trajectory (time_step -> next), the
  policy state it acted from (if any), and the policy version, [N, ...] each."""
  n = np.shape(time_step.step_type)[0]
  return ([time_step.step_type] + tf.nest.flatten(time_step.observation) +
          tf.nest.flatten(policy_step.action) + tf.nest.flatten(policy_step.info) +
          [next_time_step.step_type, next_time_step.reward, next_time_step.discount] +
          [np.asarray(x) for x in tf.nest.flatten(policy_state)] +
          [np.full(n, policy_version, dtype=np.int64)])


class NStepTransitionWriter(BatchedWriter):
  """Writes n-step transitions, as 2-step Trajectories tf-agents' agents train on.

  The row starting at step t holds, per env, with k = min(n, steps until the episode
  ends):
    observation = [o_t, o_{t+k}], step_type = [s_t, s_{t+k}], action = [a_t, a_t],
    reward[0] = sum_{i<k} discount^i r_{t+i+1},
    discount[0] = discount^(k-1) * d_{t+k}   (d: the environment's discount),
  so an agent that computes `reward + gamma * discount * V(o_{t+k})` with
  gamma = `discount` gets the exact n-step target: the sum stops at LAST, a terminated
  episode (d = 0) does not bootstrap, a truncated one (d = 1) does. Rows are written
  n - 1 steps after they start; rows that start on a boundary step keep step_type LAST
  at index 0 and must be masked.

  An item holds the rows of G envs (`envs_per_item`) from K consecutive steps
  (`steps_per_item`), G * K rows in all: with few envs, K > 1 keeps items large enough
  for Reverb's per-item costs, at K - 1 steps of extra delay.
  """

  def __init__(self, client: reverb.Client, table_names: Union[str, Sequence[str]],
               n: int = 1, discount: float = 1.0, steps_per_item: int = 1, **kwargs):
    """Args:
      client, table_names: see `BatchedWriter`.
      n: the number of steps of a transition.
      discount: gamma, used to sum rewards over the n steps.
      steps_per_item: K, consecutive steps whose rows share an item.
      **kwargs: `envs_per_item`, `priority`, `flush_timeout_ms`, `max_in_flight_items`,
        `connect_timeout_s`, `stop_event` (see BatchedWriter).
    """
    if n < 1 or steps_per_item < 1:
      raise ValueError(f'n and steps_per_item must be >= 1, got {n} and {steps_per_item}.')
    super().__init__(client, table_names, num_keep_alive_refs=1, **kwargs)
    self._n = n
    self._gamma = float(discount)
    self._powers = (self._gamma ** np.arange(n, dtype=np.float64))[:, None]
    self._steps_per_item = steps_per_item
    self._window = []
    self._pending = []

  @staticmethod
  def item_signature(collect_data_spec: Any, rows_per_item: int) -> dict:
    """The table signature for items of `rows_per_item` (= G * K) transitions."""
    return {
        EXPERIENCE: tensor_spec.add_outer_dims_nest(
            _plain_spec(collect_data_spec), (rows_per_item, 2)),
        POLICY_VERSION: tf.TensorSpec((rows_per_item,), tf.int64),
    }

  def reset(self) -> None:
    self._window = []
    self._pending = []

  def write(self, time_step, policy_step, next_time_step, policy_version: int = 0,
            policy_state: Any = ()) -> None:
    num_groups = self._groups(np.shape(time_step.step_type)[0])
    self._window.append((time_step, policy_step, next_time_step, policy_version))
    if len(self._window) < self._n:
      return
    self._pending.append(self._split(self._oldest_transition(), num_groups))
    self._window.pop(0)
    if len(self._pending) < self._steps_per_item:
      return
    if self._steps_per_item == 1:
      groups = self._pending[0]
    else:  # each group's rows of the K steps, step-major
      groups = [[np.concatenate(leaves, axis=0) for leaves in zip(
          *[step[g] for step in self._pending])] for g in range(num_groups)]
    self._pending = []
    self._append(groups)
    for g in range(num_groups):
      self._create_items(g, lambda column: column[-1])
    self._throttle()

  def _oldest_transition(self) -> List[np.ndarray]:
    """The flat row of the n-step transition that starts at the oldest step."""
    first_step, first_policy_step, _, version = self._window[0]
    window_next = [w[2] for w in self._window]
    if self._n == 1:
      end, reward, discount = window_next[0], window_next[0].reward, window_next[0].discount
      end_observation = tf.nest.flatten(end.observation)
      end_step_type = end.step_type
    else:
      is_last = np.stack([w.step_type == _LAST for w in window_next])
      is_last[-1] = True  # no end within n steps: stop at n
      k_minus_1 = np.argmax(is_last, axis=0)  # [N], first end in the window
      in_sum = np.arange(self._n)[:, None] <= k_minus_1[None, :]
      rewards = np.stack([w.reward for w in window_next])
      reward = np.sum(self._powers * rewards * in_sum, axis=0).astype(np.float32)
      # Each env's end step: the k-th next step, leaf by leaf.
      pick = lambda leaves: np.take_along_axis(
          np.stack(leaves),
          np.reshape(k_minus_1, (1,) + k_minus_1.shape + (1,) * (np.ndim(leaves[0]) - 1)),
          axis=0)[0]
      end_step_type = pick([w.step_type for w in window_next])
      end_discount = pick([w.discount for w in window_next])
      end_observation = [pick(leaves) for leaves in zip(
          *[tf.nest.flatten(w.observation) for w in window_next])]
      discount = (self._gamma ** k_minus_1 * end_discount).astype(np.float32)
    pair = lambda a, b: np.stack([a, b], axis=1)
    twice = lambda a: np.stack([a, a], axis=1)
    n = np.shape(first_step.step_type)[0]
    # A 2-step Trajectory: the start (with the folded reward and discount) -> the end
    # (reward 0, discount 1: what a FIRST-like next step carries; unused by learners).
    return ([pair(first_step.step_type, end_step_type)] +
            [pair(a, b) for a, b in zip(tf.nest.flatten(first_step.observation),
                                        end_observation)] +
            [twice(a) for a in tf.nest.flatten(first_policy_step.action)] +
            [twice(a) for a in tf.nest.flatten(first_policy_step.info)] +
            [twice(end_step_type), pair(reward, np.zeros_like(reward)),
             pair(discount, np.ones_like(discount)),
             np.full(n, version, dtype=np.int64)])


class SequenceWriter(BatchedWriter):
  """Writes fixed-length unrolls of `length` steps every `stride` steps, per env group.

  Items are time-major `[length, G]` Trajectories (the dataset turns them batch-major),
  and, for a recurrent policy, the `[G, ...]` state it acted from at the first step.
  Unrolls run across episode boundaries, as IMPALA and PPO learners expect: the boundary
  step is kept so learners can mask it. For bootstrapping from the step after an unroll,
  use length = T + 1 and stride = T (consecutive unrolls share one step).
  """

  def __init__(self, client: reverb.Client, table_names: Union[str, Sequence[str]],
               length: int, stride: Optional[int] = None, **kwargs):
    """Args:
      client, table_names: see `BatchedWriter`.
      length: steps per item.
      stride: steps between the starts of consecutive items (default: `length`).
      **kwargs: `envs_per_item`, `priority`, `flush_timeout_ms`, `max_in_flight_items`,
        `connect_timeout_s`, `stop_event` (see BatchedWriter).
    """
    stride = stride or length
    if length < 1 or stride < 1:
      raise ValueError(f'length and stride must be >= 1, got {length} and {stride}.')
    super().__init__(client, table_names, num_keep_alive_refs=length, **kwargs)
    self._length = length
    self._stride = stride
    self._steps = 0
    self._slicers = None  # per flat leaf, set at the first item

  @staticmethod
  def item_signature(collect_data_spec: Any, length: int, envs_per_item: int,
                     policy_state_spec: Any = ()) -> dict:
    """The table signature for `[length, envs_per_item]` unrolls.

    With a `policy_state_spec` (a recurrent policy's), items also hold the state the
    policy acted from at each unroll's first step, `[envs_per_item, ...]`: what a
    learner unrolls the network from.
    """
    signature = {
        EXPERIENCE: tensor_spec.add_outer_dims_nest(
            _plain_spec(collect_data_spec), (length, envs_per_item)),
        POLICY_VERSION: tf.TensorSpec((length, envs_per_item), tf.int64),
    }
    if tf.nest.flatten(policy_state_spec):
      signature[POLICY_STATE] = tensor_spec.add_outer_dims_nest(
          _plain_spec(policy_state_spec), (envs_per_item,))
    return signature

  def reset(self) -> None:
    self._steps = 0

  def write(self, time_step, policy_step, next_time_step, policy_version: int = 0,
            policy_state: Any = ()) -> None:
    num_groups = self._groups(np.shape(time_step.step_type)[0])
    row = _flat_row(time_step, policy_step, next_time_step, policy_version, policy_state)
    self._append(self._split(row, num_groups))
    self._steps += 1
    if self._steps >= self._length and (self._steps - self._length) % self._stride == 0:
      if self._slicers is None:
        # The unroll's last `length` steps of every column; of the policy state's
        # columns (between the Trajectory's and the version's), its first step only.
        unroll = lambda column: column[-self._length:]
        first = lambda column: column[-self._length]
        num_state = len(tf.nest.flatten(policy_state))
        num_trajectory = len(row) - num_state - 1
        self._slicers = [unroll] * num_trajectory + [first] * num_state + [unroll]
      for g in range(num_groups):
        self._create_items(g, self._slicers)
      self._throttle()

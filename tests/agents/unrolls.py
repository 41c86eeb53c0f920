"""Hand-built batch-major [B, T+1] unrolls for the actor-critic agent tests."""
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

MID = int(ts.StepType.MID)


def make(step_type, discount, seed=0) -> trajectory.Trajectory:
  """A numpy Trajectory with the given step types and discounts, random observations
  (CartPole's 4 floats), actions, rewards and behaviour policy info (2 actions)."""
  step_type = np.asarray(step_type, np.int32)
  rows, length = step_type.shape
  rng = np.random.RandomState(seed)
  next_step_type = np.concatenate([step_type[:, 1:], np.full((rows, 1), MID)], 1)
  return trajectory.Trajectory(
      step_type=step_type,
      observation=rng.randn(rows, length, 4).astype(np.float32),
      action=rng.randint(0, 2, (rows, length)).astype(np.int64),
      policy_info={'logits': rng.randn(rows, length, 2).astype(np.float32),
                   'value': rng.randn(rows, length).astype(np.float32)},
      next_step_type=next_step_type.astype(np.int32),
      reward=rng.randn(rows, length).astype(np.float32),
      discount=np.asarray(discount, np.float32))


def tensors(traj):
  """The same Trajectory as tensors."""
  return tf.nest.map_structure(tf.constant, traj)


def log_softmax(logits):
  """Numpy reference, in float64."""
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def action_log_prob(logits, actions):
  """Numpy reference: log softmax(logits)[action]."""
  return np.take_along_axis(log_softmax(logits), actions[..., None], -1)[..., 0]


def with_gaussian_actions(traj: trajectory.Trajectory, seed=0) -> trajectory.Trajectory:
  """`traj` as Pendulum data: observations [3], actions 2 tanh(u) in [-2, 2] from a
  behaviour Gaussian whose loc, log_scale and sample u are in the policy info."""
  rows, length = traj.step_type.shape
  rng = np.random.RandomState(seed + 7)
  loc = (0.5 * rng.randn(rows, length, 1)).astype(np.float32)
  log_scale = rng.uniform(-0.7, 0.5, (rows, length, 1)).astype(np.float32)
  u = (loc + np.exp(log_scale) * rng.randn(rows, length, 1)).astype(np.float32)
  return traj._replace(
      observation=rng.randn(rows, length, 3).astype(np.float32),
      action=(2.0 * np.tanh(u)).astype(np.float32),
      policy_info={'loc': loc, 'log_scale': log_scale, 'raw_action': u,
                   'value': traj.policy_info['value']})

"""Observation normalization through an agent: training updates the statistics from
the batch (bootstrap steps left out), they are policy variables (so they are pushed to
collectors, checkpointed and exported), and the exported policy takes raw observations.
"""
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from tfrl import export
from tfrl import learner as learner_lib
from tfrl.agents import ppo
import unrolls  # tests/agents/unrolls.py


def test_training_updates_the_statistics_the_exported_policy_uses(pendulum_specs, tmp_path):
  time_step_spec, action_spec = pendulum_specs
  agent = ppo.create_ppo_agent(time_step_spec, action_spec, learner_lib.new_train_step(),
                               fc_layer_params=(8,), normalize_observations=True,
                               num_epochs=1)
  normalizer = agent._network._normalizer  # pylint: disable=protected-access
  policy_variables = {id(v) for v in agent.collect_policy.variables()}
  assert {id(v) for v in normalizer.weights} <= policy_variables
  step_type = np.ones((4, 6), np.int32)
  step_type[:, 0] = 0
  experience = unrolls.with_gaussian_actions(
      unrolls.make(step_type, np.ones_like(step_type), seed=0))
  # Far from the initial statistics (mean 0, variance 1).
  experience = experience._replace(
      observation=(50.0 + 5.0 * experience.observation).astype(np.float32))
  agent.train(tf.nest.map_structure(tf.convert_to_tensor, experience))
  seen = experience.observation[:, :-1].reshape(-1, 3)  # the bootstrap steps are not
  assert normalizer.count.numpy() == len(seen)
  np.testing.assert_allclose(normalizer.weights[1].numpy(), seen.mean(0), rtol=1e-5)
  # Exported, the policy normalizes raw observations itself.
  path = str(tmp_path / 'policy')
  export.export_policy(agent.policy, path)
  loaded = tf.saved_model.load(path)
  time_step = ts.TimeStep(*[tf.convert_to_tensor(x[:, 2]) for x in (
      experience.step_type, experience.reward, experience.discount,
      experience.observation)])
  want = agent.policy.action(time_step).action.numpy()
  np.testing.assert_allclose(loaded.action(time_step, ()).action, want, rtol=1e-5)
  # And the statistics matter: without them the same network acts otherwise.
  normalizer.weights[1].assign(tf.zeros([3]))
  assert not np.allclose(agent.policy.action(time_step).action, want, rtol=1e-3)

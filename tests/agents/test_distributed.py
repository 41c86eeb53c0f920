"""IMPALA, CLEAR, APPO and PPO under MirroredStrategy train exactly as on one device,
with categorical and Gaussian action heads, with LSTM cores and with observation
normalization (one agent each: the heads, the core and the normalizer are shared code).

tfrl's own agents must mean the same under every strategy (see
`tfrl/agents/actor_critic_agent.py`): global normalizers, gradients summed before
clipping, global advantage moments. A fresh interpreter splits the CPU into 2 logical
devices and trains each agent from the same weights on the same unrolls, once under the
default strategy (batches of B rows) and once under MirroredStrategy (B / 2 rows per
replica: the two replicas of a step together hold the default run's batch). Plain SGD
keeps every difference in gradient scale visible (Adam would normalize it away), and the
gradient clip is set low enough to act.
"""
import json
import os
import textwrap

import numpy as np
import pytest

import strategy_runs  # tests/agents/strategy_runs.py

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each config is one trace under each strategy (about 3 s alone, 5-8 s in the suite), so
# features that meet in one agent share a config: Gaussian heads with advantage
# normalization, positive-only advantages and the observation normalizer; CLEAR's
# cloning with an LSTM core, burn-in and the lag; PPO's LSTM with the normalizer.
CONFIGS = {
    'impala': dict(kwargs=dict(gradient_clipping=0.5, entropy_cost=0.05), data=[]),
    # The normalizer's statistics are compared with the weights: each replica folds in
    # the whole batch's moments.
    'impala_gaussian_normalized': dict(
        kwargs=dict(gradient_clipping=0.5, normalize_advantages=True,
                    positive_advantages_only=True, normalize_observations=True),
        data=[], env='Pendulum-v1'),
    'appo': dict(kwargs=dict(policy_loss='ppo', max_policy_lag=3), data=['policy_version']),
    # Epochs over each batch (unrolled in the graph under the strategy, as PPO's); two,
    # since the mirrored trace of three took 26 s against 7 s for two.
    'appo_epochs': dict(kwargs=dict(policy_loss='ppo', max_policy_lag=3, num_epochs=2,
                                    num_minibatches=1), data=['policy_version']),
    # Replayed rows' burn-in, and a lag that drops stale fresh rows only.
    'clear_lstm_burn_in_lag': dict(
        kwargs=dict(policy_cloning_cost=0.5, value_cloning_cost=0.5, lstm_size=8,
                    replay_burn_in_steps=2, max_policy_lag=3),
        data=['replay_mask', 'policy_version', 'policy_state']),
    'ppo': dict(kwargs=dict(num_epochs=3, num_minibatches=1, normalize_advantages=True,
                            value_clip=0.2, gradient_clipping=0.5, entropy_cost=0.01),
                data=[]),
    # PPO folds the normalizer's batch in after its (unrolled) epochs.
    'ppo_lstm_normalized': dict(kwargs=dict(num_epochs=2, num_minibatches=1, lstm_size=8,
                                            normalize_observations=True),
                                data=['policy_state']),
}


_SCRIPT = textwrap.dedent('''
    import json, sys, tempfile
    import numpy as np
    sys.path.insert(0, {tests_agents!r})
    from tfrl import distribute
    devices = distribute.split_cpu(2)
    import tensorflow as tf
    from tfrl import envs
    from tfrl import learner as learner_lib
    from tfrl.agents import impala, ppo
    import unrolls

    CONFIGS = json.loads({configs!r})
    B, T, CALLS, STEPS = 8, 5, 3, 2
    def specs_of(env_id):
      env = envs.make(env_id, num_envs=1)
      return env.time_step_spec(), env.action_spec()
    rows = B * CALLS * STEPS
    rng = np.random.RandomState(0)
    step_type = np.ones((rows, T + 1), np.int32)  # MID, with episode ends here and there
    for row in range(0, rows, 3):
      t = rng.randint(1, T)
      step_type[row, t], step_type[row, t + 1] = 2, 0
    discount = np.where(step_type == 2, rng.randint(0, 2, step_type.shape), 1)
    experience = unrolls.make(step_type, discount, seed=1)
    experiences = {{'CartPole-v1': experience,
                   'Pendulum-v1': unrolls.with_gaussian_actions(experience)}}
    extras = {{'replay_mask': (np.arange(rows) % 2).astype(np.float32),
              'policy_state': tuple((0.5 * rng.randn(rows, 8)).astype(np.float32)
                                    for _ in range(2)),
              # Row r trains at step r // B with a lag of r % 8 (half beyond the max).
              'policy_version': np.repeat(
                  (np.arange(rows) // B - np.arange(rows) % 8)[:, None], T + 1, 1)}}

    def train(strategy, name):
      config = CONFIGS[name]
      tf.keras.utils.set_random_seed(0)
      with strategy.scope():
        step = learner_lib.new_train_step()
        builder = (ppo.create_ppo_agent if name.startswith('ppo') else
                   impala.create_impala_agent)
        env_id = config.get('env', 'CartPole-v1')
        agent = builder(*specs_of(env_id), step, fc_layer_params=(16,),
                        **config['kwargs'])
        agent._optimizer = tf.keras.optimizers.SGD(0.3)
        agent._optimizer.build(agent._network.trainable_variables)
      init = np.random.RandomState(2)
      for v in agent._network.trainable_variables:
        v.assign(0.3 * init.randn(*v.shape).astype(np.float32))
      data = dict({{'experience': experiences[env_id]}},
                  **{{key: extras[key] for key in config['data']}})

      def dataset_fn(context):
        return tf.data.Dataset.from_tensor_slices(data).batch(
            context.get_per_replica_batch_size(B), drop_remainder=True).map(
                lambda x: (x, ()))

      learner = learner_lib.Learner(
          tempfile.mkdtemp(), step, agent, experience_dataset_fn=dataset_fn,
          strategy=strategy, checkpoint_interval=0, summary_interval=0,
          use_kwargs_in_agent_train=True)
      infos = []
      for _ in range(CALLS):
        info = learner.run(iterations=STEPS)
        infos.append([float(info.loss)] + [float(x) for x in info.extra])
      return {{'replicas': strategy.num_replicas_in_sync, 'loss_info': infos,
              'train_step': learner.train_step_numpy,
              'variables': [v.numpy().tolist() for v in agent._network.variables],
              'fields': list(type(info.extra)._fields)}}

    # One MirroredStrategy for every config: strategies created one after another in a
    # process hand out the same collective instance keys, and TF then aborts the second
    # one's all-reduce with a shape mismatch.
    strategies = {{'default': distribute.get_strategy('default'),
                  'mirrored': distribute.get_strategy('mirrored', devices=devices)}}
    result = {{name: {{kind: train(strategy, name) for kind, strategy in strategies.items()}}
              for name in CONFIGS}}
    print('RESULT ' + json.dumps(result))
''')


@pytest.fixture(scope='module')
def runs():
  """Every config trained under both strategies, in one subprocess."""
  script = _SCRIPT.format(tests_agents=os.path.join(REPO, 'tests', 'agents'),
                          configs=json.dumps(CONFIGS))
  return strategy_runs.run_result_script(script, timeout=600)


@pytest.mark.parametrize('name', list(CONFIGS))
def test_mirrored_on_two_cpus_matches_default_strategy(runs, name):
  default, mirrored = runs[name]['default'], runs[name]['mirrored']
  assert (default['replicas'], mirrored['replicas']) == (1, 2)
  assert default['train_step'] == mirrored['train_step'] == 6
  # Every reported field (the Learner SUM-reduces the replicas' shares) and every weight.
  np.testing.assert_allclose(mirrored['loss_info'], default['loss_info'], rtol=2e-4,
                             atol=2e-6, err_msg=str(['loss'] + default['fields']))
  for got, want in zip(mirrored['variables'], default['variables']):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6)


def test_the_data_exercise_what_distribution_could_get_wrong(runs):
  """Clipping acts, APPO drops rows, CLEAR clones: a mismatch in any would show."""
  fields = runs['impala']['default']['fields']
  norms = np.array(runs['impala']['default']['loss_info'])[:, 1 + fields.index(
      'gradient_norm')]
  assert (norms > 0.5).all()  # above the clip of 0.5
  appo = np.array(runs['appo']['default']['loss_info'])
  dropped = appo[:, 1 + fields.index('fraction_dropped')]
  assert ((dropped > 0) & (dropped < 1)).all()
  # The lag drops some fresh rows' steps while the replayed rows are cloned.
  clear_lstm = np.array(runs['clear_lstm_burn_in_lag']['default']['loss_info'])
  dropped = clear_lstm[:, 1 + fields.index('fraction_dropped')]
  assert ((dropped > 0) & (dropped < 1)).all()
  assert (clear_lstm[:, 1 + fields.index('policy_cloning_loss')] > 0).all()

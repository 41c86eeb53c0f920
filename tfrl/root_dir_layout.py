"""Where a job's files live under its root_dir: the directory names every writer and
reader shares. A leaf: it imports nothing, so any module may use it.

    root_dir/
      train/checkpoints/          the Learner's checkpoints (TRAIN_DIR, CHECKPOINT_DIR)
      policies/                   POLICY_DIR
        greedy_policy/            SavedModel exports (GREEDY_POLICY, COLLECT_POLICY,
        collect_policy/           RAW_POLICY)
        checkpoints/              variables-only policy checkpoints (POLICY_CHECKPOINTS)
        serving/<name>/<step>/    TF Serving's versions (SERVING_DIR)

The names are tf-agents' (`tf_agents.train.learner`), so code written against its
layout finds the same files.
"""
TRAIN_DIR = 'train'
CHECKPOINT_DIR = 'checkpoints'  # under TRAIN_DIR
POLICY_DIR = 'policies'
GREEDY_POLICY = 'greedy_policy'
COLLECT_POLICY = 'collect_policy'
RAW_POLICY = 'policy'
POLICY_CHECKPOINTS = 'checkpoints'  # under POLICY_DIR
SERVING_DIR = 'serving'  # under POLICY_DIR
REPLAY_BUFFER_CHECKPOINT_DIR = 'replay_buffer_checkpoints'

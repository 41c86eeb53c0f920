"""Env seeds that two experiment seeds never share.

A vector env reset with an int seed s gives sub-env i the seed s + i (gymnasium's rule,
EnvPool's too). Offsetting s by the experiment seed (s = seed + 10000 for evaluations)
made experiments 0 and 1 play 15 of their 16 envs' episodes from the same seeds, and
seeds that share episodes make a confidence interval over them narrower than the truth.
Here each stream of episodes (a collector's, the evaluations', the confirmations', each
evaluation of a stream) takes its first sub-env seed from numpy's `SeedSequence` of the
experiment seed and the stream's path, so streams are independent draws from 2**31
seeds: two streams of 16 envs overlap with probability about 32 / 2**31.

    collect_seed = seeding.derive(experiment_seed, seeding.COLLECT, task_id)
"""
import numpy as np

# The streams below an experiment seed (the first element of `derive`'s path).
COLLECT = 0     # collect envs; then the collector's task_id
EVALUATE = 1    # evaluation envs; then the evaluation's index (`tfrl.actors.Evaluator`)
CONFIRM = 2     # a confirmation's envs (fresh episodes no evaluation plays); then its index
RECORD = 3      # episodes recorded from an exported policy (learners.eval --record_dir)
HELD_OUT = 4    # episodes no job plays: an export checked afterwards on unseen episodes

# Room above a derived seed for its sub-envs' s + i: 2**31 - 2**16 keeps s + i a
# non-negative int32 (EnvPool's and ALE's seed type) for up to 65,536 envs.
_HIGHEST = 2**31 - 2**16


def derive(seed: int, *path: int) -> int:
  """The first sub-env seed of the stream `path` below `seed`.

  Args:
    seed: the experiment's seed (or a stream's seed, to derive a sub-stream).
    *path: non-negative ints naming the stream, e.g. (COLLECT, task_id).

  Returns:
    An int in [0, 2**31 - 2**16): `SeedSequence(seed, spawn_key=path)`'s first word,
    the same on every machine and numpy version that keeps SeedSequence's algorithm.

  Raises:
    ValueError: a negative seed or path element.
  """
  if seed < 0 or any(key < 0 for key in path):
    raise ValueError(f'Seeds are non-negative ints: got seed {seed}, path {path}.')
  word = np.random.SeedSequence(seed, spawn_key=tuple(path)).generate_state(1, np.uint64)[0]
  return int(word % _HIGHEST)


def evaluation_seed(first: int, index: int) -> int:
  """Evaluation `index`'s first sub-env seed in a stream that starts at `first`: `first`
  itself, then `derive(first, index)`, so a seed recorded from one evaluation replays it
  as the first of a new stream (`tfrl.actors.Evaluator`, the SB3 harness).

  Args:
    first: the stream's first seed (e.g. an Experiment's eval_seed).
    index: the evaluation's index in the stream, from 0.

  Returns:
    The seed.
  """
  return first if index == 0 else derive(first, index)

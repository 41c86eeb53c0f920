"""How an evaluation of K episodes on n envs spreads them: each env a fixed quota
(`tfrl.actors.Evaluator` plays exactly these; a video recorder keeps exactly these). A
leaf: it imports nothing."""
from typing import List


def episode_quotas(num_episodes: int, num_envs: int) -> List[int]:
  """Episodes per env: K // n each, the first K % n envs one more."""
  return [num_episodes // num_envs + (i < num_episodes % num_envs)
          for i in range(num_envs)]

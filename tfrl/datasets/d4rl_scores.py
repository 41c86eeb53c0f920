"""D4RL's normalized score: 100 * (return - random) / (expert - random).

The reference returns are D4RL's own (REF_MIN_SCORE: a random policy's, REF_MAX_SCORE:
an expert's), from d4rl/infos.py in github.com/Farama-Foundation/D4RL; the MuJoCo
locomotion tasks share one pair per environment across their datasets (random,
medium, medium-replay, expert, ...). Scores compare across papers only on the
environments D4RL scored (its gym v2 datasets); tfrl's benchmarks run the gymnasium
v5 environments, whose returns are close to but not the same task as v2's.
"""
from typing import Dict, Tuple

# (random return, expert return), keyed by the environment's lower-case family name.
REFERENCE_RETURNS: Dict[str, Tuple[float, float]] = {
    'halfcheetah': (-280.178953, 12135.0),
    'hopper': (-20.272305, 3234.3),
    'walker2d': (1.629008, 4592.3),
    'ant': (-325.6, 3879.7),
}


def family(env_name: str) -> str:
  """'halfcheetah' of 'HalfCheetah-v5' or 'halfcheetah-medium-v2'."""
  return env_name.split('-')[0].lower()


def has_reference(env_name: str) -> bool:
  """Whether D4RL publishes reference returns for `env_name`'s environment."""
  return family(env_name) in REFERENCE_RETURNS


def normalized_score(env_name: str, episode_return: float) -> float:
  """D4RL's normalized score of a return: 0 a random policy's, 100 an expert's.

  Args:
    env_name: a gymnasium id ('HalfCheetah-v5') or D4RL dataset name
      ('halfcheetah-medium-v2').
    episode_return: the undiscounted return (or a mean of returns).

  Returns:
    100 * (episode_return - random) / (expert - random).

  Raises:
    KeyError: an environment D4RL has no reference returns for (those it has named).
  """
  name = family(env_name)
  if name not in REFERENCE_RETURNS:
    raise KeyError(f'D4RL has no reference returns for {env_name!r} (it has '
                   f'{", ".join(sorted(REFERENCE_RETURNS))}).')
  random_return, expert_return = REFERENCE_RETURNS[name]
  return 100.0 * (episode_return - random_return) / (expert_return - random_return)

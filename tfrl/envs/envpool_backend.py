"""`tfrl.envs.make`'s envpool backend: what it was asked checked, then the pool made,
the plain one (`tfrl.envs.envpool_env`) or Atari with RL-Zoo's wrapper options
(`tfrl.envs.envpool_atari`)."""
from typing import Any, Dict, Optional

from tfrl.envs import envpool_atari
from tfrl.envs import envpool_env
from tfrl.envs import sources


def make_vector_env(env_id: Any, num_envs: int, seed: Optional[int],
                    gymnasium_only: Dict[str, Any],
                    **options) -> envpool_env.EnvPoolVectorEnv:
  """`tfrl.envs.make`'s envpool backend: checks what it was asked, then makes the pool.

  Args:
    env_id: what `make` was given (an id is all this backend takes).
    num_envs: sub-environments.
    seed: the pool's seed.
    gymnasium_only: `make`'s options this backend does not have, by name: any set
      (truthy) is refused.
    **options: `EnvPoolVectorEnv`'s options.

  Raises:
    EnvPoolUnsupportedError: a factory instead of an id, or an option it does not have.
  """
  not_taken = sorted(name for name, value in gymnasium_only.items() if value)
  if not_taken:
    raise envpool_env.EnvPoolUnsupportedError(
        f'The envpool backend takes none of {", ".join(not_taken)} (EnvPool steps its '
        'envs in its own threads): use the gymnasium backend.')
  if not isinstance(env_id, str):
    raise envpool_env.EnvPoolUnsupportedError(
        f'The envpool backend takes env ids only, not {sources.display_name(env_id)}.')
  wrapper_options = ('terminal_on_life_loss', 'fire_reset', 'clip_reward')
  if options.get('atari') and any(options.get(name) for name in wrapper_options):
    # RL-Zoo's AtariWrapper, and whole games' raw scores (tfrl.envs.envpool_atari).
    return envpool_atari.AtariGames(env_id, num_envs, seed=seed, **options)
  options.pop('terminal_on_life_loss', None)
  options.pop('fire_reset', None)
  return envpool_env.EnvPoolVectorEnv(env_id, num_envs, seed=seed, **options)

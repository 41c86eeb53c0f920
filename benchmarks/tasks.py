"""The tasks benchmarks/solve_time.py compares tfrl and its peer on, and one run's record.

A task is a tfrl config against a Stable-Baselines3 peer (RL-Zoo's settings) on one
environment, judged on the time to a threshold or on budgets (solve_time.py's
docstring says how each side counts). A Run is one side's run on one seed, as
solve_time.py writes it to its --json_out files (one JSON object a line) and as the
benchmarks read them back: benchmarks/summary.py's tables, benchmarks/results_pages.py's
pages. No flags and no TensorFlow here, so any of them may import it.
"""
import dataclasses
from typing import Optional, Tuple


@dataclasses.dataclass(frozen=True)
class Protocol:
  """How both sides of a comparison evaluate: each run records the protocol it ran, and
  benchmarks/summary.py compares only runs that ran one and the same.

  Attributes:
    returns: 'eval' (evaluations of the greedy policy) or 'train' (the training
      games' scores, Atari: no evaluations, so none of the fields below).
    eval_every_env_steps: the grid: each side evaluates at its first step at or past
      each multiple of this many env steps.
    eval_episodes: episodes per evaluation, on min(eval_episodes, 10) envs whose
      sub-env i resets with the evaluation's seed + i (`tfrl.seeding`: the
      experiment seed's evaluation stream, a new seed per evaluation).
    confirm_episodes: the success rule: an evaluation at the threshold counts once the
      mean over this many fresh episodes (the confirmation stream) reaches it too.
      None: judged on budgets, no success rule.
    seeds: the env seeds' scheme: collect, evaluation and confirmation streams.
  """
  returns: str = 'eval'
  eval_every_env_steps: Optional[int] = None
  eval_episodes: Optional[int] = None
  confirm_episodes: Optional[int] = None
  seeds: str = 'tfrl.seeding'

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Task:
  """One comparison: a tfrl config against an SB3 peer on one environment.

  A task with a threshold is judged on the time to reach it; one without, on budgets:
  the return reached after `--budget_seconds` of training, and at each of
  `env_step_budgets` env steps.
  """
  config: str                          # learners/configs/<config>.gin
  env: str
  threshold: Optional[float]           # None: judged on budgets
  peer: Optional[str]                  # sb3_solve.py --algo, or None (tfrl only)
  bindings: Tuple[str, ...] = ()       # tfrl's extra gin bindings
  peer_args: Tuple[str, ...] = ()      # sb3_solve.py's extra arguments
  env_step_budgets: Tuple[int, ...] = ()
  returns: str = 'eval'                # 'train': the training episodes' (Atari)
  frames_per_step: int = 1             # Atari's frame skip: env frames per env step
  # Seeds run unless --seeds is given: at least 5 where one run (either side) costs
  # under 3 minutes, at least 3 otherwise.
  seeds: int = 5
  # The evaluations' env-step grid and size on both sides (`protocol`).
  eval_every_env_steps: int = 5_000
  eval_episodes: int = 10

  @property
  def protocol(self) -> Protocol:
    """The evaluation protocol both sides run (see `Protocol`)."""
    if self.returns == 'train':
      return Protocol(returns='train')
    return Protocol(eval_every_env_steps=self.eval_every_env_steps,
                    eval_episodes=self.eval_episodes,
                    confirm_episodes=None if self.threshold is None else CONFIRM_EPISODES)


def _atari(config: str, game: str, peer: Optional[str], log_interval: int,
           env_step_budgets: Tuple[int, ...] = ()) -> Task:
  """An Atari budget task: progress lines every `log_interval` train steps carry the
  training games' mean score, and only the end of the budget is evaluated."""
  return Task(config, f'ALE/{game}-v5', None, peer,
              bindings=(f"Experiment.env_name = 'ALE/{game}-v5'",
                        f'Experiment.log_interval = {log_interval}',
                        'Experiment.eval_interval = 100000000'),
              peer_args=(f'--env_id=ALE/{game}-v5',), returns='train', frames_per_step=4,
              env_step_budgets=env_step_budgets, seeds=3)


# The confirmation's episodes: gymnasium's thresholds are means over 100 episodes.
CONFIRM_EPISODES = 100

ALGOS = {
    'dqn': Task('dqn_cartpole', 'CartPole-v1', 475.0, 'dqn', eval_every_env_steps=2_000),
    'ppo': Task('ppo_cartpole', 'CartPole-v1', 475.0, 'ppo', eval_every_env_steps=2_000),
    'sac': Task('sac_pendulum', 'Pendulum-v1', -200.0, 'sac', eval_every_env_steps=1_000),
    'ppo_pendulum': Task('ppo_pendulum', 'Pendulum-v1', -200.0, 'ppo_pendulum'),
    'ppo_lstm_masked': Task('ppo_lstm_cartpole_masked', 'CartPole-v1 (observation 0, 2)',
                            475.0, 'ppo_lstm_masked'),
    # SB3's runs take 5-12 minutes here (LunarLander), or its cap (MiniGrid): 3 seeds.
    'dqn_lunarlander': Task('dqn_lunarlander', 'LunarLander-v3', 200.0, 'dqn_lunarlander',
                            seeds=3, eval_episodes=20),
    # Once per SB3 rollout (16 envs x 1,024 steps): evaluations of 20 episodes every
    # 5,000 steps would cost more time than training.
    'ppo_lunarlander': Task('ppo_lunarlander', 'LunarLander-v3', 200.0, 'ppo_lunarlander',
                            seeds=3, eval_every_env_steps=16_384, eval_episodes=20),
    'ppo_minigrid': Task('ppo_minigrid_doorkey', 'MiniGrid-DoorKey-5x5-v0', 0.9,
                         'ppo_minigrid', seeds=3, eval_every_env_steps=10_240,
                         eval_episodes=20),
    # The budget tasks train --budget_seconds per run: 3 seeds. Env-step budgets: the
    # points of comparison (SB3 SAC needs ~1,350 s to reach 150k here).
    'sac_halfcheetah': Task('sac_halfcheetah', 'HalfCheetah-v5', None, 'sac_halfcheetah',
                            env_step_budgets=(50_000, 150_000), seeds=3,
                            eval_every_env_steps=10_000),
    # SB3's PPO (1 env, 20 epochs) runs at ~510-570 env steps/s here, so RL-Zoo's 1M
    # needs --budget_seconds=1900; tfrl gets there in ~700-1,000 s. Both sides train to
    # the budget's end: tfrl may go on to 2M steps (RL-Zoo's PPO has no schedule over
    # them).
    'ppo_halfcheetah': Task('ppo_halfcheetah', 'HalfCheetah-v5', None, 'ppo_halfcheetah',
                            bindings=('Experiment.num_train_steps = 4000',),
                            env_step_budgets=(200_000, 1_000_000), seeds=3,
                            eval_every_env_steps=20_000),
    'ppo_pong': _atari('ppo_atari', 'Pong', 'ppo_atari', log_interval=10),
    # 2M frames: 500k env steps of 4 frames.
    'ppo_breakout': _atari('ppo_atari', 'Breakout', 'ppo_atari', log_interval=10,
                           env_step_budgets=(500_000,)),
    'dqn_pong': _atari('dqn_atari', 'Pong', 'dqn_atari', log_interval=2560),
    'dqn_breakout': _atari('dqn_atari', 'Breakout', 'dqn_atari', log_interval=2560),
    'impala_pong': _atari('impala_atari', 'Pong', None, log_interval=16),
    'impala_breakout': _atari('impala_atari', 'Breakout', None, log_interval=16,
                              env_step_budgets=(500_000,)),
    'appo_breakout': _atari('appo_atari', 'Breakout', None, log_interval=16,
                            env_step_budgets=(500_000,)),
    'dqn_per': Task('dqn_per_cartpole', 'CartPole-v1', 475.0, None),
    'impala': Task('impala_cartpole', 'CartPole-v1', 475.0, None),
    'clear': Task('clear_cartpole', 'CartPole-v1', 475.0, None),
    'appo': Task('appo_cartpole', 'CartPole-v1', 475.0, None),
}
# The peer's name in the tables, where it is not 'SB3 <ALGO> (RL-Zoo)'.
PEER_NAMES = {
    'ppo_pendulum': 'SB3 PPO + gSDE (RL-Zoo)',
    'ppo_lstm_masked': 'sb3-contrib RecurrentPPO (RL-Zoo CartPoleNoVel-v1)',
    'dqn_lunarlander': 'SB3 DQN (RL-Zoo LunarLander)',
    'ppo_lunarlander': 'SB3 PPO (RL-Zoo LunarLander)',
    'ppo_minigrid': 'SB3 PPO (RL-Zoo MiniGrid, FlatObsWrapper)',
    'sac_halfcheetah': 'SB3 SAC (RL-Zoo MuJoCo)',
    'ppo_halfcheetah': 'SB3 PPO (RL-Zoo HalfCheetah)',
    'ppo_atari': 'SB3 PPO (RL-Zoo Atari)',
    'dqn_atari': 'SB3 DQN (RL-Zoo Atari)',
}
# Peer algorithms that come from sb3-contrib (their version goes in the header).
CONTRIB_PEERS = ('ppo_lstm_masked',)


def peer_name(task: Task) -> str:
  """The peer's name in tables and titles: PEER_NAMES', else 'SB3 <ALGO> (RL-Zoo)'.

  Args:
    task: a task with a peer.

  Returns:
    The name.
  """
  return PEER_NAMES.get(task.peer, f'SB3 {str(task.peer).upper()} (RL-Zoo)')


@dataclasses.dataclass
class Run:
  """One side's run on one seed."""
  side: str
  algo: str
  seed: int
  solved: bool = False
  seconds: Optional[float] = None      # training clock (solve_time.py's docstring)
  env_steps: Optional[int] = None
  eval_return: Optional[float] = None
  evals: Optional[int] = None
  process_seconds: float = 0.0
  load_start: float = 0.0
  load_end: float = 0.0
  note: str = ''
  extra: dict = dataclasses.field(default_factory=dict)

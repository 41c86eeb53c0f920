"""tfrl's built-in agent builders by name: the names configs give `Experiment.agent_fn`
(`@create_dqn_agent`), and the agent classes whose settings configs may bind as well.

A new built-in builder joins `BUILDERS` here; importing this module imports (and so
registers with gin) every one of them.
"""
from typing import Callable, Dict, Tuple

from tfrl.agents import bc
from tfrl.agents import clear
from tfrl.agents import cql_sac
from tfrl.agents import dqn
from tfrl.agents import impala
from tfrl.agents import iql
from tfrl.agents import ppo
from tfrl.agents import sac

BUILDERS: Dict[str, Callable] = {
    builder.__name__: builder for builder in (
        dqn.create_dqn_agent, sac.create_sac_agent, cql_sac.create_cql_sac_agent,
        iql.create_iql_agent, bc.create_bc_agent, ppo.create_ppo_agent,
        impala.create_impala_agent, clear.create_clear_agent)}

# Gin-configurable agent classes the builders construct: a config may bind their
# settings directly (`PpoAgent.reward_scale = 0.1`).
AGENT_CLASSES: Tuple[type, ...] = (ppo.PpoAgent, impala.ImpalaAgent)

"""Reverb replay: tables, server, batched writers, datasets, priorities, variables."""
from tfrl.replay.dataset import (TABLE_INDEX, SpecMismatchError, check_table_signature,
                                 make_dataset, make_mixed_dataset, valid_mask)
from tfrl.replay.errors import (CheckpointMismatchError, ReplayServerUnreachableError,
                                WriterStoppedError, call_with_timeout, is_server_lost)
from tfrl.replay.network import PortInUseError, check_port_free, warn_exposed
from tfrl.replay.priorities import PriorityUpdater
from tfrl.replay.server import (ReplayServer, check_checkpoint, inserted_items,
                                latest_checkpoint, wait_for_server)
from tfrl.replay.tables import (VARIABLES_TABLE, prioritized_table, queue_table,
                                rate_limiter, reservoir_priority, reservoir_table,
                                uniform_table, variables_table)
from tfrl.replay.variables import VariableContainer, VariablesNotPushedError
from tfrl.replay.writers import NStepTransitionWriter, SequenceWriter

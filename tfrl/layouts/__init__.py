"""Data-layout builders: what each algorithm's data is, built the same way by every
program (see `tfrl.layouts.base`)."""
from tfrl.layouts.base import (JOB_SETTINGS, QUEUE_TABLE, REPLAY_TABLE, Layout,
                               bound_settings, build)
from tfrl.layouts.sequence import SequenceQueue
from tfrl.layouts.sequence_replay import REPLAY_REMOVERS, SequenceQueueAndReplay
from tfrl.layouts.transition import TransitionReplay

# Every layout tfrl has (a config's bindings on any other than its agent's are refused).
ALL = (TransitionReplay, SequenceQueue, SequenceQueueAndReplay)

"""Data-layout builders: what each algorithm's data is, built the same way by every
program (see `tfrl.layouts.base`)."""
from tfrl.layouts.base import QUEUE_TABLE, REPLAY_TABLE, Layout
from tfrl.layouts.sequence import SequenceQueue
from tfrl.layouts.sequence_replay import REPLAY_REMOVERS, SequenceQueueAndReplay
from tfrl.layouts.transition import TransitionReplay

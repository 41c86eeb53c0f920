"""The exit statuses tfrl's programs end with, which a launcher, a scheduler and a
person's shell can tell apart. A leaf: it imports nothing of tfrl's.

0 is a normal end with everything saved; 1 an error (a traceback or 'error: ...' in the
log); 2 bad input.
"""
import signal

EXIT_STOP_TIMEOUT = 3  # did not stop within the grace period after a signal: no final save
EXIT_SERVER_LOST = 4  # the Reverb server stayed unreachable past the reconnect timeout
EXIT_STALLED = 5  # a process or an env step stalled (learners/processes/heartbeat.py)
EXIT_DISK_FULL = 6  # a write failed with ENOSPC/EDQUOT (learners.processes.disk_full)
EXIT_STATUS_MEANING = {
    1: 'failed (see its log)',
    2: 'bad input (see its log)',
    EXIT_STOP_TIMEOUT: 'did not stop in time after SIGTERM and left without its final save',
    EXIT_SERVER_LOST: 'lost the Reverb server for longer than its reconnect timeout',
    EXIT_STALLED: 'stalled: stopped progressing or answering (see the status line)',
    EXIT_DISK_FULL: 'stopped: disk full',
    -signal.SIGKILL: 'was killed (SIGKILL)',
    -signal.SIGTERM: 'was ended by SIGTERM before it could handle it',
}

"""Heartbeats and the monitor that reads them: how the launcher sees a frozen or stalled
process.

Each program owns a `Heartbeat`: a daemon thread that rewrites
root_dir/status/<name>.json every `interval_s` (atomically: write a temp file, then
rename) with its pid, host, the time, its progress counters and what it is doing now
('env step', 'sample', 'train', 'wait for server', ...) and since when. A `Monitor`
(in the launcher) reads those files and says, per process, whether it is not
answering (the file stopped being rewritten: SIGSTOP, a frozen interpreter) or stalled
(its counters did not move for `stall_timeout_s` while it was doing work).
"""
import json
import os
import socket
import threading
import time
from typing import Dict, Iterator, Optional

# Activities that are the program's own work: no progress during one of them is a stall.
# Waiting ('wait for server', 'wait for data') is not: the process waits on another.
WORK_ACTIVITIES = frozenset({'env step', 'sample', 'push', 'insert', 'train', 'eval'})
# A job held still on purpose: a population member's trainer waits for the population's
# decision (learners/job/trainer_member.py) for as long as the slowest member takes to
# report. The collectors blocked behind it (a rate limiter holds their inserts) are not
# stalled while it holds, and their stall clock starts again when it lets go.
HOLD_ACTIVITIES = frozenset({'wait for the population'})


def status_dir(root_dir: str) -> str:
  """The folder holding the heartbeat files of the job in `root_dir`."""
  return os.path.join(root_dir, 'status')


class Heartbeat:
  """A program's heartbeat file, rewritten every `interval_s` by a daemon thread.

  Usage: `hb = Heartbeat(root_dir, 'collector_0'); hb.start()`, then
  `with hb.doing('env step'): env.step(a)` and `hb.progress(env_steps=n)`.
  """

  def __init__(self, root_dir: str, name: str, interval_s: float = 2.0):
    """Args:
      root_dir: the job's root_dir; the file is root_dir/status/<name>.json.
      name: the program's name as the launcher knows it.
      interval_s: seconds between rewrites.
    """
    self.path = os.path.join(status_dir(root_dir), f'{name}.json')
    self._name, self._interval_s = name, interval_s
    self._lock = threading.Lock()
    self._counters: Dict[str, int] = {}
    self._activity, self._since = 'start', time.time()
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None

  def start(self) -> 'Heartbeat':
    """Writes the first beat and starts the writer thread.

    Returns:
      self.

    Raises:
      OSError: the status folder cannot be created or written.
    """
    os.makedirs(os.path.dirname(self.path), exist_ok=True)
    self.beat()
    self._thread = threading.Thread(target=self._run, name=f'heartbeat-{self._name}',
                                    daemon=True)
    self._thread.start()
    return self

  def stop(self) -> None:
    """Stops the writer thread (the file stays, with its last beat)."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout=self._interval_s + 5.0)

  def progress(self, **counters: int) -> None:
    """Records progress counters (e.g. env_steps=..., train_step=...)."""
    with self._lock:
      self._counters.update({k: int(v) for k, v in counters.items()})

  def set_activity(self, activity: str) -> None:
    """Records what the program is doing now, from now on."""
    with self._lock:
      if activity != self._activity:
        self._activity, self._since = activity, time.time()

  def doing(self, activity: str) -> '_Doing':
    """A context manager: `activity` while inside, the previous activity after."""
    return _Doing(self, activity)

  def snapshot(self) -> dict:
    """The content of the next beat."""
    with self._lock:
      return {'pid': os.getpid(), 'host': socket.gethostname(), 'time': time.time(),
              'activity': self._activity, 'since': self._since,
              'counters': dict(self._counters)}

  def beat(self) -> None:
    """Writes the file now, atomically, so a reader never sees half of it."""
    tmp = f'{self.path}.tmp{os.getpid()}'
    with open(tmp, 'w') as f:
      json.dump(self.snapshot(), f)
    os.replace(tmp, self.path)

  def _run(self) -> None:
    while not self._stop.wait(self._interval_s):
      try:
        self.beat()
      except OSError:
        pass  # a full disk must not end the program; the monitor sees the silence


class _Doing:

  def __init__(self, heartbeat: Heartbeat, activity: str):
    self._hb, self._activity, self._before = heartbeat, activity, None

  def __enter__(self):
    self._before = self._hb.snapshot()['activity']
    self._hb.set_activity(self._activity)
    return self

  def __exit__(self, *unused_exc):
    self._hb.set_activity(self._before)


def _exited(beat: dict) -> bool:
  """Whether the process that wrote `beat` on this host has exited (or is a zombie).

  A process on another host (the Ray backend) cannot be looked up: it counts as running.
  """
  if beat.get('host') != socket.gethostname() or 'pid' not in beat:
    return False
  try:
    with open(f'/proc/{int(beat["pid"])}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] in ('Z', 'X')
  except (OSError, ValueError, IndexError):
    return True


class Monitor:
  """Reads the heartbeat files and says which process is not answering or stalled."""

  def __init__(self, root_dir: str, stall_timeout_s: float = 120.0,
               silence_timeout_s: Optional[float] = None):
    """Args:
      root_dir: the job's root_dir.
      stall_timeout_s: seconds without progress during a work activity that make a
        stall; 0 disables stall detection.
      silence_timeout_s: seconds without a rewritten file that make 'not answering'
        (default: 10, or half stall_timeout_s where less, so that a frozen process is
        named as not answering before its missing progress could read as a stall).
    """
    if silence_timeout_s is None:
      silence_timeout_s = min(10.0, stall_timeout_s / 2) if stall_timeout_s > 0 else 10.0
    self._dir = status_dir(root_dir)
    self._stall_timeout_s, self._silence_timeout_s = stall_timeout_s, silence_timeout_s
    # name -> (counters, wall time they were first seen at that value)
    self._last_progress: Dict[str, tuple] = {}
    self._held_at = 0.0  # when a process was last seen holding the job (HOLD_ACTIVITIES)

  def _beats(self) -> Iterator[tuple]:
    try:
      names = sorted(n for n in os.listdir(self._dir) if n.endswith('.json'))
    except FileNotFoundError:
      return
    for n in names:
      try:
        with open(os.path.join(self._dir, n)) as f:
          yield n[:-len('.json')], json.load(f)
      except (OSError, ValueError):
        continue  # being replaced right now: read it next time

  def check(self, now: Optional[float] = None) -> Dict[str, str]:
    """The state of every process with a heartbeat file.

    Args:
      now: the wall time to judge at (default: now).

    Returns:
      name -> 'ok', 'not answering (N s)' or 'stalled (<activity>, N s)'.
    """
    return {name: state for name, (state, _) in self._judge(now).items()}

  def _judge(self, now: Optional[float]) -> Dict[str, tuple]:
    """name -> (state line, seconds the state has lasted)."""
    now = time.time() if now is None else now
    states = {}
    beats = [(name, beat) for name, beat in self._beats() if not _exited(beat)]
    # (An exited process's file, or one from an earlier run: the launcher judges exits.)
    if any(beat.get('activity') in HOLD_ACTIVITIES for _, beat in beats):
      self._held_at = now
    for name, beat in beats:
      counters = beat.get('counters', {})
      seen = self._last_progress.get(name)
      if seen is None or seen[0] != counters:
        self._last_progress[name] = seen = (counters, now)
      silent_s = now - float(beat.get('time', now))
      activity = beat.get('activity', '?')
      still_s = now - max(seen[1], float(beat.get('since', now)), self._held_at)
      if silent_s > self._silence_timeout_s:
        states[name] = (f'not answering ({silent_s:.0f} s)', silent_s)
      elif (self._stall_timeout_s > 0 and activity in WORK_ACTIVITIES
            and still_s > self._stall_timeout_s):
        states[name] = (f'stalled ({activity}, {still_s:.0f} s)', still_s)
      else:
        states[name] = ('ok', 0.0)
    return states

  def stalled(self, now: Optional[float] = None) -> Optional[str]:
    """One line naming the first process that is stalled or not answering for longer
    than stall_timeout_s, or None.

    Args:
      now: the wall time to judge at (default: now).

    Returns:
      e.g. 'collector_0 stalled (env step, 130 s)', or None (also when disabled).
    """
    if self._stall_timeout_s <= 0:
      return None
    over = [(name, state) for name, (state, lasted_s) in self._judge(now).items()
            if state != 'ok' and lasted_s > self._stall_timeout_s]
    # A frozen process is the cause when others stall behind it (collectors blocked on
    # a frozen server): name it first.
    over.sort(key=lambda item: not item[1].startswith('not answering'))
    return f'{over[0][0]} {over[0][1]}' if over else None

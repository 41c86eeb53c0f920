"""The launcher's programs as processes that Ray places on a cluster's nodes.

`tfrl-launch --backend=ray --ray_address=HOST:PORT` runs the same programs, with the
same flags, stop order, status line and exit statuses as on one host: only where each
process runs changes. For every program the launcher creates a Ray actor (`_Runner`)
that Ray places by the program's resources (`--ray_resources`; the trainer asks for a GPU
when the cluster has one, collectors are spread over the nodes); the actor starts the
program as a subprocess on its node, logging to root_dir/logs/<name>.log, and answers
the launcher's `poll`, `send_signal`, `wait` and `kill` for it. `RayProcess` gives
the launcher that `subprocess.Popen` interface, so launcher.py's logic is the backend's.
The Reverb server's actor picks a port free on its own node; the server's address is
that node's IP and port.

root_dir must be a path every node sees (a shared filesystem or bucket): the programs
write their checkpoints, exports, logs and eval results there, and the launcher reads
the logs and results from it. Ray Core only (`pip install 'tfrl[ray]'`). Ray runs any code a client
submits to its cluster: see README.md's trust model.
"""
import json
import os
import signal
import subprocess
from typing import Dict, List, Optional

import portpicker

from learners.processes import child_process
import tfrl

# Program -> the Ray resources its process asks for (on top of the CPU below). The
# launcher merges --ray_resources into these.
DEFAULT_RESOURCES: Dict[str, Dict[str, float]] = {
    'reverb_server': {}, 'train': {}, 'collect': {}, 'eval': {}, 'pbt_member': {}}
CALL_TIMEOUT_S = 60.0  # the longest one call to a program's actor may take


def _ray():
  """Ray, imported on first use (an optional extra)."""
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("--backend=ray needs Ray: pip install 'tfrl[ray]'") from e
  return ray


class _Runner:
  """A Ray actor that runs one program as a subprocess on its node."""

  def __init__(self, command: List[str], log_path: str, env: Dict[str, str],
               port_flag: Optional[str] = None):
    """Starts `command`; with `port_flag`, adds `<port_flag>=<a port free here>`."""
    self._port = None
    if port_flag:
      self._port = portpicker.pick_unused_port()
      command = command + [f'{port_flag}={self._port}']
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    self._log = open(log_path, 'a')
    # The program gets SIGTERM if this actor dies (its node is lost, the job killed).
    self._popen = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                   env=child_process.child_env(env),
                                   start_new_session=True)

  def where(self) -> Dict[str, object]:
    ray = _ray()
    return {'pid': self._popen.pid, 'ip': ray.util.get_node_ip_address(),
            'node_id': ray.get_runtime_context().get_node_id(), 'port': self._port}

  def poll(self) -> Optional[int]:
    return self._popen.poll()

  def send_signal(self, sig: int) -> None:
    if self._popen.poll() is None:
      self._popen.send_signal(sig)

  def wait(self, timeout: float) -> Optional[int]:
    try:
      return self._popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      return None

  def kill(self) -> None:
    if self._popen.poll() is None:
      self._popen.kill()


class RayProcess:
  """`subprocess.Popen`'s interface (poll, pid, send_signal, wait, kill, returncode)
  over a program that a `_Runner` actor runs on some node.

  An actor that is gone (its node died) reads as a process killed by SIGKILL, as the
  local backend would see one, so the launcher handles both alike.
  """

  def __init__(self, runner, where: Dict[str, object]):
    self._runner = runner
    self.pid = where['pid']
    self.ip = where['ip']
    self.node_id = where['node_id']
    self.port = where['port']  # the one it was given with `port_flag`, if any
    self.returncode: Optional[int] = None

  def _call(self, method: str, *args, timeout: float = CALL_TIMEOUT_S):
    ray = _ray()
    try:
      return ray.get(getattr(self._runner, method).remote(*args), timeout=timeout)
    except ray.exceptions.RayActorError:
      self.returncode = -signal.SIGKILL
      return None

  def poll(self) -> Optional[int]:
    if self.returncode is None:
      code = self._call('poll')
      if code is not None:
        self.returncode = code
    return self.returncode

  def send_signal(self, sig: int) -> None:
    if self.returncode is None:
      self._call('send_signal', int(sig))

  def wait(self, timeout: Optional[float] = None) -> int:
    if self.returncode is None:
      code = self._call('wait', timeout, timeout=(timeout or 0) + CALL_TIMEOUT_S)
      if code is not None:
        self.returncode = code
    if self.returncode is None:
      raise subprocess.TimeoutExpired(f'program {self.pid}', timeout)
    return self.returncode

  def kill(self) -> None:
    if self.returncode is None:
      self._call('kill')

  def release(self) -> None:
    """Ends the actor (after the program ended), freeing its resources."""
    _ray().kill(self._runner)


class RayBackend:
  """Starts programs as `RayProcess`es on the cluster at `address`."""

  def __init__(self, address: str, resources: Optional[Dict[str, Dict[str, float]]] = None,
               trainer_gpus: Optional[float] = None, member_gpus: float = 0.0):
    """Connects to the cluster.

    Args:
      address: the cluster's address ('host:port' of its head).
      resources: program ('reverb_server', 'train', 'collect', 'eval', 'pbt_member') ->
        extra Ray resources its process asks for (custom resources pin programs to nodes).
      trainer_gpus: GPUs for the trainer; None: 1 when the cluster has a GPU, else 0.
      member_gpus: GPUs for each population member (`learners.pbt`; a fraction shares
        one GPU between members).

    Raises:
      ImportError: Ray is not installed.
      ConnectionError: no cluster at `address`.
    """
    ray = _ray()
    if not ray.is_initialized():
      ray.init(address=address, logging_level='ERROR', log_to_driver=False)
    self._resources = {name: dict(DEFAULT_RESOURCES[name], **(resources or {}).get(name, {}))
                       for name in DEFAULT_RESOURCES}
    if trainer_gpus is None:
      trainer_gpus = 1.0 if ray.cluster_resources().get('GPU', 0) >= 1 else 0.0
    self._gpus = {'train': trainer_gpus, 'pbt_member': member_gpus}
    self._runner = ray.remote(_Runner)

  def _options(self, program: str) -> dict:
    # The actor only starts and watches a process: it must not load TensorFlow, which
    # this module's `import tfrl` would (seconds and ~400 MB per actor).
    options = {'num_cpus': 0, 'resources': self._resources[program],
               'runtime_env': {'env_vars': {tfrl.NO_TENSORFLOW_VARIABLE: '1'}}}
    if self._gpus.get(program):
      options['num_gpus'] = self._gpus[program]
    if program in ('collect', 'pbt_member'):
      options['scheduling_strategy'] = 'SPREAD'  # over as many nodes as fit
    return options

  def start(self, program: str, command: List[str], log_path: str, env: Dict[str, str],
            port_flag: Optional[str] = None) -> RayProcess:
    """Starts `command` (program `program`) on a node Ray picks by its resources; with
    `port_flag` (the server's '--port'), on a port free on that node (`.port`)."""
    ray = _ray()
    runner = self._runner.options(**self._options(program)).remote(command, log_path, env,
                                                                   port_flag)
    return RayProcess(runner, ray.get(runner.where.remote(), timeout=CALL_TIMEOUT_S))


def from_flags(trainer_gpus: Optional[float] = None,
               member_gpus: float = 0.0) -> Optional[RayBackend]:
  """The backend --backend asks for (`config.RayOptions`): None for this host, else a
  connected `RayBackend`. Bad flags, no Ray or no cluster end the program
  (`config.fail`).

  Args:
    trainer_gpus, member_gpus: GPUs a trainer, a population member asks for (see
      `RayBackend`).

  Returns:
    The connected backend, or None for --backend=local.
  """
  # Here, not at the top: the actors import this module, and need no flags or gin.
  from learners.configuration import config  # pylint: disable=g-import-not-at-top
  options = config.options_from_flags(config.RayOptions)
  if options.backend != 'ray':
    return None
  if not options.ray_address:
    config.fail('--backend=ray needs --ray_address=HOST:PORT (the Ray head node).')
  try:
    resources = json.loads(options.ray_resources)
    unknown = set(resources) - set(DEFAULT_RESOURCES)
    if unknown or not all(isinstance(r, dict) for r in resources.values()):
      raise ValueError(f'programs are {sorted(DEFAULT_RESOURCES)}, each with a '
                       f'{{resource: amount}} object; got {options.ray_resources}')
  except ValueError as e:
    config.fail(f'--ray_resources: {e}')
  try:
    return RayBackend(options.ray_address, resources, trainer_gpus, member_gpus)
  except ImportError as e:
    config.fail(str(e))
  except ConnectionError as e:
    config.fail(f'No Ray cluster at --ray_address={options.ray_address}: {e}')

"""Where a Reverb server listens, and what that exposes.

Reverb 0.14 gives no choice of listen address and no credentials: its server binds
'[::]:<port>' (every interface, IPv4 through the dual-stack socket and IPv6) with
gRPC's insecure credentials (dm-reverb reverb/cc/platform/default/server.cc, the
`AddListeningPort(absl::StrCat("[::]:", port), MakeServerCredentials())` call in
`ServerImpl`'s constructor; reverb/cc/platform/default/grpc_utils.cc,
`MakeServerCredentials` returns `grpc::InsecureServerCredentials()`). So nothing in
tfrl can keep a server off the network: this module warns once per process, and
checks a port is free before a server is started on it (gRPC sets SO_REUSEPORT on its
listening socket, so a second Reverb server on a busy port may start and silently
share it instead of failing).
"""
import contextlib
import errno
import socket
import sys
from typing import Iterator

from absl import logging

_warned = False  # this process printed the exposure warning


class PortInUseError(ValueError):
  """A port a Reverb server was asked to listen on is already taken."""


def exposure_warning(port: int) -> str:
  """The one-line warning about a Reverb server listening on `port`."""
  return (f'Reverb server on port {port} listens on ALL network interfaces (IPv4 and '
          'IPv6) with no authentication: anyone who can reach this port can read and '
          'write its tables. Keep it behind a firewall or on a private network (see '
          "README, 'Trust model').")


def warn_exposed(port: int) -> bool:
  """Prints the exposure warning on stderr, once per process.

  A print, not a log record: absl's INFO is hidden by default and notebooks show
  stderr, so the warning is seen wherever a server starts.

  Args:
    port: the server's port.

  Returns:
    True if this call printed it, False if the process had already warned.
  """
  global _warned
  if _warned:
    return False
  _warned = True
  text = exposure_warning(port)
  logging.info('%s', text)  # also into a program's absl log file
  print(f'WARNING: {text}', file=sys.stderr, flush=True)
  return True


def _bind_fails(family: int, host: str, port: int) -> bool:
  """Whether binding `host:port` fails because the address is taken."""
  try:
    sock = socket.socket(family, socket.SOCK_STREAM)
  except OSError:  # no IPv6 (or IPv4) on this host: nothing can listen there
    return False
  with sock:
    if family == socket.AF_INET6:
      # Our own probe must cover only IPv6 so the IPv4 probe is separate.
      sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    # SO_REUSEADDR, as gRPC sets it: a restarted server's port, still holding the last
    # run's connections in TIME_WAIT, is free (Linux refuses it only while a socket
    # listens there). Deliberately no SO_REUSEPORT: a listener that set it (gRPC does)
    # would otherwise share the port with the probe and look free.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      sock.bind((host, port))
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        return True
      if e.errno == errno.EADDRNOTAVAIL:  # the family is not configured here
        return False
      raise
  return False


def check_port_free(port: int, flag: str = '--port') -> None:
  """Raises PortInUseError unless `port` is free on the IPv4 and IPv6 wildcards.

  Args:
    port: the port a Reverb server will listen on (0 means 'pick one': not checked).
    flag: the flag or argument that gave it, for the message.

  Raises:
    PortInUseError: something listens on it.
  """
  if not port:
    return
  for family, host, name in ((socket.AF_INET, '0.0.0.0', 'IPv4'),
                             (socket.AF_INET6, '::', 'IPv6')):
    if _bind_fails(family, host, port):
      raise PortInUseError(
          f'port {port} is already in use ({name} *:{port} is taken, e.g. by another '
          f'Reverb server; pass another {flag} or {flag}=0 for a free one)')


@contextlib.contextmanager
def reserved_port(port: int = 0) -> Iterator[int]:
  """Holds `port` (0: a free one the kernel picks) until the block's server listens.

  A port picked and released before the server binds it can be picked by another
  process in between, and since gRPC listens with SO_REUSEPORT both servers then start
  and share it (clients reach either). The held socket is bound with SO_REUSEADDR and
  never listens: Linux lets gRPC's listener (SO_REUSEADDR too) bind beside it, while
  another process asking the kernel for a free port never gets one a socket holds.

  Args:
    port: the port to hold; 0 picks one (IPv4 and IPv6, dual-stack where the host has
      IPv6).

  Yields:
    The held port.

  Raises:
    PortInUseError: something listens on `port` already.
  """
  try:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    host = '::'
  except OSError:  # no IPv6 on this host
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    host = '0.0.0.0'
  with sock:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      sock.bind((host, port))
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        raise PortInUseError(f'port {port} is already in use') from e
      raise
    yield sock.getsockname()[1]

"""Ports for tests that hand a port to a server started later, or to nobody.

`portpicker` asks the kernel (bind to port 0), which answers from the ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 here), the range every embedded
`ReplayServer` in the other pytest lane also picks from. A port picked here and started
on seconds later (a server subprocess) could meanwhile go to that lane's server; gRPC
would then share it (SO_REUSEPORT) or the subprocess would refuse it. Ports below the
ephemeral range are never handed out by the kernel, so only another pick from here
could collide.
"""
import random
import socket

_LOW, _HIGH = 20000, 32767  # below Linux's default ephemeral range
_picked = set()  # this process's picks, never handed out twice


def free_port() -> int:
  """A port below the ephemeral range that nothing is bound to right now."""
  rng = random.Random()
  for _ in range(1000):
    port = rng.randint(_LOW, _HIGH)
    if port in _picked:
      continue
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
      sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
      try:
        sock.bind(('::', port))
      except OSError:
        continue
    _picked.add(port)
    return port
  raise RuntimeError(f'no free port in {_LOW}-{_HIGH} after 1000 tries')

"""Loopback port allocation for tests, benchmarks and rollouts that start services."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000
"""Ports below it are left alone (well-known and registered services)."""

_given: set[int] = set()
"""Ports this process has handed out: one is never handed out twice before its service binds it."""
_rng = random.Random()


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), or None where it cannot be read."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port free at the time of the call, for a service that binds it soon after.

    On Linux it comes from below the kernel's ephemeral range: a port from that range can be taken as
    the local end of any outgoing connection between this call and the service's bind (the stack's own
    gRPC channels included: issue 31, `Address already in use` on a loaded machine). Elsewhere, or if
    no port below the range is free, the OS picks one."""
    low = _ephemeral_low()
    if low is not None and low - LOWEST_PORT >= 1000:
        for _ in range(200):
            port = _rng.randrange(LOWEST_PORT, low)
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _given.add(port)
    return port

"""Loopback port allocation for tests, benchmarks and rollouts that start services."""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000
"""Ports below it are left alone (well-known and registered services)."""

RESERVATIONS_FILE = Path(tempfile.gettempdir()) / "hetflow-ports.lock"
"""One byte per port, locked (POSIX record locks) by the process that handed the port out, until it
exits: two processes on one host, two test runs side by side included, never hand out the same port."""

_given: set[int] = set()
"""Ports this process has handed out: one is never handed out twice before its service binds it."""
_rng = random.Random()
_reservations_fd: int | None = None


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), or None where it cannot be read."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _reservations() -> int | None:
    """This process's descriptor of ``RESERVATIONS_FILE``, opened once and never closed (closing any
    descriptor of the file would drop every lock this process holds on it); None where it cannot be
    opened (another user's file, a read-only temporary directory)."""
    global _reservations_fd
    if _reservations_fd is None:
        try:
            _reservations_fd = os.open(RESERVATIONS_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return None
    return _reservations_fd


def reserve(port: int) -> bool:
    """Whether ``port`` is now this process's on this host: False while another live process holds it.
    Where the reservations file cannot be opened, every port counts as reserved (the bind check stays)."""
    fd = _reservations()
    if fd is None:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError:
        return False
    return True


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
    gRPC channels included: issue 31, `Address already in use` on a loaded machine). It is reserved for
    this process until it exits (``reserve``), so another process on the host, a second test run
    included, is never handed it too. Elsewhere, or if no port below the range is free, the OS picks one."""
    low = _ephemeral_low()
    if low is not None and low - LOWEST_PORT >= 1000:
        for _ in range(200):
            port = _rng.randrange(LOWEST_PORT, low)
            if port not in _given and _bindable(port) and reserve(port):
                _given.add(port)
                return port
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given and reserve(port):
            break
    _given.add(port)
    return port

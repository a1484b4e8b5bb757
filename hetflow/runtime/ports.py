"""Loopback port allocation for tests and benchmarks that start services."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port free at the time of the call (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

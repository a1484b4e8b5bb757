"""Ports for services started by tests and benchmarks: free, distinct, and never from the range the
kernel hands out for outgoing connections (where one could be taken before the service binds it)."""

import socket
import subprocess
import sys

from hetflow.runtime import ports


def test_ports_are_free_distinct_and_below_the_ephemeral_range():
    low = ports._ephemeral_low()
    given = [ports.free_port() for _ in range(50)]
    assert len(set(given)) == 50
    for port in given:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: binds
        if low is not None:
            assert ports.LOWEST_PORT <= port < low


def test_a_port_taken_is_not_handed_out(monkeypatch):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    taken = holder.getsockname()[1]
    picks = iter([taken, taken])
    monkeypatch.setattr(ports._rng, "randrange", lambda a, b: next(picks, a + 7))
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: ports.LOWEST_PORT + 5000)
    try:
        port = ports.free_port()
    finally:
        holder.close()
    assert port != taken


def test_a_port_another_process_was_handed_is_not_handed_out_until_that_process_exits():
    """Two test runs side by side on one host (docs/reliability.md, "Address already in use")."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from hetflow.runtime import ports; "
         "print(ports.free_port(), flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        assert not ports.reserve(port)
    finally:
        holder.communicate("")
    assert ports.reserve(port)

"""How long a call waited before the server's handler took it: the wait in the transport and in gRPC's
own queue of calls the event loop has not yet accepted, which the handler cannot see otherwise.

gRPC Python's asyncio server accepts one call per turn of its event loop; a loop busy relaying tokens
takes new calls late, and a call refused only once it is taken is refused late (docs/reliability.md:
a median of 13-20 s under 3x overload, the loop itself no more than 6 ms late). A client that sets a
deadline sends it as it set it (``SENT_TIMEOUT_KEY``, in milliseconds); gRPC sends the time left of it
(``grpc-timeout``), which the server reads as ``context.time_remaining()``. The difference is the wait,
on one clock (the client's deadline), whatever the two hosts' clocks say. A call gRPC's own retry
policy sent again (gRFC A6's ``grpc-previous-rpc-attempts``) carries the first attempt's deadline, so
its wait is not known.
"""

from __future__ import annotations

from typing import Sequence

SENT_TIMEOUT_KEY = "hetflow-timeout-ms"
PREVIOUS_ATTEMPTS_KEY = "grpc-previous-rpc-attempts"


def sent_timeout(timeout_s: float | None) -> tuple[tuple[str, str], ...]:
    """The metadata a client adds to a call it sends with ``timeout_s`` (none without one)."""
    return () if timeout_s is None else ((SENT_TIMEOUT_KEY, str(max(0, round(timeout_s * 1e3)))),)


def accept_wait_s(metadata: Sequence[tuple[str, str | bytes]], time_remaining_s: float | None) -> float | None:
    """How long the call waited between its client's send and its handler's start, in seconds; None when
    not known (no sent timeout, no deadline, or an attempt after the first)."""
    if time_remaining_s is None:
        return None
    sent_ms = None
    for key, value in metadata:
        if key == PREVIOUS_ATTEMPTS_KEY:
            return None
        if key == SENT_TIMEOUT_KEY and isinstance(value, str):
            try:
                sent_ms = float(value)
            except ValueError:
                return None
    return max(0.0, sent_ms / 1e3 - time_remaining_s) if sent_ms is not None else None

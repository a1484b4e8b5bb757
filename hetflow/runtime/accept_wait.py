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

A message on a long-lived stream (``Balancer.DecideStream``) has no deadline of its own to read: it
carries when it was sent, in seconds since its client opened the stream, and ``StreamWaits`` reads its
wait as LEDBAT reads a one-way delay (RFC 6817, section 2.3): the gap between send and read less the
least gap seen lately on the stream, which stands for no wait, so the hosts' clocks need not agree.
"""

from __future__ import annotations

import collections
from typing import Sequence

SENT_TIMEOUT_KEY = "hetflow-timeout-ms"
PREVIOUS_ATTEMPTS_KEY = "grpc-previous-rpc-attempts"


def sent_timeout(timeout_s: float | None, connected: bool = True) -> tuple[tuple[str, str], ...]:
    """The metadata a client adds to a call it sends with ``timeout_s`` (none without one, nor on a channel
    not ``connected`` yet: gRPC sends the call's headers, and its time left, once the channel has
    connected, so the call's wait would hold the connecting)."""
    if timeout_s is None or not connected:
        return ()
    return ((SENT_TIMEOUT_KEY, str(max(0, round(timeout_s * 1e3)))),)


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


class StreamWaits:
    """How long each message of one stream waited between its client's send and the handler's read.

    The gap between the two (the server's seconds since the stream started, less the client's seconds
    since it opened it) holds the clocks' offset, the transport's delay and the wait; its base, the least
    gap of the last ``BASE_HISTORY`` minutes (RFC 6817's base delay: one minimum per minute, so the two
    clocks' drift over hours cannot pass for a wait), holds the first two, and what is above it is the
    wait. A stream whose every message waited reads its shortest wait as none."""

    BASE_HISTORY = 10

    def __init__(self, started_s: float) -> None:
        """``started_s``: when the stream's handler started, on the clock ``wait_s`` is given."""
        self._started_s = started_s
        self._minute_minima: collections.deque[tuple[int, float]] = collections.deque()

    def wait_s(self, sent_after_s: float, read_s: float) -> float | None:
        """The wait of a message sent ``sent_after_s`` after its client opened the stream and read at
        ``read_s``; None when it did not say when it was sent (0)."""
        if sent_after_s <= 0:
            return None
        gap_s = read_s - self._started_s - sent_after_s
        minute = int((read_s - self._started_s) // 60)
        if self._minute_minima and self._minute_minima[-1][0] == minute:
            if gap_s < self._minute_minima[-1][1]:
                self._minute_minima[-1] = (minute, gap_s)
        else:
            self._minute_minima.append((minute, gap_s))
            while self._minute_minima[0][0] <= minute - self.BASE_HISTORY:
                self._minute_minima.popleft()
        return gap_s - min(least for _, least in self._minute_minima)

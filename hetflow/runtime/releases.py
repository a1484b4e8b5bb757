"""Ending a call's entry in the monitor (Chimera Algorithm 1: the in-flight map loses the request), as
whoever saw the call end sends it: the balancer on the relay path, the engine on the direct path."""

from __future__ import annotations

import asyncio

import grpc

from hetflow.runtime.logs import get_logger
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)
RELEASE_ATTEMPTS = 3
RELEASE_BEFORE_END_S = 0.5
"""How long a call's last chunk waits for its release to reach the monitor (``released_before_end``)."""


async def release(monitor: monitor_pb2_grpc.MonitorStub, request_id: str, output_tokens: int, outcome: str,
                  started_unix_s: float, timeout_s: float) -> None:
    """``Complete`` when the call finished (``outcome`` "completed"), else ``Cancel`` with the outcome as
    reason; a few tries. The monitor's orphan reconciliation removes an entry none of them reached once
    its engine stops reporting the call."""
    msg = monitor_pb2.ReleaseRequest(request_id=request_id, output_tokens=output_tokens, reason=outcome,
                                     started_unix_s=started_unix_s)
    method = monitor.Complete if outcome == "completed" else monitor.Cancel
    for attempt in range(RELEASE_ATTEMPTS):
        try:
            await method(msg, timeout=timeout_s)
            return
        except grpc.aio.AioRpcError as exc:
            log.warning("release_failed", request_id=request_id, attempt=attempt, code=exc.code().name)
            await asyncio.sleep(0.2 * (attempt + 1))


async def released_before_end(release_task: asyncio.Task[None], budget_s: float = RELEASE_BEFORE_END_S) -> None:
    """Wait for a finished call's release before its last chunk goes to its caller, at most ``budget_s``:
    the caller's next call of the program is then decided on a monitor that knows this one ended (its
    stage position, Kairos 4.2, would otherwise join this call's stage). A monitor that does not answer
    in time gets the release in the background, as before; the wait does not cancel it."""
    await asyncio.wait({release_task}, timeout=budget_s)

"""Ending a call's entry in the monitor (Chimera Algorithm 1: the in-flight map loses the request), as
whoever saw the call end sends it: the balancer on the relay path, the engine on the direct path."""

from __future__ import annotations

import asyncio
from typing import Callable, Sequence

import grpc

from hetflow.runtime.batch_streams import BatchStream
from hetflow.runtime.coalescing import Coalescer, WrongAnswerCount, rejected
from hetflow.runtime.logs import get_logger
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)
RELEASE_ATTEMPTS = 3
BATCH_ITEMS = 64
"""Releases one message carries, at most (the monitor takes up to 256)."""
RELEASE_BEFORE_END_S = 0.5
"""How long a call's last chunk waits for its release to reach the monitor (``released_before_end``)."""


class MonitorReleases:
    """Releases sent to the monitor, those of one event-loop turn together (``hetflow.runtime.coalescing``)
    as one message on one long-lived stream (``ReleaseStream``, ``hetflow.runtime.batch_streams``), or
    call by call by ``Complete`` and ``Cancel`` to a monitor without the stream; ``monitor`` gives the
    current stub."""

    def __init__(self, monitor: Callable[[], monitor_pb2_grpc.MonitorStub], timeout_s: float) -> None:
        self._monitor, self._timeout_s = monitor, timeout_s
        self._stream: BatchStream[monitor_pb2.ReleaseBatchRequest, monitor_pb2.ReleaseBatchReply] = BatchStream(
            lambda: self._monitor().ReleaseStream(), "monitor.ReleaseStream", timeout_s)
        self._batches: Coalescer[monitor_pb2.ReleaseRequest, monitor_pb2.ReleaseReply] = Coalescer(
            self._send, BATCH_ITEMS, "monitor.ReleaseStream", rejected)

    async def release(self, request_id: str, output_tokens: int, outcome: str, started_unix_s: float) -> None:
        """Complete the call when it finished (``outcome`` "completed"), else cancel it with the outcome as
        reason; a few tries. The monitor's orphan reconciliation removes an entry none of them reached
        once its engine stops reporting the call."""
        msg = monitor_pb2.ReleaseRequest(request_id=request_id, output_tokens=output_tokens, reason=outcome,
                                         started_unix_s=started_unix_s)
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                await self._batches.ask(msg)
                return
            except grpc.aio.AioRpcError as exc:
                log.warning("release_failed", request_id=request_id, attempt=attempt, code=exc.code().name)
            except WrongAnswerCount as exc:  # the monitor's batch reply could not be matched to its releases
                log.warning("release_failed", request_id=request_id, attempt=attempt, error=str(exc))
            await asyncio.sleep(0.2 * (attempt + 1))

    async def close(self) -> None:
        await self._stream.close()

    async def _send(self, releases: list[monitor_pb2.ReleaseRequest]) -> Sequence[monitor_pb2.ReleaseReply]:
        reply = await self._stream.ask_or(monitor_pb2.ReleaseBatchRequest(releases=releases),
                                          lambda: self._one_by_one(releases))
        return reply.replies

    async def _one_by_one(self, releases: list[monitor_pb2.ReleaseRequest]) -> monitor_pb2.ReleaseBatchReply:
        """``Complete`` or ``Cancel`` for each release, as a monitor without the stream is asked."""
        monitor = self._monitor()
        return monitor_pb2.ReleaseBatchReply(replies=await asyncio.gather(*(
            (monitor.Complete if r.reason == "completed" else monitor.Cancel)(r, timeout=self._timeout_s)
            for r in releases)))


async def released_before_end(release_task: asyncio.Task[None], budget_s: float = RELEASE_BEFORE_END_S) -> None:
    """Wait for a finished call's release before its last chunk goes to its caller, at most ``budget_s``:
    the caller's next call of the program is then decided on a monitor that knows this one ended (its
    stage position, Kairos 4.2, would otherwise join this call's stage). A monitor that does not answer
    in time gets the release in the background, as before; the wait does not cancel it."""
    await asyncio.wait({release_task}, timeout=budget_s)

"""The engine's side of the direct path (issue 34): it ends the monitor's entry of each call it streamed
to its caller itself, and tells a restarted monitor those still running.

On the relay path the balancer sees every call end and releases it. On the direct path the tokens go
from the engine to the caller, so completion, cancellation and failure reach the monitor from here,
without the balancer in the stream. The balancer admitted the call when it decided it and handed the
admit to the engine inside the ticketed request; a monitor that restarts (a new epoch in the reply to
a status report) is told the running calls again, as a balancer tells it its relayed ones.
"""

from __future__ import annotations

import asyncio

import grpc

from hetflow.runtime.channels import open_channel
from hetflow.runtime.logs import get_logger
from hetflow.runtime.releases import MonitorReleases
from hetflow.runtime.security import SecurityConfig
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)
MONITOR_TIMEOUT_S = 2.0
"""Each call to the monitor: a start's admit, a retelling, an end's release."""


class MonitorLink:
    def __init__(self, monitor_address: str, security: SecurityConfig | None) -> None:
        self._address, self._security = monitor_address, security
        self._channel: grpc.aio.Channel | None = None
        self.running: dict[str, monitor_pb2.AdmitRequest] = {}
        """Direct-path calls running here -> the monitor's entry for each, as the balancer admitted it."""
        self._told_epoch = ""
        """The epoch whose monitor knows every running call: the first one seen (the balancer admitted
        them to it), or one a retelling reached the end of."""
        self._retelling: asyncio.Task[None] | None = None
        self._releases = MonitorReleases(lambda: self._monitor, MONITOR_TIMEOUT_S)

    @property
    def _monitor(self) -> monitor_pb2_grpc.MonitorStub:
        if self._channel is None:
            self._channel = open_channel(self._address, self._security)
        return monitor_pb2_grpc.MonitorStub(self._channel)

    def started(self, request_id: str, admit: monitor_pb2.AdmitRequest) -> None:
        self.running[request_id] = admit

    async def ended(self, request_id: str, output_tokens: int, outcome: str, started_unix_s: float) -> None:
        """Remove the call's entry (``hetflow.runtime.releases``)."""
        self.running.pop(request_id, None)
        await self._releases.release(request_id, output_tokens, outcome, started_unix_s)

    def monitor_answered(self, epoch: str) -> None:
        """A status report's reply named the monitor's epoch: a new one (after the first) started with
        nothing in flight, so it is told this engine's direct-path calls again, at each reply until a
        retelling reaches its end (the monitor takes a call it knows as it is)."""
        if not epoch:
            return
        if not self._told_epoch or not self.running:
            self._told_epoch = epoch
        elif epoch != self._told_epoch and (self._retelling is None or self._retelling.done()):
            self._retelling = asyncio.get_running_loop().create_task(self._retell(epoch))

    async def _retell(self, epoch: str) -> None:
        told = 0
        for request_id, admit in list(self.running.items()):
            again = monitor_pb2.AdmitRequest()
            again.CopyFrom(admit)
            again.reregister = True
            try:
                await self._monitor.Admit(again, timeout=MONITOR_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:  # told again from the start at the next reply
                log.warning("reregister_failed", code=exc.code().name, details=exc.details(), told=told)
                return
            if request_id not in self.running:  # ended meanwhile: its release may have come first
                await self.ended(request_id, 0, "cancelled", 0.0)
                continue
            told += 1
        self._told_epoch = epoch
        log.info("direct_calls_reregistered", count=told, epoch=epoch)

    async def close(self) -> None:
        if self._retelling is not None:
            self._retelling.cancel()
        await self._releases.close()
        if self._channel is not None:
            await self._channel.close()

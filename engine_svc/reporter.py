"""Pushes the engine's status to the monitor at a fixed interval (engine -> monitor)."""

from __future__ import annotations

import asyncio
from typing import Callable

import grpc

from hetflow.runtime.channels import open_channel
from hetflow.runtime.logs import get_logger
from hetflow.runtime.security import SecurityConfig
from hetflow.v1 import common_pb2, monitor_pb2_grpc

log = get_logger(__name__)


class StatusReporter:
    def __init__(self, monitor_address: str, interval_s: float, status: Callable[[], common_pb2.EngineStatus],
                 security: SecurityConfig | None = None, on_epoch: Callable[[str], None] | None = None) -> None:
        self._address, self._interval_s, self._status = monitor_address, interval_s, status
        self._security = security
        self._on_epoch = on_epoch
        """Told the monitor's epoch from each reply (``MonitorLink.monitor_answered``)."""
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None

    def start(self) -> None:
        self._channel = open_channel(self._address, self._security)
        self._task = asyncio.get_running_loop().create_task(self._run_forever())

    async def report_now(self) -> None:
        assert self._channel is not None
        reply = await monitor_pb2_grpc.MonitorStub(self._channel).ReportEngineStatus(self._status(), timeout=2.0)
        if self._on_epoch is not None:
            self._on_epoch(reply.monitor_epoch)

    async def close(self, final_report: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if final_report and self._channel is not None:
            try:
                await self.report_now()  # serving=False by now: the monitor stops routing here
            except grpc.aio.AioRpcError:
                pass
        if self._channel is not None:
            await self._channel.close()

    async def _run_forever(self) -> None:
        failures = 0
        while True:
            try:
                await self.report_now()
                if failures:
                    log.info("monitor_reachable_again", address=self._address)
                failures = 0
            except grpc.aio.AioRpcError as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("monitor_report_failed", address=self._address, code=exc.code().name,
                                failures=failures)
            await asyncio.sleep(self._interval_s)

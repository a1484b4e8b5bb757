"""Pushes the engine's status to the monitor (engine -> monitor): looked at every interval, sent when it
changed since the last one sent, and at least every heartbeat, so a quiet engine costs the monitor
little and still reads as alive (under the monitor's ``engine_stale_after_s``). The reports travel on
one long-lived stream (``Monitor.ReportStream``), by the unary method to a monitor without it."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import grpc

from hetflow.runtime.batch_streams import BatchStream
from hetflow.runtime.channels import open_channel
from hetflow.runtime.logs import get_logger
from hetflow.runtime.security import SecurityConfig
from hetflow.v1 import common_pb2, monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)

REPORT_TIMEOUT_S = 2.0
"""Longest wait for the monitor's answer to one report."""


class StatusReporter:
    def __init__(self, monitor_address: str, interval_s: float, status: Callable[[], common_pb2.EngineStatus],
                 security: SecurityConfig | None = None, on_epoch: Callable[[str], None] | None = None,
                 heartbeat_s: float | None = None) -> None:
        """``interval_s``: how often the status is looked at; ``heartbeat_s``: the longest time between two
        reports, changed or not (None: every look is sent)."""
        if heartbeat_s is not None and heartbeat_s < interval_s:
            raise ValueError(f"report heartbeat {heartbeat_s}s is shorter than the report interval {interval_s}s")
        self._address, self._interval_s, self._status = monitor_address, interval_s, status
        self._configured_heartbeat_s = self._heartbeat_s = heartbeat_s
        self._last_sent: tuple[common_pb2.EngineStatus, float] | None = None
        """The last status sent (its report time cleared) and when (monotonic s)."""
        self._security = security
        self._on_epoch = on_epoch
        """Told the monitor's epoch from each reply (``MonitorLink.monitor_answered``)."""
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._monitor: monitor_pb2_grpc.MonitorStub | None = None
        self._reports: BatchStream[common_pb2.EngineStatus, monitor_pb2.ReportReply] = BatchStream(
            lambda: self._stub().ReportStream(), "monitor.ReportStream", REPORT_TIMEOUT_S)

    def start(self) -> None:
        self._channel = open_channel(self._address, self._security)
        self._monitor = monitor_pb2_grpc.MonitorStub(self._channel)
        self._task = asyncio.get_running_loop().create_task(self._run_forever())

    def _stub(self) -> monitor_pb2_grpc.MonitorStub:
        assert self._monitor is not None
        return self._monitor

    async def report_now(self, status: common_pb2.EngineStatus | None = None) -> None:
        status = status if status is not None else self._status()
        reply = await self._reports.ask_or(
            status, lambda: self._stub().ReportEngineStatus(status, timeout=REPORT_TIMEOUT_S))
        self.sent(status, time.monotonic())
        self.monitor_stale_after(reply.engine_stale_after_s)
        if self._on_epoch is not None:
            self._on_epoch(reply.monitor_epoch)

    def monitor_stale_after(self, stale_after_s: float) -> None:
        """The monitor counts an engine unhealthy once it has not heard from it for ``stale_after_s`` (0: it
        did not say): the heartbeat stays under half of that, whatever was configured, so a quiet engine
        never reads as gone between two heartbeats (at least one look, ``interval_s``, apart)."""
        if stale_after_s > 0 and self._configured_heartbeat_s is not None:
            self._heartbeat_s = max(self._interval_s, min(self._configured_heartbeat_s, stale_after_s / 2))

    @property
    def heartbeat_s(self) -> float | None:
        """The longest time between two reports now (the configured one, or under half the monitor's
        staleness: ``monitor_stale_after``)."""
        return self._heartbeat_s

    def sent(self, status: common_pb2.EngineStatus, at_s: float) -> None:
        """The monitor took ``status`` at ``at_s`` (monotonic s)."""
        self._last_sent = (_without_time(status), at_s)

    def due(self, status: common_pb2.EngineStatus, now_s: float) -> bool:
        """Whether ``status`` goes to the monitor now: it changed since the last report, or the heartbeat
        is due (always, without a heartbeat)."""
        if self._heartbeat_s is None or self._last_sent is None:
            return True
        last, sent_s = self._last_sent
        return now_s - sent_s >= self._heartbeat_s or _without_time(status) != last

    async def close(self, final_report: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if final_report and self._channel is not None:
            try:
                await self.report_now()  # serving=False by now: the monitor stops routing here
            except grpc.aio.AioRpcError:
                pass
        await self._reports.close()
        if self._channel is not None:
            await self._channel.close()

    async def _run_forever(self) -> None:
        failures = 0
        while True:
            status = self._status()
            if not self.due(status, time.monotonic()):
                await asyncio.sleep(self._interval_s)
                continue
            try:
                await self.report_now(status)
                if failures:
                    log.info("monitor_reachable_again", address=self._address)
                failures = 0
            except grpc.aio.AioRpcError as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("monitor_report_failed", address=self._address, code=exc.code().name,
                                failures=failures)
            await asyncio.sleep(self._interval_s)


def _without_time(status: common_pb2.EngineStatus) -> common_pb2.EngineStatus:
    """The status without its report time: what tells whether anything changed."""
    copy = common_pb2.EngineStatus()
    copy.CopyFrom(status)
    copy.ClearField("reported_unix_s")
    return copy

"""Assemble the monitor service."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Sequence

from hetflow.core.monitor.state import MonitorState
from hetflow.runtime.logs import get_logger
from hetflow.runtime.server import Registration
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc
from monitor_svc.config import MonitorConfig
from monitor_svc.servicer import MonitorServicer

log = get_logger(__name__)
SERVICE_NAME = monitor_pb2.DESCRIPTOR.services_by_name["Monitor"].full_name


def build(cfg: MonitorConfig) -> tuple[
        MonitorServicer, Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]]:
    servicer = MonitorServicer(MonitorState(cfg.limits), cfg.watch_interval_s)

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        tasks = [asyncio.get_running_loop().create_task(every(interval_s, job)) for interval_s, job in (
            (cfg.sweep_interval_s, servicer.sweep), (cfg.agent_priority_interval_s, servicer.refresh_anchor_distances))]

        async def close() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        return [Registration(monitor_pb2_grpc.add_MonitorServicer_to_server, servicer, SERVICE_NAME)], close

    return servicer, setup


async def every(interval_s: float, job: Callable[[], None]) -> None:
    """``job`` every ``interval_s`` until cancelled; a turn that fails is logged, and the next one runs."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            job()
        except Exception:  # noqa: BLE001 - one failed sweep must not end every later one
            log.exception("monitor_job_failed", job=getattr(job, "__name__", repr(job)))

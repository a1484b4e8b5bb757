"""Assemble the monitor service."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Sequence

from hetflow.core.monitor.state import MonitorState
from hetflow.runtime.server import Registration
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc
from monitor_svc.config import MonitorConfig
from monitor_svc.servicer import MonitorServicer

SERVICE_NAME = monitor_pb2.DESCRIPTOR.services_by_name["Monitor"].full_name


def build(cfg: MonitorConfig) -> tuple[
        MonitorServicer, Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]]:
    servicer = MonitorServicer(MonitorState(cfg.limits), cfg.watch_interval_s)

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        async def sweep_forever() -> None:
            while True:
                await asyncio.sleep(cfg.sweep_interval_s)
                servicer.sweep()

        async def refresh_forever() -> None:
            while True:
                await asyncio.sleep(cfg.agent_priority_interval_s)
                servicer.refresh_anchor_distances()

        tasks = [asyncio.get_running_loop().create_task(job()) for job in (sweep_forever, refresh_forever)]

        async def close() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        return [Registration(monitor_pb2_grpc.add_MonitorServicer_to_server, servicer, SERVICE_NAME)], close

    return servicer, setup

"""The engines' views kept in the balancer from the monitor's stream of changes (``Monitor.WatchEngines``).

With a live watch, a decision asks the monitor only for its call's own part (``without_engines``) and
takes the engines from here: the monitor does not build and send sixteen views per decision, nor the
balancer read them (issue 63). The views lag the monitor by at most its watch interval; this balancer's
own admits since count on top (``PendingAdmits``, by the changes' ``admit_seq``), and the room another
balancer took meanwhile is checked by the conditional admit (``hetflow.core.room``). A watch that broke,
or that went silent for ``STALE_S``, is not used: decisions then ask for whole snapshots, with every
fallback of ``MonitorView``, while it opens again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

import grpc

from hetflow import wire
from hetflow.core.snapshot import EngineView
from hetflow.runtime.logs import get_logger
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)
STALE_S = 1.0
"""A watch without a message for this long is not used (the monitor sends one at least every 0.25 s)."""
RETRY_S = 0.5
"""Wait before opening a broken watch again."""
UNIMPLEMENTED_RETRY_S = 60.0
"""Wait before asking a monitor without ``WatchEngines`` again (a new process may have it)."""


@dataclass(frozen=True)
class EngineFacts:
    """What a decision reads of an engine's report beside its view: whether it serves, its model server's
    endpoint (a gateway's subset) and how old the report is."""

    serving: bool
    serving_endpoint: str
    status_age_s: float
    """The report's age at ``as_of_s``."""
    as_of_s: float
    """Monotonic seconds."""

    def age_s(self, now_s: float) -> float:
        return self.status_age_s + max(0.0, now_s - self.as_of_s)


def facts_of(load: monitor_pb2.EngineLoad, now_s: float) -> EngineFacts:
    return EngineFacts(load.status.serving, load.status.serving_endpoint, load.status_age_s, now_s)


@dataclass(frozen=True)
class Watched:
    """The engines as the watch last heard, at the monitor's ``admit_seq`` of ``epoch``."""

    views: tuple[EngineView, ...]
    facts: dict[str, EngineFacts]
    admit_seq: int
    epoch: str
    healthy_count: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "healthy_count", sum(v.healthy for v in self.views))

    def agrees_with(self, msg: monitor_pb2.MonitorSnapshot) -> bool:
        """Whether these engines are the monitor's as its answer for a call counts them (the same process,
        as many engines, as many healthy): an engine that came, went, failed or recovered since the last
        message is seen by the decision that follows, not one watch interval later."""
        return (msg.monitor_epoch == self.epoch and msg.engine_count == len(self.views)
                and msg.healthy_engine_count == self.healthy_count)


class EngineWatch:
    """Follows ``Monitor.WatchEngines`` on a task of its own (``start``); ``current`` is what it holds."""

    def __init__(self, monitor: Callable[[], monitor_pb2_grpc.MonitorStub], in_flight_calls: bool,
                 profiles: wire.ProfileMemo) -> None:
        self._monitor, self._in_flight_calls, self._profiles = monitor, in_flight_calls, profiles
        self._views: dict[str, EngineView] = {}
        """By engine id, in the monitor's order (changed engines keep their place, new ones come last)."""
        self._facts: dict[str, EngineFacts] = {}
        self._admit_seq, self._epoch = 0, ""
        self._heard_s = -float("inf")
        """When the last message came (monotonic s); -inf while the watch is not open."""
        self._current: Watched | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def current(self, epoch: str) -> Watched | None:
        """The engines, when the watch is live and follows the monitor of ``epoch``; else None."""
        if self._epoch != epoch or time.monotonic() - self._heard_s > STALE_S or not self._views:
            return None
        if self._current is None:
            self._current = Watched(tuple(self._views.values()), dict(self._facts), self._admit_seq, self._epoch)
        return self._current

    def apply(self, changes: monitor_pb2.EngineChanges, now_s: float) -> None:
        """Take one message of the watch, received at ``now_s`` (monotonic)."""
        if changes.full:
            self._views.clear()
            self._facts.clear()
        for load in changes.engines:
            self._views[load.status.engine_id] = wire.engine_view_from_proto(load, self._profiles)
            self._facts[load.status.engine_id] = facts_of(load, now_s)
        for engine_id in changes.removed_engine_ids:
            self._views.pop(engine_id, None)
            self._facts.pop(engine_id, None)
        self._admit_seq, self._epoch, self._heard_s = changes.admit_seq, changes.monitor_epoch, now_s
        self._current = None

    async def _follow(self) -> None:
        while True:
            try:
                async for changes in self._monitor().WatchEngines(
                        monitor_pb2.WatchEnginesRequest(in_flight_calls=self._in_flight_calls)):
                    self.apply(changes, time.monotonic())
                wait_s = RETRY_S
            except grpc.aio.AioRpcError as exc:
                wait_s = UNIMPLEMENTED_RETRY_S if exc.code() == grpc.StatusCode.UNIMPLEMENTED else RETRY_S
                log.info("engine_watch_broken", code=exc.code().name, retry_s=wait_s)
            except Exception:  # noqa: BLE001 - a message it cannot take (an engine's profile, say): watched again
                wait_s = RETRY_S
                log.exception("engine_watch_failed", retry_s=wait_s)
            self._heard_s = -float("inf")
            await asyncio.sleep(wait_s)

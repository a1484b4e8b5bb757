"""The engines' loads as they change, for one watching balancer (``Monitor.WatchEngines``).

A balancer that asks for a snapshot per decision makes the monitor build and send every engine's view per
decision: at 16 engines that was most of the monitor's work and a tenth of the balancer's (issue 63). A
watching balancer instead keeps the views and is sent, at most once per watch interval, only the engines
whose load changed; the time-dependent fields (health against the report timeout, the memory ledger's
window, the programs still resident) are looked at again at least every ``REFRESH_S``. Between changes
the watch sleeps until the state changes or a refresh or heartbeat is due (``idle_for_s``), so an idle
monitor does not look fifty times a second.
"""

from __future__ import annotations

from hetflow import wire
from hetflow.core.monitor.snapshot import engine_views
from hetflow.core.monitor.state import EngineStatus, MonitorState
from hetflow.core.snapshot import EngineView
from hetflow.v1 import monitor_pb2

REFRESH_S = 0.1
"""The views are built again at least this often while nothing is admitted or released: health and the
ledger's window move with the clock alone, on the scale of seconds (an engine is unhealthy after 2 s
without a report; a decision whose own part counts other healthy engines than the watch takes the whole
snapshot)."""
HEARTBEAT_S = 0.25
"""A message at least this often, changed or not, so the balancer can tell a live watch from a stuck one."""


class EngineFeed:
    """What one watcher was last sent, and the next message it needs (``changes``)."""

    def __init__(self, in_flight_calls: bool) -> None:
        self.in_flight_calls = in_flight_calls
        self._sent: dict[str, tuple[EngineView, EngineStatus]] = {}
        """Each engine's view and report as last sent (its load is built only when either changed)."""
        self._built: tuple[int, float] | None = None
        """The state's version and the time (unix s) the views were last built at."""
        self._last_message_s = -float("inf")

    def changes(self, state: MonitorState, reports: wire.ReportProtos, now_s: float
                ) -> monitor_pb2.EngineChanges | None:
        """The message for this watcher at ``now_s``: every engine the first time, then the engines whose
        load changed and those removed; None while nothing changed and no heartbeat is due."""
        stale = self._built is None or self._built[0] != state.version or now_s - self._built[1] >= REFRESH_S
        if not stale and now_s - self._last_message_s < HEARTBEAT_S:
            return None
        full = self._built is None
        message = monitor_pb2.EngineChanges(taken_unix_s=now_s, admit_seq=state.admit_seq,
                                            monitor_epoch=state.epoch, full=full)
        if stale:
            self._built = (state.version, now_s)
            reports.keep_only(state.engines)
            for view in engine_views(state, now_s, self.in_flight_calls):
                record = state.engines[view.engine_id]
                if full or self._sent.get(view.engine_id) != (view, record.status):
                    self._sent[view.engine_id] = (view, record.status)
                    message.engines.append(wire.engine_load_to_proto(view, record, now_s, reports))
            removed = [engine_id for engine_id in self._sent if engine_id not in state.engines]
            for engine_id in removed:
                del self._sent[engine_id]
            message.removed_engine_ids.extend(removed)
        if not (full or message.engines or message.removed_engine_ids) and now_s - self._last_message_s < HEARTBEAT_S:
            return None
        self._last_message_s = now_s
        return message

    def idle_for_s(self, state: MonitorState, now_s: float) -> float:
        """How long the watch may sleep before its next look if nothing changes meanwhile: 0 when the state
        changed since the views were last built, else until a refresh or the heartbeat is due."""
        if self._built is None or self._built[0] != state.version:
            return 0.0
        return max(0.0, min(self._built[1] + REFRESH_S, self._last_message_s + HEARTBEAT_S) - now_s)

"""The engine's status reports: sent when the status changed, and at least every heartbeat, on one stream
(by the unary method to a monitor without it)."""

import grpc
import pytest

from engine_svc.reporter import StatusReporter
from hetflow.core.monitor.state import MonitorLimits, MonitorState
from hetflow.v1 import common_pb2, monitor_pb2_grpc
from monitor_svc.servicer import MonitorServicer
from tests.factories import add_servicer_without


def status(waiting: int, reported_unix_s: float) -> common_pb2.EngineStatus:
    return common_pb2.EngineStatus(engine_id="e0", model="m", waiting=waiting, reported_unix_s=reported_unix_s)


def test_an_unchanged_status_waits_for_the_heartbeat_and_a_changed_one_goes_at_once():
    reporter = StatusReporter("127.0.0.1:1", 0.5, lambda: status(0, 0.0), heartbeat_s=1.0)
    assert reporter.due(status(0, 1.0), now_s=10.0)                     # nothing sent yet
    reporter.sent(status(0, 0.0), at_s=10.0)
    assert not reporter.due(status(0, 2.0), now_s=10.5)                 # only its report time differs
    assert reporter.due(status(1, 2.0), now_s=10.5)                     # a call came in
    assert reporter.due(status(0, 3.0), now_s=11.0)                     # the heartbeat
    every_look = StatusReporter("127.0.0.1:1", 0.5, lambda: status(0, 0.0))
    every_look.sent(status(0, 0.0), at_s=10.0)
    assert every_look.due(status(0, 2.0), now_s=10.5)                   # no heartbeat: every look is sent


def test_a_heartbeat_shorter_than_the_interval_is_refused():
    with pytest.raises(ValueError, match="heartbeat"):
        StatusReporter("127.0.0.1:1", 0.5, lambda: status(0, 0.0), heartbeat_s=0.2)


class Recording(MonitorServicer):
    """Records each report it takes, and each report stream opened."""

    def __init__(self, state: MonitorState) -> None:
        super().__init__(state)
        self.streams_opened, self.waiting_seen = 0, []

    async def ReportEngineStatus(self, request, context):
        self.waiting_seen.append(request.waiting)
        return await super().ReportEngineStatus(request, context)

    async def ReportStream(self, requests, context):
        self.streams_opened += 1
        async for reply in super().ReportStream(requests, context):
            yield reply


@pytest.mark.parametrize("missing, streams", [((), 1), (("ReportStream",), 0)])
async def test_reports_go_on_one_stream_and_by_the_unary_method_to_a_monitor_without_it(missing, streams):
    state = MonitorState(MonitorLimits())
    servicer = Recording(state)
    server = grpc.aio.server()
    add_servicer_without(monitor_pb2_grpc.add_MonitorServicer_to_server, servicer, server, *missing)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    epochs: list[str] = []
    reporter = StatusReporter(f"127.0.0.1:{port}", 0.5, lambda: status(0, 0.0), on_epoch=epochs.append,
                              heartbeat_s=5.0)
    try:
        reporter.start()  # its loop reports too, beside the three below
        for waiting in (1, 2, 3):
            await reporter.report_now(status(waiting, float(waiting)))
    finally:
        await reporter.close(final_report=False)
        await server.stop(None)
    assert {1, 2, 3} <= set(servicer.waiting_seen) and set(epochs) == {state.epoch}
    assert servicer.streams_opened == streams
    assert reporter.heartbeat_s == state.limits.engine_stale_after_s / 2  # the monitor said its staleness


def test_the_heartbeat_stays_under_half_the_monitors_staleness_whatever_was_configured():
    reporter = StatusReporter("127.0.0.1:1", 0.2, lambda: status(0, 0.0), heartbeat_s=1.0)
    reporter.sent(status(0, 0.0), at_s=10.0)
    assert not reporter.due(status(0, 1.0), now_s=10.6)
    reporter.monitor_stale_after(1.0)             # a monitor that counts an engine gone after 1 s of silence
    assert reporter.due(status(0, 1.0), now_s=10.6)
    reporter.monitor_stale_after(10.0)            # a lenient one: the configured heartbeat holds
    assert not reporter.due(status(0, 1.0), now_s=10.6) and reporter.due(status(0, 1.0), now_s=11.0)
    reporter.monitor_stale_after(0.0)             # an older monitor, which does not say: unchanged
    assert not reporter.due(status(0, 1.0), now_s=10.6)
    reporter.monitor_stale_after(0.1)             # never below one look
    assert not reporter.due(status(0, 1.0), now_s=10.1) and reporter.due(status(0, 1.0), now_s=10.25)

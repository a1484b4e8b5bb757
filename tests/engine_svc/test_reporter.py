"""The engine's status reports: sent when the status changed, and at least every heartbeat."""

import pytest

from engine_svc.reporter import StatusReporter
from hetflow.v1 import common_pb2


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

"""The engine's direct-path calls told again to a restarted monitor, until a retelling reaches its end."""

from __future__ import annotations

import asyncio

import grpc

from engine_svc.monitor_link import MonitorLink
from hetflow.v1 import monitor_pb2


class _Monitor:
    """A monitor's Admit that refuses the first ``failures`` calls (a monitor busy after its restart)."""

    def __init__(self, failures: int) -> None:
        self.failures, self.told = failures, []

    async def Admit(self, request: monitor_pb2.AdmitRequest, timeout: float) -> monitor_pb2.AdmitReply:
        if self.failures:
            self.failures -= 1
            raise grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       "busy")
        assert request.reregister
        self.told.append(request.request_id)
        return monitor_pb2.AdmitReply()


class _Link(MonitorLink):
    def __init__(self, monitor: _Monitor) -> None:
        super().__init__("127.0.0.1:1", None)
        self.fake = monitor

    @property
    def _monitor(self):
        return self.fake


async def _answered(link: MonitorLink, epoch: str) -> None:
    link.monitor_answered(epoch)
    if link._retelling is not None:
        await link._retelling


async def test_a_retelling_that_fails_is_tried_again_at_the_next_reply_until_it_ends():
    monitor = _Monitor(failures=1)
    link = _Link(monitor)
    for request_id in ("a", "b"):
        link.started(request_id, monitor_pb2.AdmitRequest(request_id=request_id))
    await _answered(link, "epoch-1")   # the first: the balancer admitted both to it
    assert monitor.told == []
    await _answered(link, "epoch-2")   # restarted; its first Admit times out
    assert monitor.told == []
    await _answered(link, "epoch-2")   # the same epoch again: told now
    assert monitor.told == ["a", "b"]
    await _answered(link, "epoch-2")   # and not again
    assert monitor.told == ["a", "b"]
    await link.close()


async def test_a_monitor_restarted_while_nothing_runs_has_nothing_to_hear_later():
    monitor = _Monitor(failures=0)
    link = _Link(monitor)
    await _answered(link, "epoch-1")
    await _answered(link, "epoch-2")
    link.started("a", monitor_pb2.AdmitRequest(request_id="a"))   # admitted by the balancer to epoch-2
    await _answered(link, "epoch-2")
    await asyncio.sleep(0)
    assert monitor.told == []
    await link.close()

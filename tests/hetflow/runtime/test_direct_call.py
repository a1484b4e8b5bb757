"""A direct call's own bounds, without a stack: the model server's stream within the call's deadline, and
the balancer's relayed stream ended when its caller stops reading."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from hetflow.core.errors import DeadlineExceeded
from hetflow.runtime.direct_call import DirectCall
from hetflow.v1 import balancer_pb2, engine_pb2


def direct(balancer=None, timeout_s: float | None = 0.05) -> DirectCall:
    return DirectCall(balancer, lambda address: None, balancer_pb2.GenerateRequest(request_id="r1"),
                      timeout_s=timeout_s)


async def test_a_model_server_that_stalls_past_the_deadline_is_deadline_exceeded():
    async def stalled():
        await asyncio.sleep(3600)
        yield balancer_pb2.GenerateChunk()

    with pytest.raises(DeadlineExceeded, match="deadline"):
        await asyncio.wait_for(direct()._next_read(stalled()), 10)


async def test_a_relayed_stream_its_caller_stops_reading_is_cancelled():
    class Relay:
        cancelled = False

        def __aiter__(self):
            return self

        async def __anext__(self):
            return balancer_pb2.GenerateChunk(text="x")

        def cancel(self):
            Relay.cancelled = True

    class Balancer:
        def Generate(self, call, timeout, metadata):
            return Relay()

    relayed = direct(Balancer(), timeout_s=None)._relayed()
    assert (await anext(relayed)).text == "x"
    await relayed.aclose()
    assert Relay.cancelled


async def test_a_call_cancelled_as_its_engine_fails_is_not_decided_again():
    """The engine fails before the first token (decided again elsewhere, as a rule) just as the caller
    cancels: no second decision is asked for, which would be admitted for nobody."""
    from hetflow.runtime.interceptors import rpc_error

    decides: list[balancer_pb2.DecideRequest] = []

    class Balancer:
        async def Decide(self, decide, timeout, metadata):
            decides.append(decide)
            return balancer_pb2.DispatchDecision(engine_id="e0", engine_address="e0:1")

    class FailingStream:
        def __aiter__(self):
            return self

        async def __anext__(self):
            call.cancel()   # the caller gives up as the engine fails
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "engine gone")

        def cancel(self):
            pass

    class Engine:
        def Generate(self, request, timeout, metadata):
            return FailingStream()

    call = DirectCall(Balancer(), lambda address: Engine(), balancer_pb2.GenerateRequest(request_id="r1"))
    with pytest.raises(asyncio.CancelledError):
        await call.read()
    assert len(decides) == 1


async def test_an_engine_without_hold_streams_the_call_itself_and_its_failure_there_is_decided_again():
    """An engine that does not serve ``Hold`` (UNIMPLEMENTED: no model server) streams the same decision
    itself; when that stream fails before its first token, the call is decided again naming it, as any
    engine's failure is."""
    from hetflow.runtime.interceptors import rpc_error

    decides: list[balancer_pb2.DecideRequest] = []

    class Balancer:
        async def Decide(self, decide, timeout, metadata):
            decides.append(decide)
            engine = "e0" if len(decides) == 1 else "e1"
            return balancer_pb2.DispatchDecision(engine_id=engine, engine_address=f"{engine}:1")

    class NoHold:
        async def write(self, message):
            return None

        async def read(self):
            raise rpc_error(grpc.StatusCode.UNIMPLEMENTED, "Hold")

        def done(self):
            return True

        def cancel(self):
            pass

    class Stream:
        def __init__(self, fails: bool) -> None:
            self.fails, self.sent = fails, False

        def __aiter__(self):
            return self

        async def __anext__(self):
            if self.fails:
                raise rpc_error(grpc.StatusCode.UNAVAILABLE, "engine gone")
            if self.sent:
                raise StopAsyncIteration
            self.sent = True
            return engine_pb2.EngineChunk(text="hi", output_tokens=1, finished=True, finish_reason="stop")

        def cancel(self):
            pass

    class Engine:
        def __init__(self, address: str) -> None:
            self.address = address

        def Hold(self, timeout, metadata):
            return NoHold()

        def Generate(self, request, timeout, metadata):
            return Stream(fails=self.address == "e0:1")

    call = DirectCall(Balancer(), Engine, balancer_pb2.GenerateRequest(request_id="r1"),
                      model_server=object())  # type: ignore[arg-type]
    chunks = [c async for c in call]
    assert [c.text for c in chunks] == ["hi"]
    assert [list(d.failed) for d in decides] == [[], [balancer_pb2.FailedDispatch(
        engine_id="e0", code="UNAVAILABLE", details="engine gone")]]

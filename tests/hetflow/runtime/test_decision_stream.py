"""A decision stream's first message waits for the balancer's headers or the stream's end, a bounded while,
so a balancer without the stream is seen to answer UNIMPLEMENTED and its decisions go by ``Decide``."""

import asyncio
from types import SimpleNamespace

from hetflow.runtime import batch_streams, decision_stream
from hetflow.runtime.decision_stream import DecisionStream
from hetflow.v1 import balancer_pb2
from tests.factories import EndsUnimplemented


class Call:
    def __init__(self) -> None:
        self.written: list[str] = []
        self.headers = asyncio.Event()

    async def write(self, message: str) -> None:
        self.written.append(message)

    async def initial_metadata(self) -> tuple:
        await self.headers.wait()
        return ()


async def test_the_first_message_leaves_once_the_headers_come():
    call, outbox = Call(), asyncio.Queue()
    for message in ("first", "second"):
        outbox.put_nowait(message)
    writer = asyncio.ensure_future(decision_stream._write(call, outbox))
    for _ in range(5):
        await asyncio.sleep(0)
    assert call.written == []
    call.headers.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert call.written == ["first", "second"]
    writer.cancel()


async def test_a_balancer_that_sends_no_headers_yet_is_written_to_after_the_wait(monkeypatch):
    monkeypatch.setattr(batch_streams, "HEADERS_WAIT_S", 0.05)
    call, outbox = Call(), asyncio.Queue()
    for message in ("first", "second"):
        outbox.put_nowait(message)
    writer = asyncio.ensure_future(decision_stream._write(call, outbox))
    await asyncio.sleep(0.3)
    assert call.written == ["first", "second"]
    writer.cancel()


async def test_a_balancer_that_ends_the_stream_at_once_is_asked_by_decide():
    """Its end raced the first write, which made gRPC end the call INTERNAL and the decision fail UNAVAILABLE."""
    unary: list[balancer_pb2.DecideRequest] = []

    async def decide(request, timeout=None, metadata=None):
        unary.append(request)
        return balancer_pb2.DispatchDecision(engine_id="engine-a")

    stream = DecisionStream(SimpleNamespace(DecideStream=EndsUnimplemented, Decide=decide))
    try:
        decision = await stream.decide(balancer_pb2.DecideRequest(), timeout_s=5.0)
    finally:
        await stream.close()
    assert decision.engine_id == "engine-a" and len(unary) == 1 and not stream.supported


async def test_a_refused_decide_of_the_fallback_is_not_sent_again_here():
    """The channel's own retry policy sends a refused ``Decide`` again (as many times in all): sent again
    here too, a refusal went out the square of ``refusal_attempts`` times."""
    import grpc

    from hetflow.runtime.interceptors import rpc_error

    unary: list[balancer_pb2.DecideRequest] = []

    async def refused(request, timeout=None, metadata=None):
        unary.append(request)
        raise rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "full", retry_after_s=0.01)

    stream = DecisionStream(SimpleNamespace(DecideStream=EndsUnimplemented, Decide=refused), refusal_attempts=3)
    try:
        try:
            await stream.decide(balancer_pb2.DecideRequest(), timeout_s=5.0)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
    finally:
        await stream.close()
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and len(unary) == 1

"""Decisions on one stream (``Balancer.DecideStream``): each answered as it is decided, not in the order
sent; a failed, late or bad decision fails only itself with the status ``Decide`` would end with (a
refusal's retry delay included); a caller that stops waiting stops its decision at the balancer; and a
balancer without the stream is asked by ``Decide``."""

from __future__ import annotations

import asyncio
import math

import grpc

from balancer_svc.decide_stream import answer_decisions
from hetflow.client import build_request
from hetflow.core.errors import ResourceExhausted
from hetflow.runtime.batch_streams import checks_each_message
from hetflow.runtime.decision_stream import DecisionStream
from hetflow.runtime.interceptors import RETRY_PUSHBACK_KEY, ServiceInterceptor
from hetflow.runtime.message_checks import Undecodable
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc


class Decisions:
    """Decides by the call's prompt: "slow" once ``go_slow`` is set, "refused" with a 2 s retry hint,
    "forever" never (until cancelled, which it records); any other at once, onto an engine named after
    the prompt."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.started = asyncio.Event()
        self.go_slow = asyncio.Event()
        self.refusals = 0
        self.waits_s: dict[str, float | None] = {}

    async def decide(self, request: balancer_pb2.DecideRequest,
                     accept_wait_s: float | None = None) -> balancer_pb2.DispatchDecision:
        prompt = request.call.prompt
        self.waits_s[prompt] = accept_wait_s
        if prompt == "slow":
            await self.go_slow.wait()
        elif prompt == "refused":
            raise ResourceExhausted("the queue is full", retry_after_s=2.0)
        elif prompt == "refused-once" and not self.refusals:
            self.refusals += 1
            raise ResourceExhausted("the queue is full", retry_after_s=0.05)
        elif prompt == "forever":
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(request.call.request_id)
                raise
        return balancer_pb2.DispatchDecision(engine_id=f"engine-{prompt}")


class Balancer(balancer_pb2_grpc.BalancerServicer):
    def __init__(self, decisions: Decisions, streams: bool = True) -> None:
        self.decisions, self.streams, self.unary_decisions = decisions, streams, 0

    async def Decide(self, request, context):
        self.unary_decisions += 1
        return await self.decisions.decide(request)

    @checks_each_message
    async def DecideStream(self, requests, context):
        if not self.streams:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no DecideStream here")
        async for reply in answer_decisions(requests, self.decisions.decide):
            yield reply


async def _serve(balancer: Balancer) -> tuple[grpc.aio.Server, grpc.aio.Channel]:
    server = grpc.aio.server(interceptors=[ServiceInterceptor("balancer")])
    balancer_pb2_grpc.add_BalancerServicer_to_server(balancer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, grpc.aio.insecure_channel(f"127.0.0.1:{port}")


def _decide(prompt: str, request_id: str = "") -> balancer_pb2.DecideRequest:
    return balancer_pb2.DecideRequest(call=build_request(prompt=prompt, max_tokens=4, request_id=request_id))


async def test_each_decision_is_answered_as_decided_and_a_failed_or_late_one_fails_only_itself():
    decisions = Decisions()
    balancer = Balancer(decisions)
    server, channel = await _serve(balancer)
    stream = DecisionStream(balancer_pb2_grpc.BalancerStub(channel))
    try:
        slow = asyncio.ensure_future(stream.decide(_decide("slow")))
        quick, refused, late, bad = await asyncio.gather(
            stream.decide(_decide("quick")), stream.decide(_decide("refused")),
            stream.decide(_decide("forever"), timeout_s=0.2),
            stream.decide(balancer_pb2.DecideRequest(call=build_request(prompt="x", max_tokens=4,
                                                                        temperature=math.nan))),
            return_exceptions=True)
        answered_before_slow = not slow.done()  # the others were not held behind the one sent before them
        decisions.go_slow.set()
        slow_decision = await slow
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)
    assert answered_before_slow
    assert slow_decision.engine_id == "engine-slow" and quick.engine_id == "engine-quick"
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "queue is full" in refused.details()
    assert dict(refused.trailing_metadata())[RETRY_PUSHBACK_KEY] == "2000"
    assert late.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert balancer.unary_decisions == 0  # all on the one stream


async def test_a_caller_that_stops_waiting_stops_its_decision_at_the_balancer():
    decisions = Decisions()
    server, channel = await _serve(Balancer(decisions))
    stream = DecisionStream(balancer_pb2_grpc.BalancerStub(channel))
    try:
        waiting = asyncio.ensure_future(stream.decide(_decide("forever", request_id="left")))
        await asyncio.wait_for(decisions.started.wait(), 5)
        waiting.cancel()
        for _ in range(500):
            if decisions.cancelled:
                break
            await asyncio.sleep(0.01)
        after = await stream.decide(_decide("quick"))  # the stream goes on
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)
    assert decisions.cancelled == ["left"] and after.engine_id == "engine-quick"


async def test_a_refused_decision_is_sent_again_after_its_hint_as_many_times_as_the_client_allows():
    outcomes = []
    for attempts in (1, 2):
        decisions = Decisions()
        server, channel = await _serve(Balancer(decisions))
        stream = DecisionStream(balancer_pb2_grpc.BalancerStub(channel), refusal_attempts=attempts)
        try:
            outcomes.append(await asyncio.gather(stream.decide(_decide("refused-once"), timeout_s=30),
                                                 return_exceptions=True))
        finally:
            await stream.close()
            await channel.close()
            await server.stop(None)
    (once,), (twice,) = outcomes
    assert isinstance(once, grpc.aio.AioRpcError) and once.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert twice.engine_id == "engine-refused-once"


async def test_a_balancer_without_the_stream_is_asked_by_decide():
    balancer = Balancer(Decisions(), streams=False)
    server, channel = await _serve(balancer)
    stream = DecisionStream(balancer_pb2_grpc.BalancerStub(channel))
    try:
        first = await stream.decide(_decide("quick"))
        second = await stream.decide(_decide("other"))
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)
    assert (first.engine_id, second.engine_id) == ("engine-quick", "engine-other")
    assert balancer.unary_decisions == 2 and not stream.supported


async def test_the_end_of_the_requests_waits_for_the_decisions_under_way():
    decisions = Decisions()

    async def requests():
        yield balancer_pb2.DecideStreamRequest(tag=1, decide=_decide("slow"))
        yield balancer_pb2.DecideStreamRequest(tag=2, decide=_decide("quick"))
        yield balancer_pb2.DecideStreamRequest(tag=2, decide=_decide("again"))  # its tag is still deciding
        yield Undecodable("DecodeError: not a message")  # the stream goes on past it
        yield balancer_pb2.DecideStreamRequest(tag=3)  # nothing to decide
        asyncio.get_running_loop().call_soon(decisions.go_slow.set)  # "slow" is decided after the requests end

    replies = [reply async for reply in answer_decisions(requests(), decisions.decide)]
    assert sorted(r.tag for r in replies) == [0, 1, 2, 2, 3]
    by_engine = {r.decision.engine_id for r in replies if not r.status.code}
    assert by_engine == {"engine-slow", "engine-quick"}
    assert [r.status.code for r in replies if r.status.code] == [grpc.StatusCode.INVALID_ARGUMENT.value[0]] * 3


async def test_a_message_read_late_brings_its_wait_to_the_decision():
    """The second message is read at least 0.3 s after the first though sent 1 ms after it: its wait is
    at least the difference; a message that does not say when it was sent has no wait known."""
    decisions = Decisions()

    async def requests():
        yield balancer_pb2.DecideStreamRequest(tag=1, decide=_decide("first"), sent_after_s=0.001)
        await asyncio.sleep(0.3)
        yield balancer_pb2.DecideStreamRequest(tag=2, decide=_decide("late"), sent_after_s=0.002)
        yield balancer_pb2.DecideStreamRequest(tag=3, decide=_decide("untold"))

    replies = [reply async for reply in answer_decisions(requests(), decisions.decide)]
    assert len(replies) == 3 and not any(r.status.code for r in replies)
    assert decisions.waits_s["first"] == 0.0 and decisions.waits_s["late"] >= 0.3 - 0.001 - 1e-9
    assert decisions.waits_s["untold"] is None


async def test_the_client_says_when_it_sent_each_decision():
    decisions = Decisions()
    server, channel = await _serve(Balancer(decisions))
    stream = DecisionStream(balancer_pb2_grpc.BalancerStub(channel))
    try:
        await stream.decide(_decide("quick"))
        await stream.decide(_decide("other"))
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)
    assert decisions.waits_s["quick"] == 0.0 and decisions.waits_s["other"] is not None


async def test_a_decision_cancelled_in_the_read_that_brought_it_is_answered_and_its_tag_freed():
    """Its cancel came before its task ever ran: it is answered CANCELLED (it got no reply, and its tag
    stayed taken for good), and the tag decides again."""
    decisions = Decisions()
    reused = asyncio.Event()

    async def requests():
        yield balancer_pb2.DecideStreamRequest(tag=1, decide=_decide("forever"))
        yield balancer_pb2.DecideStreamRequest(tag=1, cancel=True)   # read in the same turn: the task never ran
        await reused.wait()
        yield balancer_pb2.DecideStreamRequest(tag=1, decide=_decide("quick"))

    replies = []

    async def read() -> None:
        async for reply in answer_decisions(requests(), decisions.decide):
            replies.append(reply)
            reused.set()

    await asyncio.wait_for(read(), 30)   # no reply at all used to leave it waiting for good
    assert [(r.tag, r.status.code, r.decision.engine_id) for r in replies] == [
        (1, grpc.StatusCode.CANCELLED.value[0], ""), (1, 0, "engine-quick")]

"""The direct path (issue 34): the balancer decides and admits, the client streams from the engine with
the decision's dispatch ticket, and the engine ends the monitor's entry; tickets refused as the issue
asks; a call whose engine fails before its first token decided again elsewhere."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import grpc
import pytest

from hetflow.client import HetflowClient, build_request
from hetflow.runtime.security import DEVELOPMENT_TICKET_KEY
from hetflow.runtime.tickets import TicketIssuer
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc, engine_pb2, engine_pb2_grpc, monitor_pb2, monitor_pb2_grpc
from tests.integration.harness import SMALL, Stack, stack_config, start_stack, wait_for_snapshot, wait_until_idle

pytestmark = pytest.mark.slow


def _two_engines(**balancer: Any) -> dict[str, Any]:
    return stack_config([{"name": "small-0", "profile": f"{SMALL}@a6000"},
                         {"name": "small-1", "profile": f"{SMALL}@a6000"}], **balancer)


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    running = await start_stack(_two_engines())
    yield running
    await running.close()


def _call(i: int, program_id: str = "direct-p") -> balancer_pb2.GenerateRequest:
    return build_request(prompt=f"Write function number {i}.", max_tokens=6, ignore_eos=True, program_id=program_id,
                         workflow="code", agent="coder", request_id=f"{program_id}-{i}", want_receipt=True)


async def _decide(stack: Stack, request: balancer_pb2.GenerateRequest,
                  failed: list[balancer_pb2.FailedDispatch] | None = None) -> balancer_pb2.DispatchDecision:
    async with grpc.aio.insecure_channel(stack.address("balancer")) as channel:
        return await balancer_pb2_grpc.BalancerStub(channel).Decide(
            balancer_pb2.DecideRequest(call=request, failed=failed or []), timeout=5)


async def _run(stack: Stack, decision: balancer_pb2.DispatchDecision,
               request: engine_pb2.EngineGenerateRequest | None = None,
               engine: str = "") -> list[engine_pb2.EngineChunk]:
    address = stack.address(engine) if engine else decision.engine_address
    async with grpc.aio.insecure_channel(address) as channel:
        return [c async for c in engine_pb2_grpc.EngineStub(channel).Generate(request or decision.engine_request,
                                                                              timeout=10)]


async def _code(stack: Stack, decision: balancer_pb2.DispatchDecision,
                request: engine_pb2.EngineGenerateRequest | None = None, engine: str = "") -> grpc.StatusCode:
    try:
        await _run(stack, decision, request, engine)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def _program(stack: Stack, program_id: str) -> monitor_pb2.ProgramEntry:
    async with grpc.aio.insecure_channel(stack.address("monitor")) as channel:
        return await monitor_pb2_grpc.MonitorStub(channel).GetProgram(
            monitor_pb2.GetProgramRequest(program_id=program_id), timeout=2)


async def test_the_client_streams_from_the_engine_and_the_engine_ends_the_monitors_entry(stack):
    async with HetflowClient(stack.address("balancer"), direct=True) as client:
        results = [await client.complete(_call(i, "direct-a")) for i in range(4)]
    assert all(r.output_tokens == 6 and r.finish_reason == "length" and r.engine_id in ("small-0", "small-1")
               for r in results)
    assert all(r.receipt is not None and r.receipt.engine_id == r.engine_id for r in results)
    snap = await wait_until_idle(stack)
    assert all(e.in_flight_requests == 0 for e in snap.engines)
    program = await _program(stack, "direct-a")
    assert (program.completed_requests, program.output_tokens) == (4, 24)  # Complete, not Cancel, from the engines


async def test_a_ticket_runs_once_and_only_for_its_request_and_engine(stack):
    decision = await _decide(stack, _call(0, "direct-b"))
    other = "small-1" if decision.engine_id == "small-0" else "small-0"
    assert await _code(stack, decision, engine=other) == grpc.StatusCode.PERMISSION_DENIED
    altered = engine_pb2.EngineGenerateRequest()
    altered.CopyFrom(decision.engine_request)
    altered.priority = 0.0  # jump the queue
    altered.prompt += " And another."
    assert await _code(stack, decision, altered) == grpc.StatusCode.PERMISSION_DENIED
    forged = engine_pb2.EngineGenerateRequest()
    forged.CopyFrom(decision.engine_request)
    forged.ticket.mac = bytes(32)
    assert await _code(stack, decision, forged) == grpc.StatusCode.PERMISSION_DENIED
    bare = engine_pb2.EngineGenerateRequest()
    bare.CopyFrom(decision.engine_request)
    bare.ClearField("ticket")
    assert await _code(stack, decision, bare) == grpc.StatusCode.PERMISSION_DENIED
    assert await _code(stack, decision) == grpc.StatusCode.OK
    assert await _code(stack, decision) == grpc.StatusCode.ALREADY_EXISTS
    await wait_until_idle(stack)


async def test_an_expired_ticket_is_failed_precondition(stack):
    dispatcher = stack.balancer_servicer.dispatcher
    dispatcher.tickets = TicketIssuer(DEVELOPMENT_TICKET_KEY, ttl_s=-1.0)  # issued already expired
    try:
        decision = await _decide(stack, _call(0, "direct-c"))
    finally:
        dispatcher.tickets = TicketIssuer(DEVELOPMENT_TICKET_KEY)
    assert await _code(stack, decision) == grpc.StatusCode.FAILED_PRECONDITION
    again = await _decide(stack, _call(0, "direct-c"), [balancer_pb2.FailedDispatch(
        engine_id=decision.engine_id, code="FAILED_PRECONDITION")])
    assert await _code(stack, again) == grpc.StatusCode.OK
    snap = await wait_until_idle(stack)
    assert all(e.in_flight_requests == 0 for e in snap.engines)  # the expired decision's entry ended too


async def test_deciding_again_after_a_failure_skips_that_engine_and_ends_its_entry(stack):
    request = _call(0, "direct-d")
    before = sum(e.in_flight_requests for e in (await stack.snapshot()).engines)
    first = await _decide(stack, request)
    failed = [balancer_pb2.FailedDispatch(engine_id=first.engine_id, code="RESOURCE_EXHAUSTED", details="full")]
    second = await _decide(stack, request, failed)
    assert second.engine_id != first.engine_id
    assert list(second.receipt.redispatched_from) == [first.engine_id]
    snap = await stack.snapshot()
    assert sum(e.in_flight_requests for e in snap.engines) == before + 1  # the first attempt's entry is gone
    chunks = await _run(stack, second)
    assert chunks[-1].finished and chunks[-1].output_tokens == 6
    await wait_until_idle(stack)
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await _decide(stack, _call(1, "direct-d"), [balancer_pb2.FailedDispatch(engine_id="small-0", code="OK")])
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_calls_sent_to_an_engine_that_refuses_them_are_decided_again_and_served_elsewhere():
    raw = stack_config([{"name": "refuser", "profile": f"{SMALL}@a6000", "max_waiting": 0},
                        {"name": "worker", "profile": f"{SMALL}@a6000"}], policy={"engine": "round-robin"})
    stack = await start_stack(raw)
    try:
        async with HetflowClient(stack.address("balancer"), direct=True) as client:
            results = [await client.complete(_call(i, "direct-e")) for i in range(6)]
        assert all(r.engine_id == "worker" and r.output_tokens == 6 for r in results)
        redecided = [list(r.receipt.redispatched_from) for r in results if r.receipt.redispatched_from]
        assert redecided and all(engines == ["refuser"] for engines in redecided)  # round robin sends some there
        snap = await wait_until_idle(stack)
        assert all(e.in_flight_requests == 0 for e in snap.engines)
    finally:
        await stack.close()


async def test_a_restarted_monitor_is_told_the_running_direct_calls_by_their_engines():
    stack = await start_stack(stack_config())
    try:
        async with HetflowClient(stack.address("balancer"), direct=True) as client:
            running = client.generate(build_request(prompt="a long answer", max_tokens=100_000 // 8, ignore_eos=True,
                                                    request_id="long-d", program_id="p-long-d"))
            engine_id = ""
            async for chunk in running:
                engine_id = engine_id or chunk.engine_id
                if chunk.output_tokens >= 2:
                    break
            view = stack.balancer_servicer.dispatcher.monitor_view
            view.registrations.remove("long-d")  # as once its ticket has expired
            await stack.stop("monitor")
            await stack.start_monitor()  # a new process: nothing in flight, no engine known
            snap = await wait_for_snapshot(stack, lambda s: any(e.in_flight_requests for e in s.engines))
            assert [e.status.engine_id for e in snap.engines if e.in_flight_requests] == [engine_id]
            async for more in running:  # the call streamed on throughout
                assert more.output_tokens > chunk.output_tokens
                break
            await running.aclose()  # the client goes: the engine aborts the call and ends its entry
        snap = await wait_until_idle(stack)
        assert all(e.in_flight_requests == 0 and e.in_flight_tokens == 0 for e in snap.engines)
    finally:
        await stack.close()


async def test_the_monitor_knows_a_call_ended_before_its_caller_sees_the_last_chunk(stack, monkeypatch):
    """The engine waits for its release before the last chunk (``released_before_end``): a caller's next
    call is never decided on a monitor that still counts this one running (issue 36). The releases are
    slowed here so that one sent after the last chunk would still be on its way."""
    for servicer in stack.engine_servicers.values():
        ended = servicer.monitor.ended

        async def slow_ended(*args, _ended=ended):
            await asyncio.sleep(0.2)
            await _ended(*args)
        monkeypatch.setattr(servicer.monitor, "ended", slow_ended)
    for i in range(3):
        decision = await _decide(stack, _call(i, "ordered"))
        async with grpc.aio.insecure_channel(decision.engine_address) as channel:
            async for chunk in engine_pb2_grpc.EngineStub(channel).Generate(decision.engine_request, timeout=10):
                if chunk.finished:
                    break                                    # the last chunk: ask the monitor at once
            program = await _program(stack, "ordered")
        assert (program.in_flight_requests, program.completed_requests) == (0, i + 1)


async def test_on_the_relay_path_too_the_monitor_knows_before_the_last_chunk(stack, monkeypatch):
    from hetflow.runtime.releases import MonitorReleases

    release = MonitorReleases.release

    async def slow_release(self, *args):
        await asyncio.sleep(0.2)
        await release(self, *args)
    monkeypatch.setattr(MonitorReleases, "release", slow_release)
    async with grpc.aio.insecure_channel(stack.address("balancer")) as channel:
        for i in range(3):
            async for chunk in balancer_pb2_grpc.BalancerStub(channel).Generate(_call(i, "relayed"), timeout=10):
                if chunk.finished:
                    break
            program = await _program(stack, "relayed")
            assert (program.in_flight_requests, program.completed_requests) == (0, i + 1)


async def test_a_stream_its_caller_cancels_is_counted_cancelled_not_ok(stack):
    from hetflow.runtime.interceptors import RPC_HANDLED
    from tests.factories import wait_until

    def counted(code: str) -> float:
        return sum(RPC_HANDLED.labels(e, "Generate", code)._value.get() for e in stack.engine_servicers)

    cancelled, ok = counted("CANCELLED"), counted("OK")
    request = build_request(prompt="Write a long function.", max_tokens=2000, ignore_eos=True,
                            program_id="gone", request_id="gone-1")
    decision = await _decide(stack, request)
    async with grpc.aio.insecure_channel(decision.engine_address) as channel:
        stream = engine_pb2_grpc.EngineStub(channel).Generate(decision.engine_request, timeout=30)
        async for _ in stream:
            break
        stream.cancel()

        async def counted_once() -> bool:
            return counted("CANCELLED") == cancelled + 1
        await wait_until(counted_once)
    assert counted("OK") == ok
    await wait_until_idle(stack)

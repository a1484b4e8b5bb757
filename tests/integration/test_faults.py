"""Faults on a live stack of sim engines: nothing lost that had not started streaming (issue 14)."""

from __future__ import annotations

import asyncio

import grpc

from hetflow.client import HetflowClient, build_request
from tests.factories import free_port
from tests.integration.harness import SMALL, stack_config, start_stack, wait_for_snapshot, wait_until_idle


async def test_calls_go_on_while_the_monitor_is_away_and_a_new_monitor_is_told_the_running_ones():
    stack = await start_stack(stack_config())
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            running = client.generate(build_request(prompt="a long answer", max_tokens=100_000 // 8, ignore_eos=True,
                                                    request_id="long-1", program_id="p-long"))
            async for chunk in running:
                if chunk.output_tokens >= 2:
                    break
            await stack.stop("monitor")

            meanwhile = await client.complete(build_request(prompt="hi", max_tokens=4, want_receipt=True))
            assert meanwhile.output_tokens == 4 and meanwhile.receipt is not None
            assert meanwhile.receipt.stale_snapshot_s > 0  # decided on the last snapshot, and says so

            await stack.start_monitor()  # a new process: nothing in flight, no engine known
            snap = await wait_for_snapshot(stack, lambda s: any(e.in_flight_requests for e in s.engines))
            assert [e.status.engine_id for e in snap.engines if e.in_flight_requests] == [
                next(e.status.engine_id for e in snap.engines if "long-1" in e.status.active_request_ids)]

            for _ in range(50):  # the balancer's channel reconnects within its backoff cap (1 s): then fresh
                after = await client.complete(build_request(prompt="hi", max_tokens=4, want_receipt=True))
                assert after.receipt is not None
                if after.receipt.stale_snapshot_s == 0:
                    break
                await asyncio.sleep(0.2)
            assert after.receipt.stale_snapshot_s == 0
            async for more in running:  # the running call streamed on throughout
                assert more.output_tokens > chunk.output_tokens
                break
            running.cancel()
        snap = await wait_until_idle(stack)
        assert all(e.in_flight_requests == 0 and e.in_flight_tokens == 0 for e in snap.engines)
    finally:
        await stack.close()


async def stack_with_small_0_at(address: str):
    """Two small-model engines; small-0 reports ``address`` to the monitor, where the test decides what answers."""
    return await start_stack(stack_config([
        {"name": "small-0", "profile": f"{SMALL}@a6000", "advertise_address": address},
        {"name": "small-1", "profile": f"{SMALL}@a6000"}]))


async def assert_every_call_served_by_small_1(stack) -> None:
    """Twelve calls pinned to the small model all finish on small-1, and those first sent to small-0 say so."""
    async with HetflowClient(stack.address("balancer")) as client:
        results = await asyncio.gather(*(client.complete(build_request(
            prompt=f"question {i}", max_tokens=8, ignore_eos=True, want_receipt=True, model_pin=SMALL))
            for i in range(12)))
    assert all(r.output_tokens == 8 and r.engine_id == "small-1" for r in results)
    moved = [r for r in results if r.receipt is not None and list(r.receipt.redispatched_from)]
    assert moved and all(list(r.receipt.redispatched_from) == ["small-0"] for r in moved)


async def test_calls_sent_to_an_engine_nobody_can_reach_go_to_its_replica_and_none_is_lost():
    closed_port = free_port()  # the engine reports this address, where nothing listens
    stack = await stack_with_small_0_at(f"127.0.0.1:{closed_port}")
    try:
        await assert_every_call_served_by_small_1(stack)
        snap = await wait_until_idle(stack)
        assert all(e.in_flight_requests == 0 for e in snap.engines)
    finally:
        await stack.close()


async def test_when_every_engine_reports_late_the_calls_still_go_to_those_that_last_said_they_serve():
    raw = stack_config()
    raw["monitor"]["engine_stale_after_s"] = 1e-6  # every report is late, as on a starved host
    stack = await start_stack(raw, engines_healthy=False)
    try:
        assert not any(e.healthy for e in (await stack.snapshot()).engines)
        async with HetflowClient(stack.address("balancer")) as client:
            result = await client.complete(build_request(prompt="hi", max_tokens=4))
        assert result.output_tokens == 4
    finally:
        await stack.close()


async def test_calls_an_engine_cancels_before_their_first_token_go_to_its_replica():
    async def cancel(request, context):  # as gRPC cancels a call that arrives while the server stops
        await context.abort(grpc.StatusCode.CANCELLED, "server stopping")
        yield  # a server-streaming handler

    cancelling = grpc.aio.server()
    cancelling.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "hetflow.v1.Engine", {"Generate": grpc.unary_stream_rpc_method_handler(cancel)}),))
    port = cancelling.add_insecure_port("127.0.0.1:0")
    await cancelling.start()
    stack = await stack_with_small_0_at(f"127.0.0.1:{port}")
    try:
        await assert_every_call_served_by_small_1(stack)
    finally:
        await stack.close()
        await cancelling.stop(None)

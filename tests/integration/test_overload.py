"""Overload on a live stack: bounded queues and tenant limits answer RESOURCE_EXHAUSTED with a retry
hint, and leave nothing in flight (issue 14)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from hetflow.client import HetflowClient, build_request
from hetflow.core.engine.profile import load_profile
from tests.integration.harness import SMALL, stack_config, start_stack, wait_until_idle


def _pushback_ms(err: grpc.aio.AioRpcError) -> int:
    return int(dict(err.trailing_metadata() or ())["grpc-retry-pushback-ms"])


async def _outcomes(client: HetflowClient, requests) -> list:
    return await asyncio.gather(*(client.complete(r) for r in requests), return_exceptions=True)


async def test_an_engine_past_max_waiting_refuses_and_the_caller_gets_the_hint():
    """An engine whose every iteration takes 2 s: a call waits that long for its first token, so of twelve
    calls sent at once at least three wait together, whatever the host's load (an engine of the usual
    speed gave each call its first token before a loaded host's balancer had sent the next one)."""
    slow = load_profile(f"{SMALL}@a6000", iteration_overhead_ms=2000.0).to_dict()
    stack = await start_stack(stack_config([{"name": "small-0", "profile": slow, "max_waiting": 2}]))
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            results = await _outcomes(client, [build_request(prompt=f"q{i}", max_tokens=2, ignore_eos=True)
                                               for i in range(12)])
        refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        served = [r for r in results if not isinstance(r, BaseException)]
        assert refused and served and len(refused) + len(served) == 12
        assert all(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_waiting" in e.details()
                   and _pushback_ms(e) == 1000 for e in refused)
        assert all(r.output_tokens == 2 for r in served)
        assert all(e.in_flight_requests == 0 for e in (await wait_until_idle(stack)).engines)
    finally:
        await stack.close()


async def test_a_tenant_over_its_cap_is_refused_while_another_tenant_is_served():
    stack = await start_stack(stack_config(tenant_limits={"default": {"max_in_flight": 1}}))
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            first = aiter(client.generate(build_request(prompt="long", max_tokens=200, ignore_eos=True, tenant="a")))
            chunks = [await anext(first)]  # the first call is streaming
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.complete(build_request(prompt="more", max_tokens=4, tenant="a"))
            other = await client.complete(build_request(prompt="other", max_tokens=4, tenant="b"))
            chunks += [c async for c in first]
            assert chunks[-1].output_tokens == 200 and other.output_tokens == 4
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "tenant 'a'" in refused.value.details()
        assert _pushback_ms(refused.value) == 1000
        assert all(e.in_flight_requests == 0 for e in (await wait_until_idle(stack)).engines)
    finally:
        await stack.close()

"""The balancer's overload rule through its admission: on a late event loop, calls that only ask for a
decision are taken up to the burst allowance, and refused once it is spent; relayed calls are refused
on the lag alone."""

import asyncio

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.direct import DirectDecisions
from balancer_svc.dispatcher import Dispatcher
from hetflow.core.errors import ResourceExhausted
from tests.factories import call


def late_dispatcher() -> Dispatcher:
    dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", max_loop_lag_s=0.005,
                                           decide_burst_calls=100, decide_burst_refill_s=1000.0))
    for _ in range(10):
        dispatcher.loop_lag.add(0.050)  # every probe 50 ms late: the loop is short of CPU
    return dispatcher


def test_a_burst_on_a_late_loop_is_decided_whole_and_a_relayed_call_is_refused():
    async def scenario():
        dispatcher = late_dispatcher()
        go = asyncio.Event()

        async def decide_once(c):
            await go.wait()
            return c.request_id

        dispatcher._decide_once = decide_once

        async def decide_only(c):
            with dispatcher.admission("t", relays=False):
                return await dispatcher.decide(c)

        with pytest.raises(ResourceExhausted, match="event loop runs 50.0 ms late"):
            with dispatcher.admission("t"):  # a relayed call, the allowance full
                pass
        burst = [asyncio.create_task(decide_only(call())) for _ in range(100)]
        await asyncio.sleep(0)
        go.set()
        decided = await asyncio.gather(*burst)
        await dispatcher.close()
        return decided, dispatcher.shedder.calls

    decided, calls_left = asyncio.run(scenario())
    assert len(set(decided)) == 100 and calls_left == 0


def test_a_late_loop_refuses_decide_only_calls_past_the_allowance():
    async def scenario():
        dispatcher = late_dispatcher()
        try:
            for _ in range(100):
                with dispatcher.admission("t", relays=False):
                    pass
            with pytest.raises(ResourceExhausted, match="event loop") as refused:
                with dispatcher.admission("t", relays=False):
                    pass
            return refused.value.retry_after_s, dispatcher.shedder.calls
        finally:
            await dispatcher.close()

    assert asyncio.run(scenario()) == (1.0, 0)


def test_a_call_its_tenant_refuses_does_not_spend_the_allowance():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", max_loop_lag_s=0.005,
                                               decide_burst_calls=100,
                                               tenant_limits={"tenants": {"t": {"max_in_flight": 1}}}))
        for _ in range(10):
            dispatcher.loop_lag.add(0.050)
        try:
            with dispatcher.admission("t", relays=False):
                with pytest.raises(ResourceExhausted, match="t"):
                    with dispatcher.admission("t", relays=False):
                        pass
                return dispatcher.shedder.burst_allowance
        finally:
            await dispatcher.close()

    assert asyncio.run(scenario()) == 99.0


def test_the_direct_path_asks_as_a_decide_only_call():
    async def scenario():
        dispatcher = late_dispatcher()
        direct = DirectDecisions(dispatcher)

        async def decide_once(c):
            return c.request_id

        async def handed_over(c, dispatch, failed):
            return dispatch

        dispatcher._decide_once = decide_once
        direct._handed_over = handed_over
        asked = call()
        try:
            return await direct.decide(asked, ()) == asked.request_id
        finally:
            await dispatcher.close()

    assert asyncio.run(scenario())


def test_calls_that_waited_to_be_taken_past_the_target_refuse_the_next_until_one_comes_through_quickly():
    """The wait each call's client let the balancer know (its sent timeout less its deadline's time left)
    feeds the standing-queue rule; the servicer reads it from the call's metadata."""
    from types import SimpleNamespace

    from balancer_svc.servicer import BalancerServicer
    from hetflow.runtime.accept_wait import sent_timeout
    from hetflow.v1 import balancer_pb2, common_pb2

    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", accept_wait_target_s=0.02,
                                               accept_wait_interval_s=600.0))  # no call ages out on a slow host
        servicer = BalancerServicer(dispatcher)
        request = balancer_pb2.GenerateRequest(prompt="hi", sampling=common_pb2.SamplingParams(max_tokens=4))

        def taken_after(wait_s: float):
            context = SimpleNamespace(invocation_metadata=lambda: sent_timeout(30.0),
                                      time_remaining=lambda: 30.0 - wait_s)
            return servicer._call(request, context, servicer._unary_wait_s(context))

        for _ in range(7):  # seven calls that each waited 80 ms: too few to say
            late = taken_after(0.08)
            with dispatcher.admission("t", accept_wait_s=late.accept_wait_s):
                pass
        assert late.accept_wait_s == pytest.approx(0.08)
        with pytest.raises(ResourceExhausted, match="calls wait 80 ms"):  # the eighth: a standing queue
            with dispatcher.admission("t", accept_wait_s=taken_after(0.08).accept_wait_s):
                pass
        with dispatcher.admission("t", accept_wait_s=taken_after(0.001).accept_wait_s):
            pass  # it came through quickly: the queue has drained
        await dispatcher.close()

    asyncio.run(scenario())

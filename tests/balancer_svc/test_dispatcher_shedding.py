"""The balancer's overload rule through its admission: on a late event loop, calls that only ask for a
decision are taken while decisions stay young (a burst), and refused once the oldest has waited past
``max_decision_wait_s``; relayed calls are refused on the lag alone."""

import asyncio
import time

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.direct import DirectDecisions
from balancer_svc.dispatcher import Dispatcher
from hetflow.core.errors import ResourceExhausted
from tests.factories import call


def late_dispatcher() -> Dispatcher:
    dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", max_loop_lag_s=0.005,
                                           max_decision_wait_s=1.0))
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

        burst = [asyncio.create_task(decide_only(call())) for _ in range(100)]
        await asyncio.sleep(0)
        assert dispatcher.shedder.oldest_decision_wait_s(time.monotonic()) < 1.0
        with pytest.raises(ResourceExhausted, match="event loop runs 50.0 ms late"):
            with dispatcher.admission("t"):
                pass
        go.set()
        decided = await asyncio.gather(*burst)
        await dispatcher.close()
        return decided, dispatcher.shedder.calls

    decided, calls_left = asyncio.run(scenario())
    assert len(set(decided)) == 100 and calls_left == 0


def test_a_decision_waiting_past_the_limit_on_a_late_loop_refuses_decide_only_calls():
    async def scenario():
        dispatcher = late_dispatcher()
        try:
            with dispatcher.shedder.deciding(time.monotonic() - 2.0):  # a decision under way for 2 s
                with pytest.raises(ResourceExhausted, match="for its decision") as refused:
                    with dispatcher.admission("t", relays=False):
                        pass
            with dispatcher.admission("t", relays=False):  # decided: the next call is taken
                pass
            return refused.value.retry_after_s, dispatcher.shedder.calls
        finally:
            await dispatcher.close()

    assert asyncio.run(scenario()) == (1.0, 0)


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

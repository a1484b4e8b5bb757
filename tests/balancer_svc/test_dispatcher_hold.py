"""A call no engine has room for is held in the balancer and decided again (Kairos 6), until its
program's deadline would pass: then DEADLINE_EXCEEDED, not an endless wait."""

import asyncio
import time

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Dispatcher
from hetflow.core.errors import DeadlineExceeded
from hetflow.core.policies import WaitForCapacity
from tests.factories import call


def test_held_call_is_decided_again_until_an_engine_has_room():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        attempts = []

        async def decide_once(c):
            attempts.append(c.request_id)
            if len(attempts) < 3:
                raise WaitForCapacity("no room", retry_after_s=0.0)
            return "decided"

        dispatcher._decide_once = decide_once
        try:
            return await dispatcher.decide(call()), attempts
        finally:
            await dispatcher.close()

    decision, attempts = asyncio.run(scenario())
    assert decision == "decided" and len(attempts) == 3


def test_held_call_whose_deadline_would_pass_is_deadline_exceeded():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))

        async def decide_once(c):
            raise WaitForCapacity("no room", retry_after_s=60.0)

        dispatcher._decide_once = decide_once
        try:
            await dispatcher.decide(call(deadline_unix_s=time.time() + 30.0))
        finally:
            await dispatcher.close()

    with pytest.raises(DeadlineExceeded, match="deadline passed while waiting for KV room"):
        asyncio.run(scenario())

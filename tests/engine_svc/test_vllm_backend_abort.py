"""The in-process vLLM backend's abort of a call it has admitted but not yet given to vLLM (whose abort of
an id it does not know does nothing): the call is never sent, its caller hears it ended, its slot frees."""

from __future__ import annotations

import asyncio

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.vllm_backend import VllmBackend
from engine_svc.config import VllmConfig
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue


class UnstartedLlm:
    """vLLM's AsyncLLM before it is given the call: its abort finds nothing; nothing may be generated."""

    def __init__(self) -> None:
        self.aborted: list[str] = []

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def generate(self, *args, **kwargs):
        raise AssertionError("an aborted call is never sent to vLLM")


async def test_a_call_aborted_before_vllm_has_it_is_never_sent_and_ends():
    backend = VllmBackend("m", VllmConfig(), AgingPriorityQueue(), "")
    backend._llm = UnstartedLlm()

    async def abort(request_id: str) -> bool:
        return True

    stream = backend.front.serve(GenerateCall("r1", "hi", (), SamplingSpec(max_tokens=4), priority=1.0), [1, 2, 3],
                                 abort)
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)  # the call is queued
    (held,) = backend.front.admissible(lambda req: True)
    backend._start(*held)
    assert await backend.abort("r1") and backend._llm.aborted == ["r1"]
    delta = await asyncio.wait_for(first, 1.0)
    assert delta.finished and delta.finish_reason == "abort"
    await asyncio.sleep(0)
    assert backend.status().running == 0 and not backend._aborted

"""The in-process vLLM backend's abort of a call it has admitted but not yet given to vLLM (whose abort of
an id it does not know does nothing): the call is never sent, its caller hears it ended, its slot frees."""

from __future__ import annotations

import asyncio

import pytest

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


class EndingLlm:
    """vLLM's AsyncLLM that ends the call with one final output of ``finish_reason`` ("abort" is what vLLM
    0.32 sends for a request it aborted while running)."""

    def __init__(self, finish_reason: str) -> None:
        self.finish_reason = finish_reason

    async def generate(self, *args, **kwargs):
        from types import SimpleNamespace

        yield SimpleNamespace(finished=True, outputs=[SimpleNamespace(token_ids=[7], text="x",
                                                                      finish_reason=self.finish_reason)])


@pytest.mark.parametrize("finish_reason, held", [("stop", True), ("length", True), ("abort", False)])
async def test_only_a_call_that_ran_to_its_end_holds_its_programs_context(finish_reason, held):
    """A program's context is held for its next call (``retain_kv_s``) when the call ended by itself; an
    aborted call's program may never call again, so its room goes back at once."""
    backend = VllmBackend("m", VllmConfig(), AgingPriorityQueue(), "")
    backend._llm = EndingLlm(finish_reason)

    async def abort(request_id: str) -> bool:
        return True

    call = GenerateCall("p/1", "hi", (), SamplingSpec(max_tokens=4), priority=1.0, program_id="p", retain_kv_s=60.0)
    stream = backend.front.serve(call, [1, 2, 3], abort)
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)  # the call is queued
    (admitted,) = backend.front.admissible(lambda req: True)
    backend._start(*admitted)
    delta = await asyncio.wait_for(first, 1.0)
    assert delta.finished and delta.finish_reason == finish_reason
    await asyncio.wait_for(asyncio.gather(*backend._tasks), 1.0)
    assert ("p" in backend.front.retained) == held

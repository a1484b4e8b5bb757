"""The vllm-server backend's calls end whatever ends them: aborted before their request's task has run a
step, or failed by a reply nothing expected; the caller hears, and the slot is free again. A server's
reply that is not vLLM's is its failure (UNAVAILABLE), never the call's."""

from __future__ import annotations

import asyncio

import pytest

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.vllm_metrics import VllmServerLoad
from engine_svc.backends.vllm_server import VllmServerBackend
from engine_svc.config import VllmServerConfig
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.request import EngineRequest
from hetflow.core.errors import Unavailable


def _backend() -> VllmServerBackend:
    backend = VllmServerBackend("m", VllmServerConfig(base_url="http://127.0.0.1:1"), AgingPriorityQueue(), "")
    backend._load = VllmServerLoad(num_gpu_blocks=64, block_size=16)  # as start() reads them from /metrics
    return backend


async def _admitted(backend: VllmServerBackend) -> tuple[asyncio.Future, EngineRequest]:
    """A call queued and admitted as ``_admit_forever`` admits it: its caller's first item, to come, and
    its request, whose prompt's two full blocks count as running."""
    async def abort(request_id: str) -> bool:
        return True

    stream = backend.front.serve(GenerateCall("r1", "hi", (), SamplingSpec(max_tokens=1), priority=1.0),
                                 list(range(40)), abort, block_size=16)
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)  # the call is queued
    (held,) = backend.front.admissible(lambda req: True)
    assert backend.front.running_prompt_blocks.held_prefix(held[0]) == 2
    backend._start(*held)
    return first, held[0]


async def test_a_call_aborted_before_its_request_ran_a_step_ends_and_frees_its_slot():
    backend = _backend()
    first, req = await _admitted(backend)
    assert await backend.abort("r1")  # before the request's task has run at all
    delta = await asyncio.wait_for(first, 1.0)
    assert delta.finished and delta.finish_reason == "abort"
    assert backend.status().running == 0 and backend.front.running_prompt_blocks.held_prefix(req) == 0


async def test_a_reply_nothing_expected_fails_the_call_unavailable_and_frees_its_slot():
    backend = _backend()

    async def broken(req, token_ids, call):
        raise TypeError("int() argument must be a string, not 'NoneType'")

    backend._stream_retrying = broken
    first, req = await _admitted(backend)
    with pytest.raises(Unavailable, match="TypeError"):
        await asyncio.wait_for(first, 1.0)
    assert backend.status().running == 0 and backend.front.running_prompt_blocks.held_prefix(req) == 0


@pytest.mark.parametrize("reply", [b"{not json", b'{"count": 3}'])
async def test_a_tokenize_reply_without_tokens_is_the_servers_failure(reply):
    """UNAVAILABLE, which the balancer decides again elsewhere: not INVALID_ARGUMENT, the caller's fault."""
    import json
    from types import SimpleNamespace

    backend = _backend()

    async def post_json(url, body, timeout_s):
        return SimpleNamespace(status=200, content=reply, json=lambda: json.loads(reply))

    backend._http = SimpleNamespace(post_json=post_json)
    with pytest.raises(Unavailable, match="/tokenize"):
        await backend._tokenize(GenerateCall("r1", "hi", (), SamplingSpec(max_tokens=1), priority=1.0))


@pytest.mark.parametrize("finish_reason, held", [("stop", True), ("abort", False)])
async def test_only_a_streamed_call_that_ran_to_its_end_holds_its_programs_context(monkeypatch, finish_reason, held):
    """The server's last event says how the call ended: an aborted call's program keeps no room."""
    from engine_svc.backends import vllm_server
    from hetflow.runtime.vllm_stream import CompletionEvent

    async def one_event(*args, **kwargs):
        yield [CompletionEvent("x", 1, 40, finish_reason)]

    monkeypatch.setattr(vllm_server, "stream_completion", one_event)
    backend = _backend()

    async def abort(request_id: str) -> bool:
        return True

    call = GenerateCall("p/1", "hi", (), SamplingSpec(max_tokens=4), priority=1.0, program_id="p", retain_kv_s=60.0)
    stream = backend.front.serve(call, list(range(40)), abort, block_size=16)
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)
    (admitted,) = backend.front.admissible(lambda req: True)
    backend._start(*admitted)
    delta = await asyncio.wait_for(first, 1.0)
    assert delta.finished and delta.finish_reason == finish_reason
    for _ in range(100):   # the request's task ends after its last delta
        if backend.status().running == 0:
            break
        await asyncio.sleep(0)
    assert backend.status().running == 0 and ("p" in backend.front.retained) == held


async def test_a_call_whose_prompt_the_server_is_tokenizing_is_reported_active():
    """The monitor ends an entry its engine's reports leave out (past ``orphan_grace_s``); a call waits on
    the server's /tokenize before it is queued, and must be in the reports meanwhile."""
    backend = _backend()
    tokenizing = asyncio.Event()
    go_on = asyncio.Event()

    async def slow_tokenize(call) -> list[int]:
        tokenizing.set()
        await go_on.wait()
        return list(range(40))

    backend._tokenize = slow_tokenize
    stream = backend.generate(GenerateCall("r1", "hi", (), SamplingSpec(max_tokens=1), priority=1.0))
    first = asyncio.ensure_future(stream.__anext__())
    await tokenizing.wait()
    assert backend.status().active_request_ids == ["r1"]
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert backend.status().active_request_ids == []


async def test_a_server_whose_step_count_went_back_has_restarted_and_the_engine_says_so(monkeypatch):
    """vLLM's counters start again at zero with the server: the engine counts the restart, which its
    incarnation carries to the monitor (which then forgets the old server's cache)."""
    from engine_svc.backends import vllm_metrics, vllm_server

    loads = iter([vllm_metrics.VllmServerLoad(engine_steps=500, num_gpu_blocks=64, block_size=16),
                  vllm_metrics.VllmServerLoad(engine_steps=900, num_gpu_blocks=64, block_size=16),
                  vllm_metrics.VllmServerLoad(engine_steps=7, num_gpu_blocks=64, block_size=16)])

    class Reply:
        content = b""

        def raise_for_status(self) -> None:
            return None

    backend = _backend()

    async def get(url, timeout_s):
        return Reply()

    monkeypatch.setattr(backend._http, "get", get)
    monkeypatch.setattr(vllm_server.vllm_metrics, "parse", lambda text: next(loads))
    starts = []
    for _ in range(3):
        await backend._read_metrics()
        starts.append(backend.status().server_starts)
    assert starts == [0, 0, 1]

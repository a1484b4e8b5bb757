"""The vllm-server backend reads the server's load every ``metrics_interval_s`` while it has requests
there, and while idle only when a call comes or ``metrics_idle_interval_s`` has passed; it admits by that
load less the contexts held for other programs."""

from __future__ import annotations

import asyncio

import pytest

from engine_svc.backends.vllm_metrics import VllmServerLoad
from engine_svc.backends.vllm_server import VllmServerBackend
from engine_svc.config import VllmServerConfig
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.request import EngineRequest


def _backend() -> VllmServerBackend:
    return VllmServerBackend("m", VllmServerConfig(base_url="http://vllm.test", metrics_interval_s=0.01,
                                                   metrics_idle_interval_s=3600.0), AgingPriorityQueue(), "")


async def test_an_idle_engine_reads_the_servers_load_when_a_call_comes_not_on_the_clock():
    backend = _backend()
    waiting = asyncio.ensure_future(backend._until_next_read())
    for _ in range(5):
        await asyncio.sleep(0.02)  # twice the busy interval, five times over
    idle = not waiting.done()
    backend._arrived.set()  # what a call's arrival does (``_serve``)
    await asyncio.wait_for(waiting, 30)
    assert idle


async def test_an_engine_with_requests_in_the_server_reads_it_every_interval():
    backend = _backend()
    backend._running["r1"] = (None, None)  # type: ignore[assignment]
    await asyncio.wait_for(backend._until_next_read(), 30)  # no call needs to come


@pytest.mark.parametrize("busy_s, idle_s", [(0.0, 5.0), (1.0, 0.5)])
def test_the_intervals_must_be_positive_and_the_idle_one_no_shorter(busy_s, idle_s):
    with pytest.raises(ValueError, match="metrics_interval_s"):
        VllmServerConfig(base_url="http://vllm.test", metrics_interval_s=busy_s, metrics_idle_interval_s=idle_s)


def test_a_resumed_call_is_charged_the_held_contexts_of_other_programs_not_its_own():
    """A program's held context (1,000 tokens, 63 blocks) is the cached prefix of its next call's prompt:
    with 80 of 100 blocks free by the server's report, the program's next call of 1,100 tokens (69 blocks
    and the watermark) goes in; another program's call of the same size waits, the context kept from it."""
    backend = _backend()
    backend._load = VllmServerLoad(kv_cache_usage=0.2, num_gpu_blocks=100, block_size=16)
    backend.front.retained["p"] = (1000, float("inf"))
    own, other = (EngineRequest(f"{p}/2", 1100, 16, 0.0, 0.0, program_id=p) for p in ("p", "q"))
    assert backend._has_room(own)
    assert not backend._has_room(other)


async def test_a_metrics_page_without_the_kv_size_keeps_the_last_load():
    """A page without ``vllm:cache_config_info`` would make the KV 0 blocks, which admission divides by:
    the read fails (the watch logs it) and admission goes on by the last good load."""
    from types import SimpleNamespace

    backend = _backend()
    backend._load = VllmServerLoad(kv_cache_usage=0.2, num_gpu_blocks=100, block_size=16)

    async def page(url, timeout_s):
        return SimpleNamespace(raise_for_status=lambda: None, content=b"vllm:num_requests_waiting 3\n")

    backend._http = SimpleNamespace(get=page)
    with pytest.raises(ValueError, match="cache_config_info"):
        await backend._read_metrics()
    assert backend._load.num_gpu_blocks == 100
    assert backend._has_room(EngineRequest("r", 160, 16, 0.0, 0.0))

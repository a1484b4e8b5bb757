"""``hetflow profile``: measure a real vLLM engine and write the profile the simulator and the ``sim``
backend use (hetflow.core.engine.profile; the load-balancer paper's iteration-time model, section 3).

Four measurements on the engine as hetflow runs it (the ``vllm`` backend, hetflow's queue in front):
  prefill  one request at a time, prompts of several lengths, one output token: time to first token
           = decode_base_ms + prefill_ms_per_token * prompt_tokens (least squares);
  decode   B requests together at a prompt length P, N output tokens each: the mean gap between
           tokens is one iteration, = decode_base_ms + decode_ms_per_seq * B
           + decode_ms_per_batch_token * B * context (least squares over the grid of B and P);
  prefix   with prefix caching on, a prompt whose blocks are then cached, and the same prompt
           extended by new tokens, one output token: the extension's time to first token beyond what
           the prefill fit says its new tokens cost = prefill_ms_per_context_pair * new * cached
           (least squares through zero): the new tokens' attention over the cached prefix (issue 32);
  KV       the blocks vLLM allocated times the block size.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.vllm_backend import VllmBackend
from engine_svc.config import VllmConfig
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.engine.queues import QueueConfig, make_queue

PROMPT_WORD = " hello"


@dataclass(frozen=True)
class Timing:
    prompt_tokens: int
    first_token_s: float
    token_times_s: tuple[float, ...]
    text: str = ""
    """What the engine wrote."""


def prompt_of(words: int) -> str:
    return (PROMPT_WORD * words).strip()


async def timed_call(backend: VllmBackend, request_id: str, prompt: str, max_tokens: int) -> Timing:
    times: list[float] = []
    texts: list[str] = []
    start, prompt_tokens = time.perf_counter(), 0
    call = GenerateCall(request_id, prompt, (), SamplingSpec(max_tokens=max_tokens, ignore_eos=True, temperature=0.0),
                        priority=0.0)
    async for delta in backend.generate(call):
        prompt_tokens = delta.prompt_tokens or prompt_tokens
        texts.append(delta.text)
        times.extend([time.perf_counter() - start] * max(1, delta.output_tokens - len(times)))
    return Timing(prompt_tokens, times[0], tuple(times), "".join(texts))


async def measure_prefill(backend: VllmBackend, prompt_words: Sequence[int], repeats: int) -> list[tuple[int, float]]:
    """Time to first token per prompt length. Every measurement has a length of its own, as the calls
    of a real trace do: a repeated length would time the second call with its kernels already set up
    for that shape."""
    out = []
    for words in prompt_words:
        for r in range(repeats):
            t = await timed_call(backend, f"prefill-{words}-{r}", prompt_of(words + 7 * r), 1)
            out.append((t.prompt_tokens, t.first_token_s * 1e3))
    return out


async def measure_decode(backend: VllmBackend, batch_sizes: Sequence[int], prompt_words: Sequence[int],
                         output_tokens: int) -> list[tuple[int, float, float]]:
    """(batch size, mean context tokens per sequence, ms per iteration) per grid point."""
    out = []
    for words in prompt_words:
        for batch in batch_sizes:
            timings = await asyncio.gather(*(timed_call(backend, f"decode-{words}-{batch}-{i}", prompt_of(words),
                                                        output_tokens) for i in range(batch)))
            # the middle half of the tokens, when every sequence of the batch is decoding
            lo, hi = output_tokens // 4, 3 * output_tokens // 4
            gaps = [(t.token_times_s[hi] - t.token_times_s[lo]) / (hi - lo) for t in timings]
            context = timings[0].prompt_tokens + output_tokens / 2
            out.append((batch, context, statistics.median(gaps) * 1e3))
    return out


async def measure_prefix(backend: VllmBackend, pairs: Sequence[tuple[int, int]], repeats: int
                         ) -> list[tuple[int, int, float]]:
    """(new tokens, cached tokens, ms to first token) per (new, cached) pair of the grid, in tokens. Each
    measurement's prompt is a word of its own repeated, so nothing but its own prefix is cached: a probe
    of 16 words tells its tokens per word, a first prompt fills the cache, and the extension is timed."""
    assert backend.profile is not None
    block = backend.profile.block_size
    out = []
    for i, (new_tokens, cached_tokens) in enumerate(pairs):
        for r in range(repeats):
            word = f" w{i}x{r}"
            probe = await timed_call(backend, f"prefix-{i}-{r}-probe", (word * 16).strip(), 1)
            per_word = max(1e-9, probe.prompt_tokens / 16)
            cached_words, new_words = (max(1, int(t / per_word)) for t in (cached_tokens, new_tokens))
            first = await timed_call(backend, f"prefix-{i}-{r}-first", (word * cached_words).strip(), 1)
            t = await timed_call(backend, f"prefix-{i}-{r}", (word * (cached_words + new_words)).strip(), 1)
            cached = first.prompt_tokens // block * block  # the first prompt's whole blocks
            out.append((t.prompt_tokens - cached, cached, t.first_token_s * 1e3))
    return out


def fit_context_pair(prefix: Sequence[tuple[int, int, float]], prefill_intercept_ms: float,
                     prefill_ms_per_token: float) -> float:
    """The pair term: what each prefix measurement took beyond the prefill fit's time for its new tokens,
    over new x cached tokens (least squares through zero), clipped at zero."""
    x = np.array([float(n * c) for n, c, _ in prefix])
    y = np.array([ms - prefill_intercept_ms - prefill_ms_per_token * n for n, _, ms in prefix])
    if not len(x) or not x.any():
        return 0.0
    return max(0.0, float(x @ y / (x @ x)))


def fit(prefill: Sequence[tuple[int, float]], decode: Sequence[tuple[int, float, float]]) -> dict[str, float]:
    """Least squares for the profile's four coefficients, each clipped at zero, and the prefill fit's
    intercept (unclipped: the prefix measurement reads the prefill fit as it is)."""
    a = np.array([[1.0, p] for p, _ in prefill])
    (prefill_base, per_prompt_token), *_ = np.linalg.lstsq(a, np.array([ms for _, ms in prefill]), rcond=None)
    d = np.array([[1.0, b, b * ctx] for b, ctx, _ in decode])
    (base, per_seq, per_context_token), *_ = np.linalg.lstsq(d, np.array([ms for *_, ms in decode]), rcond=None)
    return {"decode_base_ms": max(0.0, float(base)), "decode_ms_per_seq": max(0.0, float(per_seq)),
            "decode_ms_per_batch_token": max(0.0, float(per_context_token)),
            "prefill_ms_per_token": max(0.0, float(per_prompt_token)),
            "prefill_intercept_ms": float(prefill_base)}


async def profile_vllm(cfg: VllmConfig, model: str, base_profile: str, batch_sizes: Sequence[int] = (1, 2, 4, 8),
                       context_tokens: Sequence[int] = (32, 512, 1536), output_tokens: int = 64,
                       prefill_tokens: Sequence[int] = (64, 256, 768, 1536), repeats: int = 3,
                       prefix_pairs: Sequence[tuple[int, int]] = ((64, 512), (64, 1408), (256, 512), (256, 1408))
                       ) -> tuple[EngineProfile, dict]:
    """Measure ``model`` behind hetflow's queue and fit its profile. The grids are in prompt tokens; a
    warm-up call tells how many tokens a prompt word makes with the model's tokenizer. The prefix
    measurement runs on a second engine start with prefix caching on (none when ``prefix_pairs`` is
    empty)."""
    backend = VllmBackend(model, cfg, make_queue(QueueConfig()), base_profile)
    await backend.start()
    try:
        warmup = await timed_call(backend, "warmup", prompt_of(64), 8)
        tokens_per_word = max(1e-9, warmup.prompt_tokens / 64)

        def words(tokens: int) -> int:
            return max(1, int(tokens / tokens_per_word))

        prefill = await measure_prefill(backend, [words(t) for t in prefill_tokens], repeats)
        decode = await measure_decode(backend, [b for b in batch_sizes if b <= cfg.max_num_seqs],
                                      [words(t) for t in context_tokens], output_tokens)
        assert backend.profile is not None
        allocated = backend.profile
    finally:
        await backend.close()
    prefix = await _measure_prefix_cached(cfg, model, base_profile, prefix_pairs, repeats)
    coefficients = fit(prefill, decode)
    coefficients["prefill_ms_per_context_pair"] = fit_context_pair(
        prefix, coefficients["prefill_intercept_ms"], coefficients["prefill_ms_per_token"])
    fitted: dict[str, Any] = {k: v for k, v in coefficients.items() if k != "prefill_intercept_ms"}
    # The fit is of end-to-end times: the engine's overhead is in its decode_base_ms, and no tables.
    measured = replace(allocated, name=f"{allocated.model}@{allocated.gpu}-measured", source="measured",
                       iteration_overhead_ms=0.0, operator_tables=None, **fitted)
    return measured, {"prefill": prefill, "decode": decode, "prefix": prefix, "fit": coefficients}


async def _measure_prefix_cached(cfg: VllmConfig, model: str, base_profile: str, pairs: Sequence[tuple[int, int]],
                                 repeats: int) -> list[tuple[int, int, float]]:
    if not pairs:
        return []
    backend = VllmBackend(model, replace(cfg, enable_prefix_caching=True), make_queue(QueueConfig()), base_profile)
    await backend.start()
    try:
        return await measure_prefix(backend, pairs, repeats)
    finally:
        await backend.close()

"""The ``vllm`` backend: vLLM's AsyncLLM in process, behind hetflow's own queue.

hetflow keeps the waiting requests in its aging priority queue (Chimera 3.7) and admits the head
into vLLM only when vLLM has room: fewer running than max_num_seqs and enough free KV blocks for
the prompt plus a watermark. So the order in which work starts is hetflow's, and vLLM's own waiting
queue stays (nearly) empty. Each vLLM engine step, reported through a stat logger, is one
scheduling iteration for aging: a waiting request is promoted after S of them, and a promoted request
running in vLLM is demoted after Q (Chimera 3.7). Requests inside vLLM carry hetflow's order as their
priority (``vllm_priority``: the starvation level, then the priority), so vLLM's own preemption under
memory pressure evicts hetflow's last request first.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import replace
from typing import Any, AsyncIterator, Mapping

from engine_svc.backends.admission import check_admissible, has_room
from engine_svc.backends.base import BackendStatus, GenerateCall, OutputDelta
from engine_svc.backends.front_queue import ENDED_BY_ITSELF, FrontQueue
from engine_svc.config import EngineConfig, VllmConfig
from hetflow.core.call import OPTIONAL_SAMPLING_FIELDS
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.profile import EngineProfile, load_profile
from hetflow.core.engine.request import NORMAL_LEVEL, EngineRequest
from hetflow.core.errors import InvalidArgument, Unavailable
from hetflow.runtime.logs import get_logger
from hetflow.runtime.model_tokenizer import chat_text
from hetflow.runtime.tinymodel import DEFAULT_DIR

log = get_logger(__name__)
PRIORITY_BITS = 62
"""Bits of the priority in vLLM's int64 priority, below the starvation level's bit."""


def vllm_priority(req: EngineRequest) -> int:
    """hetflow's order of ``req`` as the int vLLM orders by (lower first, then arrival): a promoted
    request (Chimera 3.7) before every normal one, then the priority, its IEEE-754 bits mapped to an
    order-preserving integer and cut to the 62 bits left in the int64 vLLM sends to its engine core."""
    bits = struct.unpack(">q", struct.pack(">d", float(req.priority)))[0]
    ordered = (bits ^ 0x7FFF_FFFF_FFFF_FFFF if bits < 0 else bits) + 2**63  # doubles in order, in [0, 2^64)
    level_bit = 0 if req.starvation_level < NORMAL_LEVEL else 1
    return (level_bit << PRIORITY_BITS) | (ordered >> (64 - PRIORITY_BITS))


class VllmBackend:
    backend_name = "vllm"

    def __init__(self, model: str, cfg: VllmConfig, queue: AgingPriorityQueue,
                 profile_spec: str | Mapping[str, Any]) -> None:
        self.cfg, self.front = cfg, FrontQueue(queue)
        self.prefix_cache_queries = 0
        """Prompt tokens vLLM looked up in its prefix cache (its ``prefix_cache_stats``)."""
        self.prefix_cache_hits = 0
        """Of those, tokens it found."""
        self.model_dir = cfg.model_dir or str(DEFAULT_DIR)
        self.model = model or "tiny-llama"
        self._profile_spec = profile_spec
        self.profile: EngineProfile | None = None
        self._llm: Any = None
        self._tokenizer: Any = None
        self._num_blocks = self._block_size = 0
        self._running: dict[str, EngineRequest] = {}
        self._aborted: set[str] = set()
        """Running calls aborted: one vLLM did not have yet is never sent, or is aborted once it has it."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._admit_task: asyncio.Task[None] | None = None
        self._kv_usage = 0.0
        self._vllm_waiting = 0
        self._preemptions_total = 0

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=self.model_dir, load_format=self.cfg.load_format, dtype=self.cfg.dtype,  # type: ignore[arg-type]
            max_model_len=self.cfg.max_model_len, max_num_seqs=self.cfg.max_num_seqs,
            enforce_eager=self.cfg.enforce_eager, scheduling_policy="priority", seed=self.cfg.seed,
            gpu_memory_utilization=self.cfg.gpu_memory_utilization, disable_log_stats=False,
            enable_prefix_caching=self.cfg.enable_prefix_caching,
            tensor_parallel_size=self.cfg.tensor_parallel_size, pipeline_parallel_size=self.cfg.pipeline_parallel_size)
        if current_platform.is_cpu():
            # On CPU gpu_memory_utilization is a share of host memory; size the KV cache explicitly.
            args.gpu_memory_utilization = min(self.cfg.gpu_memory_utilization, 0.1)
            args.kv_cache_memory_bytes = int(self.cfg.kv_cache_gib * 2**30)
        else:
            args.block_size = self.cfg.block_size
        self._llm = AsyncLLM.from_engine_args(args, stat_loggers=[self._stat_logger_factory()])
        self._tokenizer = self._llm.tokenizer
        cache = self._llm.vllm_config.cache_config
        self._num_blocks, self._block_size = int(cache.num_gpu_blocks), int(cache.block_size)
        base = load_profile(self._profile_spec)
        self.profile = replace(base, model=self.model, kv_capacity_tokens=self._num_blocks * self._block_size,
                               block_size=self._block_size, max_num_seqs=self.cfg.max_num_seqs,
                               max_model_len=self.cfg.max_model_len)
        self._admit_task = asyncio.get_running_loop().create_task(self._admit_forever())
        log.info("vllm_started", model_dir=self.model_dir, kv_blocks=self._num_blocks, block_size=self._block_size)

    async def close(self) -> None:
        if self._admit_task is not None:
            self._admit_task.cancel()
            await asyncio.gather(self._admit_task, return_exceptions=True)
        for request_id in list(self._running):
            await self.abort(request_id)
        if self._llm is not None:
            self._llm.shutdown()

    # -- requests ------------------------------------------------------------------------
    async def generate(self, call: GenerateCall) -> AsyncIterator[OutputDelta]:
        self.front.check_new(call.request_id)
        token_ids = self._tokenize(call)
        self._check_fits(len(token_ids), call.sampling.max_tokens)
        stream = self.front.serve(call, token_ids, self.abort,
                                  self._block_size if self.cfg.enable_prefix_caching else 0)
        try:
            async for delta in stream:
                assert isinstance(delta, OutputDelta)  # this backend grants no holds
                yield delta
        finally:
            await stream.aclose()  # runs the abort when the caller stopped reading early

    async def abort(self, request_id: str) -> bool:
        if self.front.abort_waiting(request_id):
            return True
        req = self._running.get(request_id)
        if req is None:
            return False
        self._aborted.add(request_id)
        await self._llm.abort(request_id)  # a no-op for an id vLLM has not been given yet
        return True

    @property
    def alive(self) -> bool:
        """vLLM's engine runs (``AsyncLLM.errored`` once its engine core died: every call would fail)."""
        return self._llm is not None and not self._llm.errored

    def status(self) -> BackendStatus:
        return BackendStatus(waiting=len(self.front.queue) + self._vllm_waiting, running=len(self._running),
                             kv_cache_usage=self._kv_usage, preemptions_total=self._preemptions_total,
                             active_request_ids=[*self.front.waiting, *self._running],
                             pending_prefill_tokens=self.front.pending_prefill_tokens())

    # -- admission into vLLM -------------------------------------------------------------
    def _has_room(self, req: EngineRequest) -> bool:
        return has_room(req, self._running.values(), self.cfg.max_num_seqs, self._kv_usage, self._num_blocks,
                        self._block_size, self.front.retained_tokens(req.program_id),
                        self.front.running_prompt_blocks)

    async def _admit_forever(self) -> None:
        while True:
            await self.front.wake.wait()
            self.front.wake.clear()
            for req, token_ids, call in self.front.admissible(self._has_room):
                self._start(req, token_ids, call)

    def _start(self, req: EngineRequest, token_ids: list[int], call: GenerateCall) -> None:
        """The admitted call given to vLLM, in a task of its own."""
        self._running[req.request_id] = req
        task = asyncio.get_running_loop().create_task(self._run(req, token_ids, call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, req: EngineRequest, token_ids: list[int], call: GenerateCall) -> None:
        first, reason = True, "abort"
        try:
            if req.request_id in self._aborted:  # aborted before vLLM was given it: never sent
                self.front.finish(req, reason)
                return
            from vllm.inputs import TokensPrompt

            async for out in self._llm.generate(TokensPrompt(prompt_token_ids=token_ids), self._sampling(call),
                                                request_id=req.request_id, priority=vllm_priority(req)):
                if req.request_id in self._aborted and not out.finished:  # aborted while vLLM took it
                    await self._llm.abort(req.request_id)
                completion = out.outputs[0]
                req.output_tokens += len(completion.token_ids)
                if out.finished:
                    reason = completion.finish_reason or "stop"
                    if reason in ENDED_BY_ITSELF:   # an aborted call's program keeps no room
                        req.finished_s = time.monotonic()
                self.front.put(req.request_id, OutputDelta(
                    req.request_id, completion.text, req.output_tokens, req.prompt_tokens, finished=out.finished,
                    finish_reason=reason if out.finished else "",
                    queued_s=(req.first_scheduled_s or req.arrival_s) - req.arrival_s if first else 0.0))
                first = False
                if out.finished:
                    return
            self.front.finish(req, reason)  # ended without a final output: aborted
        except Exception as exc:  # noqa: BLE001 - the caller gets UNAVAILABLE, the engine keeps serving
            log.exception("vllm_request_failed", request_id=req.request_id)
            self.front.put(req.request_id, Unavailable(f"vLLM failed the request: {type(exc).__name__}: {exc}"))
        finally:
            self._running.pop(req.request_id, None)
            self._aborted.discard(req.request_id)
            self.front.ended(req)
            self.front.wake.set()

    # -- helpers -------------------------------------------------------------------------
    def _tokenize(self, call: GenerateCall) -> list[int]:
        if call.prompt:
            return list(self._tokenizer.encode(call.prompt))
        messages = [{"role": r, "content": c} for r, c in call.messages]
        text = chat_text(self._tokenizer, messages)
        return list(self._tokenizer.encode(text, add_special_tokens=False))  # the template has its own

    def _check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        if prompt_tokens + max_tokens > self.cfg.max_model_len:
            raise InvalidArgument(f"prompt {prompt_tokens} + max_tokens {max_tokens} tokens exceeds max_model_len "
                                  f"{self.cfg.max_model_len}")
        check_admissible(prompt_tokens, max_tokens, self._num_blocks, self._block_size)

    @staticmethod
    def _sampling(call: GenerateCall) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        s = call.sampling
        kwargs: dict[str, Any] = {"max_tokens": s.max_tokens, "ignore_eos": s.ignore_eos,
                                  "stop": list(s.stop) or None, "output_kind": RequestOutputKind.DELTA}
        for name in OPTIONAL_SAMPLING_FIELDS:
            if getattr(s, name) is not None:
                kwargs[name] = getattr(s, name)
        return SamplingParams(**kwargs)

    def _stat_logger_factory(self) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        backend = self

        class HetflowStatLogger(StatLoggerBase):
            """Each record() is one vLLM engine step: one scheduling iteration for aging."""

            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                       engine_idx: int = 0) -> None:
                backend._on_step(scheduler_stats, iteration_stats)

            def log_engine_initialized(self) -> None:
                pass

        return HetflowStatLogger

    def _on_step(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        self.front.iteration += 1
        if scheduler_stats is not None:
            self._kv_usage = float(scheduler_stats.kv_cache_usage)
            self._vllm_waiting = int(scheduler_stats.num_waiting_reqs)
            cache = getattr(scheduler_stats, "prefix_cache_stats", None)
            if cache is not None:  # every admission, after a preemption too, as the engine model counts them
                self.prefix_cache_queries += int(cache.queries) + int(getattr(cache, "preempted_queries", 0))
                self.prefix_cache_hits += int(cache.hits) + int(getattr(cache, "preempted_hits", 0))
        if iteration_stats is not None:
            self._preemptions_total += int(getattr(iteration_stats, "num_preempted_reqs", 0))
        for req in self._running.values():  # one iteration of service: a promoted request nears demotion
            self.front.queue.note_running_iteration(req)
        if len(self.front.queue):
            self.front.wake.set()


def vllm_backend(cfg: EngineConfig, queue: AgingPriorityQueue) -> VllmBackend:
    """The ``vllm`` engine-backend plugin: an in-process vLLM AsyncLLM behind hetflow's queue."""
    return VllmBackend(cfg.model, cfg.vllm, queue, cfg.profile)

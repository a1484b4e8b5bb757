"""Continuous batching over paged KV blocks with preemption by recompute.

The contract is two calls (after vLLM v1's scheduler interface): ``schedule`` picks this
iteration's batch and ``update_from_step`` applies its outcome. Between them the caller spends the
iteration's time: the real-time sim backend sleeps ``plan.duration_s``, the virtual-time simulator
schedules an event. ``now_s`` is always passed in.

Per iteration: running requests first (each decodes one token, or continues a chunked prefill);
when a running request cannot get a KV block, the running request with the worst ordering key is
preempted (its blocks freed, its KV to be recomputed; vLLM's recompute preemption); then, if nothing
was preempted, waiting requests are admitted in queue order while the token budget, max_num_seqs and
free blocks allow. The queue head blocks the ones behind it (no skipping), so the order is the queue's.

A request that carries ``retain_kv_s`` keeps its program's KV when it finishes (issue 35; Continuum,
arXiv 2511.02230): its cached blocks stay held for the program until the program's next call here is
admitted (which finds them as a prefix hit), or until they expire, or until a running request needs a
block that only they can give (retained KV goes before any running request is preempted, the earliest
to expire first). Waiting requests cannot evict them: that is the room being kept. A vLLM engine cannot
pin blocks (``pins_retained_kv`` False): there the finished call's blocks are freed, cached, for vLLM's own
LRU to evict, and the program's context only counts as used room when waiting requests are admitted, as
hetflow's engine in front of a vLLM server keeps it (``engine_svc/backends/front_queue.py``).

A request that carries ``reserve_output_tokens`` is admitted only if, once it holds its first chunk, the
free blocks still cover what every running request with a reserve may yet take (its whole prompt and
its reserved output, less the blocks it holds) and its own such growth (issue 35: room reserved for
decode growth, so that the batch does not grow into preemptions). A request alone in the batch is
always admitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.kv_cache import KVBlockPool, growth_blocks_left
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.engine.request import EngineRequest, RequestStatus


@dataclass
class ScheduledChunk:
    request: EngineRequest
    num_tokens: int
    """Tokens computed this iteration: 1 for a decode, a prompt chunk for a prefill."""
    is_prefill: bool
    context_tokens: int
    """KV tokens already cached before this iteration (what a decode reads)."""


@dataclass
class StepPlan:
    iteration: int
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[EngineRequest] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks if c.is_prefill)

    @property
    def decode_seqs(self) -> int:
        return sum(1 for c in self.chunks if not c.is_prefill)

    @property
    def prefill_chunks(self) -> tuple[tuple[int, int], ...]:
        """Each prefill chunk's (tokens computed, tokens cached before them): what its attention reads."""
        return tuple((c.num_tokens, c.context_tokens) for c in self.chunks if c.is_prefill)

    @property
    def decode_context_tokens(self) -> int:
        return sum(c.context_tokens for c in self.chunks if not c.is_prefill)

    @property
    def is_empty(self) -> bool:
        return not self.chunks

    def duration_ms(self, profile: EngineProfile) -> float:
        """The profile's time for this batch: the properties above, gathered in one pass over the chunks
        (the scheduler times every iteration)."""
        prefill_tokens = decode_seqs = decode_context_tokens = 0
        prefill_chunks = []
        for c in self.chunks:
            if c.is_prefill:
                prefill_tokens += c.num_tokens
                prefill_chunks.append((c.num_tokens, c.context_tokens))
            else:
                decode_seqs += 1
                decode_context_tokens += c.context_tokens
        return profile.step_ms(prefill_tokens, decode_seqs, decode_context_tokens, tuple(prefill_chunks))


@dataclass
class TokenEvent:
    """A request produced a token (and maybe finished) at the end of an iteration."""

    request: EngineRequest
    finished: bool


class BatchScheduler:
    """One engine's continuous-batching state: queue, running batch, KV blocks, timing profile."""

    def __init__(self, profile: EngineProfile, queue: AgingPriorityQueue, prefix_caching: bool = True,
                 pins_retained_kv: bool = True) -> None:
        """``prefix_caching``: vLLM's automatic prefix caching, on by default as in vLLM v1.
        ``pins_retained_kv``: a retained program's blocks are pinned (hetflow's own engine), or freed and
        reserved at admission only (a vLLM engine)."""
        self.profile = profile
        self.pins_retained_kv = pins_retained_kv
        self.reserved_blocks: dict[str, int] = {}
        """Without pinning: each retained program's blocks, kept free of admissions (not of eviction)."""
        self.queue = queue
        self.kv = KVBlockPool(profile.num_kv_blocks, profile.block_size, prefix_caching)
        self.prefix_query_tokens = 0
        """Prompt tokens looked up in the prefix cache at admission (vLLM's prefix cache queries)."""
        self.prefix_hit_tokens = 0
        """Of those, tokens found in the cache (vLLM's prefix cache hits)."""
        self.running: list[EngineRequest] = []
        self.requests: dict[str, EngineRequest] = {}
        self.iteration = 0
        self.preemptions_total = 0
        self.retained_until_s: dict[str, float] = {}
        """Programs whose KV this engine keeps while they are in a tool call -> when it is released."""
        self.retained_released = {"resumed": 0, "expired": 0, "pressure": 0}
        """Retained KV let go so far, by why: the program's next call came, its time ran out, a running
        request needed the room."""

    # -- requests in and out -------------------------------------------------------------
    def add(self, req: EngineRequest) -> None:
        """Queue a request. Raises ValueError if it could never fit this engine."""
        total = req.prompt_tokens + req.output_limit
        if req.prompt_tokens < 1:
            raise ValueError("prompt must have at least one token")
        if total > self.profile.max_model_len:
            raise ValueError(f"prompt {req.prompt_tokens} + max_tokens {req.output_limit} tokens exceeds "
                             f"max_model_len {self.profile.max_model_len}")
        if total > self.kv.num_blocks * self.kv.block_size:
            raise MemoryError(f"request needs {total} KV tokens; engine holds {self.profile.kv_capacity_tokens}")
        self.requests[req.request_id] = req
        req.status, req.queued_since_s = RequestStatus.WAITING, req.arrival_s
        self.queue.push(req, self.iteration)

    def abort(self, request_id: str, now_s: float) -> EngineRequest | None:
        req = self.requests.pop(request_id, None)
        if req is None:
            return None
        self.queue.remove(request_id)
        if req in self.running:
            self.running.remove(req)
        self.kv.free(request_id)
        req.status, req.finish_reason, req.finished_s = RequestStatus.ABORTED, "abort", now_s
        return req

    def finish(self, req: EngineRequest, now_s: float) -> None:
        """``req`` produced its last token at ``now_s``: out of the batch, its blocks freed, or retained for
        its program for ``retain_kv_s``."""
        self.running.remove(req)
        if req.retain_kv_s > 0 and req.program_id:
            self.retained_until_s[req.program_id] = now_s + req.retain_kv_s
            if self.pins_retained_kv:
                self.kv.retain(req.request_id, _retained_key(req.program_id), req.block_hashes)
            else:
                self.reserved_blocks[req.program_id] = self.kv.held(req.request_id)
                self.kv.free(req.request_id)
        else:
            self.kv.free(req.request_id)
        self.requests.pop(req.request_id, None)
        req.status, req.finished_s = RequestStatus.FINISHED, now_s
        req.finish_reason = "length" if req.output_tokens >= req.max_tokens else "stop"

    def release_retained(self, program_id: str, why: str) -> None:
        """Let the program's retained KV go (cached blocks stay findable until evicted)."""
        if self.retained_until_s.pop(program_id, None) is not None:
            if self.reserved_blocks.pop(program_id, None) is None:
                self.kv.free(_retained_key(program_id))
            self.retained_released[why] += 1

    def release_expired(self, now_s: float) -> None:
        for program_id in [p for p, until_s in self.retained_until_s.items() if until_s <= now_s]:
            self.release_retained(program_id, "expired")

    def _reserved_for_others(self, program_id: str) -> int:
        """Without pinning: the blocks other retained programs' contexts keep free of admissions."""
        if not self.reserved_blocks:
            return 0
        return sum(blocks for p, blocks in self.reserved_blocks.items() if p != program_id)

    def _growth_blocks(self, req: EngineRequest) -> int:
        """Blocks ``req`` may still take up to its whole prompt and reserved output."""
        return growth_blocks_left(req.prompt_tokens, req.reserve_output_tokens, self.kv.held(req.request_id),
                                  self.kv.block_size)

    def reserved_growth_blocks(self) -> int:
        """Free blocks the running requests' reserves keep from admissions."""
        return sum(self._growth_blocks(req) for req in self.running)

    @property
    def has_work(self) -> bool:
        return bool(self.running) or len(self.queue) > 0

    @property
    def num_waiting(self) -> int:
        return len(self.queue)

    @property
    def pending_prefill_tokens(self) -> int:
        """Prompt tokens not yet computed: the waiting requests' (a preempted one recomputes its output
        too) and the running ones' unfinished chunked prefill."""
        return (sum(req.tokens_to_compute for req in self.queue.requests())
                + sum(max(0, req.prompt_tokens - req.num_computed_tokens) for req in self.running))

    # -- one iteration -------------------------------------------------------------------
    def schedule(self, now_s: float) -> StepPlan:
        self.iteration += 1
        self.queue.age(self.iteration)
        if self.retained_until_s:
            self.release_expired(now_s)
        plan = StepPlan(iteration=self.iteration)
        budget = self.profile.max_num_batched_tokens
        budget = self._schedule_running(plan, budget, now_s)
        if not plan.preempted:
            self._admit_waiting(plan, budget, now_s)
        if plan.chunks:
            plan.duration_s = plan.duration_ms(self.profile) / 1e3
        return plan

    def update_from_step(self, plan: StepPlan, now_s: float) -> list[TokenEvent]:
        events, kv, queue = [], self.kv, self.queue
        for chunk in plan.chunks:
            req = chunk.request
            if req.status != RequestStatus.RUNNING:
                continue  # aborted during the iteration
            computed = req.num_computed_tokens = req.num_computed_tokens + chunk.num_tokens
            kv.register_full_blocks(req.request_id, req.block_hashes, computed)
            queue.note_running_iteration(req)
            if computed < req.seq_len:
                continue  # a prefill chunk that is not the last
            req.output_tokens += 1
            if req.first_token_s is None:
                req.first_token_s = now_s
            finished = req.output_tokens >= req.output_limit
            if finished:
                self.finish(req, now_s)
            events.append(TokenEvent(req, finished))
        return events

    # -- internals -----------------------------------------------------------------------
    def _schedule_running(self, plan: StepPlan, budget: int, now_s: float) -> int:
        kv, chunks = self.kv, plan.chunks
        for req in list(self.running):
            if req.status != RequestStatus.RUNNING or budget <= 0:
                continue
            to_compute = req.tokens_to_compute
            num_tokens = min(to_compute, budget)
            while not kv.try_grow(req.request_id, req.num_computed_tokens + num_tokens):
                if self.retained_until_s:  # retained KV goes before a running request is preempted
                    self.release_retained(min(self.retained_until_s, key=self.retained_until_s.__getitem__),
                                          "pressure")
                    continue
                victim = max(self.running, key=lambda r: r.key)
                budget += self._preempt(victim, plan, now_s)
                chunks = plan.chunks  # the victim's chunk is gone
                if victim is req:
                    break
            if req.status != RequestStatus.RUNNING:
                continue
            chunks.append(ScheduledChunk(req, num_tokens, to_compute > 1, req.num_computed_tokens))
            budget -= num_tokens
        return budget

    def _admit_waiting(self, plan: StepPlan, budget: int, now_s: float) -> None:
        while budget > 0 and len(self.running) < self.profile.max_num_seqs:
            req = self.queue.peek()
            if req is None:
                return
            if not self.kv.held(req.request_id):
                hit_tokens = self.kv.acquire_prefix(req.request_id, req.block_hashes, req.prompt_tokens - 1)
                req.num_computed_tokens = hit_tokens  # the cached prefix skips prefill
            num_tokens = min(req.tokens_to_compute, budget)
            grown = req.num_computed_tokens + num_tokens
            if (self.kv.free_blocks - self.kv.extra_blocks_for(req.request_id, grown)
                    < self._reserved_for_others(req.program_id)   # checked before any block is taken (evicted)
                    or not self.kv.try_grow(req.request_id, grown)
                    or (req.reserve_output_tokens and self.running
                        and self.kv.free_blocks < self.reserved_growth_blocks() + self._growth_blocks(req))):
                self.kv.free(req.request_id)
                req.num_computed_tokens = 0
                return
            if req.program_id in self.retained_until_s:  # its blocks are the request's now
                self.release_retained(req.program_id, "resumed")
            self.prefix_query_tokens += req.prompt_tokens
            self.prefix_hit_tokens += req.num_computed_tokens
            req.prefix_hit_tokens += req.num_computed_tokens
            self.queue.pop()
            req.status = RequestStatus.RUNNING
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now_s
            req.queued_intervals_s.append((req.queued_since_s if req.queued_since_s is not None else now_s, now_s))
            req.queued_since_s = None
            self.running.append(req)
            plan.chunks.append(ScheduledChunk(req, num_tokens, True, req.num_computed_tokens))
            budget -= num_tokens

    def _preempt(self, req: EngineRequest, plan: StepPlan, now_s: float) -> int:
        """Evict ``req`` for recompute; returns the tokens it had been given this iteration."""
        self.running.remove(req)
        refunded = sum(c.num_tokens for c in plan.chunks if c.request is req)
        plan.chunks = [c for c in plan.chunks if c.request is not req]
        self.kv.free(req.request_id)
        req.num_computed_tokens = 0
        req.status, req.queued_since_s = RequestStatus.PREEMPTED, now_s
        req.preemptions += 1
        self.preemptions_total += 1
        plan.preempted.append(req)
        self.queue.push(req, self.iteration)
        return refunded


def _retained_key(program_id: str) -> str:
    """The KV pool's holder name for a program's retained blocks (never a request id: those are calls')."""
    return f"\x00retained/{program_id}"

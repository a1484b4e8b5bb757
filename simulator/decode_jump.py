"""Closed-form runs of decode iterations for the virtual-time engine (issue 32; docs/simulator-speed.md).

Between two events (a call arriving, a call finishing, a report, a KV block that cannot be had) a batch
of pure decodes does not change: each running request decodes one token per iteration, and an
iteration's time depends only on the batch's context, which grows by one token per request
(``EngineProfile.decode_run_ms``: an arithmetic series in closed form for the linear profile, one
array pass over the operator tables for a measured one). ``DecodeRun`` holds such a
run and brings the scheduler's state to any of its iterations in one pass over the running requests,
leaving it exactly as stepping iteration by iteration would have (``BatchScheduler.schedule`` and
``update_from_step``): the same tokens, KV blocks (evictions and cached blocks included), iteration
count, aging and preemption counts.

A run is only taken where stepping could not do anything else: every request in the batch decodes
(a prefill's last chunk of one token looks like a decode, but it yields the first token: stepped),
nobody was preempted, none finishes before the run's last iteration (the run ends at the first
finish, which ``finish`` applies), the free KV blocks cover every block the run fills, and no waiting
request could be admitted (the queue is empty, or the batch holds ``max_num_seqs``). With the batch
full, waiting requests age as they would (promotion is a key change only; it cannot admit them).

While a run goes on, the engine is read and fed without bringing it to the present: a status report
reads the one figure a run changes (KV blocks held, ``used_blocks``), and a request that arrives joins
the queue at the iteration in progress (``queue_during``); unless the batch is full, the run then ends
with that iteration, since the next one would admit it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.kv_cache import blocks_for
from hetflow.core.engine.request import EngineRequest, RequestStatus
from hetflow.core.engine.scheduler import BatchScheduler, StepPlan


@dataclass
class DecodeRun:
    """Iterations ``first.iteration`` .. ``first.iteration + iterations - 1`` of ``requests``, each a pure
    decode; ``first`` was scheduled at ``start_s`` (its blocks are held)."""

    first: StepPlan
    requests: list[EngineRequest]
    start_s: float
    iterations: int
    ends_s: np.ndarray
    """``ends_s[k]``: when the run's ``k``-th iteration ends (``ends_s[0]``: the run's start)."""
    held_at_start: list[tuple[int, int]]
    """Each request's (tokens computed, KV blocks held) as the run starts, its first iteration's blocks held."""
    used_blocks_at_start: int

    def used_blocks(self, done: int, block_size: int) -> int:
        """The engine's KV blocks in use once ``done`` iterations have ended and the next one is scheduled
        (``done`` < ``iterations``): a run only adds blocks, one per request at each block boundary."""
        return self.used_blocks_at_start + sum(max(0, blocks_for(c + done + 1, block_size) - h)
                                               for c, h in self.held_at_start)

    def end_s(self, done: int) -> float:
        """When the run's ``done``-th iteration ends (0: the run's start)."""
        return float(self.ends_s[done])

    def done_by(self, now_s: float) -> int:
        """Iterations of the run that have ended by ``now_s``."""
        return max(0, int(np.searchsorted(self.ends_s, now_s, side="right")) - 1)


def start(scheduler: BatchScheduler, plan: StepPlan, now_s: float) -> DecodeRun | None:
    """The longest run that begins with ``plan`` and that stepping would take unchanged, or None when
    it is a single iteration (nothing to jump)."""
    if plan.preempted or type(scheduler.queue) is not AgingPriorityQueue:
        return None
    if len(scheduler.queue) and len(scheduler.running) < scheduler.profile.max_num_seqs:
        return None  # a waiting request might be admitted at any iteration: step
    if len(plan.chunks) != len(scheduler.running) or plan.chunks[-1].is_prefill:
        return None  # the last chunk is the one admitted last: most plans that change the batch end so
    requests, tokens_left = [], []
    for chunk in plan.chunks:
        req = chunk.request
        if chunk.is_prefill or chunk.num_tokens != 1 or req.first_token_s is None:
            return None  # a prefill's last chunk of one token yields the first token, which stepping times
        requests.append(req)
        tokens_left.append(req.output_limit - req.output_tokens)
    # The plan's own iteration produces token output_tokens + 1 of each request; the run ends with the
    # first request's last token.
    iterations = min(tokens_left)
    if iterations < 2:
        return None
    kv = scheduler.kv
    held = [(r.num_computed_tokens, kv.held(r.request_id)) for r in requests]
    iterations = _kv_covers(kv.free_blocks, kv.block_size, held, iterations)
    if iterations < 2:
        return None
    ends_ms = scheduler.profile.decode_run_ms(len(requests), plan.decode_context_tokens, iterations)
    return DecodeRun(plan, requests, now_s, iterations, ends_s=now_s + ends_ms / 1e3, held_at_start=held,
                     used_blocks_at_start=kv.used_blocks)


def _kv_covers(free: int, size: int, held: list[tuple[int, int]], most: int) -> int:
    """How many iterations, the plan's included, ``free`` blocks cover, up to ``most``: iteration ``j``
    (1-based) grows each request to its computed tokens ``+ j`` (``held``: each request's computed tokens
    and blocks; the plan already holds iteration 1's). The blocks needed grow with ``j``, so a binary
    search finds the last ``j``."""

    def fits(j: int) -> bool:
        return sum(max(0, blocks_for(c + j, size) - h) for c, h in held) <= free

    if fits(most):
        return most  # the common case: the run ends at a finish, not for want of blocks
    low, high = 1, most - 1
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def queue_during(scheduler: BatchScheduler, run: DecodeRun, done: int, req: EngineRequest) -> bool:
    """Queue ``req`` while the run's iteration ``done + 1`` is in progress, as stepping would: its wait
    starts at that iteration (ValueError / MemoryError as ``BatchScheduler.add``). Returns whether the
    run must end with that iteration: the batch has room, so the next iteration admits it."""
    scheduler.iteration = run.first.iteration + done  # the iteration in progress; ``advance`` sets it again
    scheduler.add(req)
    return len(scheduler.running) < scheduler.profile.max_num_seqs


def advance(scheduler: BatchScheduler, run: DecodeRun) -> None:
    """Bring the scheduler to where stepping would be once the run's last iteration has ended, ready for
    ``schedule`` (the requests it finishes still running: ``finish``)."""
    kv, queue, done = scheduler.kv, scheduler.queue, run.iterations
    assert isinstance(queue, AgingPriorityQueue)
    for req in run.requests:  # the blocks the run's iterations held, as each one's ``schedule`` grew them
        if req.status != RequestStatus.RUNNING:
            raise RuntimeError(f"{req.request_id} left the batch during a decode run")
        req.num_computed_tokens += done
        req.output_tokens += done
        if not kv.try_grow(req.request_id, req.num_computed_tokens):
            raise RuntimeError("a decode run ran out of KV blocks it had counted on")
    for req in run.requests:  # then the blocks they filled, as each one's ``update_from_step`` registered them
        kv.register_full_blocks(req.request_id, req.block_hashes, req.num_computed_tokens)
        _note_running(queue, req, done)
    scheduler.iteration = run.first.iteration + done - 1
    queue.age(scheduler.iteration)


def finish(scheduler: BatchScheduler, run: DecodeRun, now_s: float) -> list[EngineRequest]:
    """At the run's end (after ``advance`` to its last iteration): the requests whose last token it
    produced finish there, in batch order, as ``update_from_step`` finishes them."""
    finished = [req for req in run.requests if req.output_tokens >= req.output_limit]
    for req in finished:
        scheduler.finish(req, now_s)
    return finished


def _note_running(queue: AgingPriorityQueue, req: EngineRequest, iterations: int) -> None:
    """``note_running_iteration`` ``iterations`` times, in closed form."""
    if req.starvation_level >= 0 or iterations <= 0:
        return
    left = queue.running_quantum - req.promoted_run_iterations
    if iterations >= left:
        req.starvation_level += 1
        req.promoted_run_iterations = 0
    else:
        req.promoted_run_iterations += iterations

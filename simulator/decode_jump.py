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
nobody was preempted, none finishes before the run's last iteration, the free KV blocks cover every
block the run fills, and no waiting request could be admitted (the queue is empty, or the batch holds
``max_num_seqs``). With the batch full, waiting requests age as they would (promotion is a key change
only; it cannot admit them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.kv_cache import blocks_for
from hetflow.core.engine.request import EngineRequest, RequestStatus
from hetflow.core.engine.scheduler import BatchScheduler, ScheduledChunk, StepPlan


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
    requests = [c.request for c in plan.chunks]
    if len(requests) != len(scheduler.running) or any(c.is_prefill or c.num_tokens != 1 for c in plan.chunks):
        return None
    if any(r.first_token_s is None for r in requests):
        return None  # a prefill's last chunk of one token: it yields the first token, which stepping times
    if len(scheduler.queue) and len(scheduler.running) < scheduler.profile.max_num_seqs:
        return None  # a waiting request might be admitted at any iteration: step
    # The plan's own iteration produces token output_tokens + 1 of each request; none may finish
    # before the run's last iteration, so the run ends one iteration before the first finish.
    iterations = min(r.output_limit - r.output_tokens for r in requests) - 1
    if iterations < 2:
        return None
    iterations = _kv_covers(scheduler, requests, iterations)
    if iterations < 2:
        return None
    ends_ms = scheduler.profile.decode_run_ms(len(requests), plan.decode_context_tokens, iterations)
    return DecodeRun(plan, requests, now_s, iterations, ends_s=now_s + ends_ms / 1e3)


def _kv_covers(scheduler: BatchScheduler, requests: list[EngineRequest], most: int) -> int:
    """How many iterations, the plan's included, the free blocks cover, up to ``most``: iteration ``j``
    (1-based) grows each request to ``num_computed_tokens + j`` tokens (the plan already holds
    iteration 1's blocks). The blocks needed grow with ``j``, so a binary search finds the last ``j``."""
    kv = scheduler.kv
    free, size = kv.free_blocks, kv.block_size
    held = [(r.num_computed_tokens, kv.held(r.request_id)) for r in requests]

    def fits(j: int) -> bool:
        return sum(max(0, blocks_for(c + j, size) - h) for c, h in held) <= free

    low, high = 1, most
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def advance(scheduler: BatchScheduler, run: DecodeRun, done: int) -> StepPlan | None:
    """Bring the scheduler to where stepping would be once ``done`` iterations of the run have ended:
    with the next one scheduled and its plan returned when it is still the run's (``done`` <
    ``run.iterations``), or, at the run's end, ready for ``schedule`` (None)."""
    if done == 0:
        return run.first
    kv, queue = scheduler.kv, scheduler.queue
    assert isinstance(queue, AgingPriorityQueue)
    for req in run.requests:
        if req.status != RequestStatus.RUNNING:
            raise RuntimeError(f"{req.request_id} left the batch during a decode run")
        req.num_computed_tokens += done
        req.output_tokens += done
        kv.register_full_blocks(req.request_id, req.block_hashes, req.num_computed_tokens)
        _note_running(queue, req, done)
    in_run = done < run.iterations
    for req in run.requests:  # the blocks the last scheduled iteration holds
        if not kv.try_grow(req.request_id, req.num_computed_tokens + in_run):
            raise RuntimeError("a decode run ran out of KV blocks it had counted on")
    scheduler.iteration = run.first.iteration + done - (not in_run)
    queue.age(scheduler.iteration)
    if not in_run:
        return None
    plan = StepPlan(iteration=scheduler.iteration,
                    chunks=[ScheduledChunk(r, 1, False, r.num_computed_tokens) for r in run.requests])
    plan.duration_s = scheduler.profile.step_ms(0, len(plan.chunks), plan.decode_context_tokens) / 1e3
    return plan


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

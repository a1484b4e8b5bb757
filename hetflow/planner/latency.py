"""Sim(w_i, f_i): the p95 latency of one model type's requests under an allocation and a parallelism
strategy (Cascadia 3.2, appendix B), on hetflow's own engine model.

Cascadia's simulator dispatches round-robin over a model type's replicas and serves each replica's
queue first come, first served with continuous batching bounded by KV memory (appendix B). Under
round-robin each of ``dp`` identical replicas sees every ``dp``-th request, so one replica is simulated
with the arrival rate divided by ``dp``; within a replica, requests alternate over its ``pp`` virtual
engines (``hetflow.planner.parallelism``). The engines are ``simulator.engine.VirtualEngine``: the
same scheduler, KV blocks and preemption as the live and simulated engines, in virtual time.

A short run cannot show a queue that grows without bound, so a rate past what the engines serve in
steady state (``capacity_per_s``, a fluid bound: a full batch's iteration time shared by its
sequences, plus each request's prefill) is unstable, latency ``inf``, before anything is simulated.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

from hetflow.core.engine.profile import EngineProfile
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.engine.request import EngineRequest
from simulator.clock import EventLoop
from simulator.engine import VirtualEngine

FCFS = QueueConfig("priority")
"""Priority = arrival time: first come, first served (Cascadia appendix B)."""
UNSTABLE_S = math.inf


@dataclass(frozen=True)
class LengthSample:
    """One request's prompt and output length on the model type being simulated."""

    input_tokens: int
    output_tokens: int


def capacity_per_s(profile: EngineProfile, lengths: Sequence[LengthSample]) -> float:
    """Requests per second one engine serves in steady state: the batch as large as ``max_num_seqs``
    and KV allow at the sample's mean lengths, each request paying its prefill and its share of the
    batch's decode iterations (``EngineProfile.steady_call_ms``)."""
    mean_in = sum(s.input_tokens for s in lengths) / len(lengths)
    mean_out = sum(s.output_tokens for s in lengths) / len(lengths)
    return 1e3 / profile.steady_call_ms(mean_in, 0.0, mean_out)


def p95_latency_s(profile: EngineProfile, dp: int, pp: int, lengths: Sequence[LengthSample], rate_per_s: float,
                  requests: int = 300, seed: int = 0, queue_limit: int = 512, decode_runs: bool = True) -> float:
    """p95 of request latency (arrival to last token) on one of ``dp`` replicas of ``pp`` virtual
    engines, Poisson arrivals at ``rate_per_s / dp``, lengths drawn from ``lengths``. ``inf`` when the
    replica cannot keep up (more than ``queue_limit`` requests waiting: the queue grows without bound)
    or a request can never fit it. ``decode_runs``: the simulator's fast path (the same latencies;
    False steps every iteration, the reference)."""
    if not lengths or rate_per_s <= 0:
        return 0.0
    if rate_per_s / (dp * pp) >= capacity_per_s(profile, lengths):
        return UNSTABLE_S
    rng = random.Random(seed)
    loop = EventLoop()
    latencies: list[float] = []
    engines = [VirtualEngine(f"v{k}", profile.model, profile, FCFS, loop,
                             lambda req: latencies.append(loop.now - req.arrival_s), decode_runs=decode_runs)
               for k in range(pp)]
    overflow = False

    def arrive(k: int, sample: LengthSample) -> None:
        nonlocal overflow
        engine = engines[k % pp]
        if overflow or engine.scheduler.num_waiting > queue_limit:
            overflow = True
            return
        req = EngineRequest(request_id=f"r{k}", prompt_tokens=max(1, sample.input_tokens),
                            max_tokens=max(1, sample.output_tokens), priority=loop.now, arrival_s=loop.now,
                            target_output_tokens=max(1, sample.output_tokens))
        try:
            engine.submit(req)
        except (ValueError, MemoryError):
            overflow = True

    t = 0.0
    for k in range(requests):
        t += rng.expovariate(rate_per_s / dp)
        loop.at(t, arrive, k, lengths[rng.randrange(len(lengths))])
    loop.run()
    if overflow or len(latencies) < requests:
        return UNSTABLE_S
    return p95_s(latencies)


def p95_s(latencies_s: Sequence[float]) -> float:
    """The nearest-rank 95th percentile: the smallest latency at least 95% of them do not exceed."""
    ordered = sorted(latencies_s)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]

"""The RL router's state (load-balancer paper, 4.3 and C.10), as a fixed-length vector for the DQN, built
from the balancer's cluster snapshot, so the balancer, the simulator's harness and the training
environment compute it with this same code.

Per instance (6 values with C.10's three decode buckets): the requests in their prompt phase, the requests
in their decode phase per decode bucket (the paper's P_t and D_t rows, a single prompt bucket), the
capacity available C = g(batch size, P, D), the smaller of the free batch slots' and the free KV's shares,
and the estimated time until its earliest request completes (T-hat_c). For the queue (4 values): its
length w_q (capped at 4 x the batch size, C.10), whether a request is next, its prompt tokens p_t and its
decode bucket d_t. Counts are shares of the batch size and tokens of the context window, so every value
is about 0-1 (T-hat_c in seconds); capacity and completion time are rounded to two decimals (C.10).

The snapshot knows each in-flight call's prompt, prediction and admit time (the monitor's accounting),
and each engine's last report; the phases are estimated from them: the newest calls, as many as the
engine reported waiting plus those dispatched since, are in their prompt phase (an FCFS engine starts
calls in arrival order); the others have decoded one token per iteration since their admit, an
iteration timed by the engine's profile at its current batch (section 3's model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetflow.core.rl_router.decode_bucket import Buckets
from hetflow.core.snapshot import EngineView, InFlightCall

QUEUE_CAP_BATCHES = 4
"""C.10: the waiting queue given to the DQN is bounded at 4 x the batch size."""
QUEUE_VALUES = 4
VALUES_PER_INSTANCE_BESIDES_BUCKETS = 3


@dataclass(frozen=True)
class NextRequest:
    """The request at the head of the router's queue: p_t and its predicted decode tokens (for d_t)."""

    prompt_tokens: int
    predicted_decode_tokens: float


def state_dim(instances: int, buckets: Buckets) -> int:
    return QUEUE_VALUES + instances * (VALUES_PER_INSTANCE_BESIDES_BUCKETS + buckets.count)


def iteration_s(engine: EngineView, decoding: Sequence[InFlightCall]) -> float:
    """One decode iteration of the engine's current batch, from its profile (section 3); the view's
    full-batch figure for an engine without a profile."""
    if engine.profile is None:
        return engine.decode_ms_per_token / 1e3
    context = sum(c.prompt_tokens + c.predicted_tokens / 2 for c in decoding)
    return engine.profile.step_ms(0, len(decoding), int(context)) / 1e3


def phases(engine: EngineView) -> tuple[list[InFlightCall], list[InFlightCall]]:
    """(prompt phase, decode phase) of the engine's in-flight calls (module docstring)."""
    calls = list(engine.in_flight_calls)
    prompting = min(len(calls), engine.waiting + engine.dispatched_since_report)
    return calls[len(calls) - prompting:], calls[:len(calls) - prompting]


def free_share(engine: EngineView) -> float:
    """C: the smaller of the free batch slots' and the free KV's shares (KV reported in use and prompts
    dispatched but not yet prefilled), at least 0."""
    slots = 1.0 - engine.in_flight_requests / max(1, engine.max_batch_size)
    kv = 1.0 - engine.kv_cache_usage - engine.pending_prefill_tokens / max(1, engine.kv_capacity_tokens)
    return max(0.0, min(slots, kv))


def instance_features(engine: EngineView, now_s: float, buckets: Buckets) -> list[float]:
    seqs = max(1, engine.max_batch_size)
    prompting, decoding = phases(engine)
    step_s = iteration_s(engine, decoding)
    decode_counts = [0] * buckets.count
    left_s = []
    for call in decoding:
        decode_counts[buckets.of(int(call.predicted_tokens))] += 1
        produced = (now_s - call.admitted_s) / step_s if step_s > 0 else 0.0
        left_s.append(max(0.0, call.predicted_tokens - produced) * step_s)
    return [len(prompting) / seqs, *(c / seqs for c in decode_counts), round(free_share(engine), 2),
            round(min(left_s, default=0.0), 2)]


def state_vector(queue_length: int, next_request: NextRequest | None, engines: Sequence[EngineView],
                 now_s: float, buckets: Buckets, max_model_len: int) -> list[float]:
    """The state s_t (module docstring): the queue's 4 values, then each instance's, in the given order."""
    cap = QUEUE_CAP_BATCHES * max((e.max_batch_size for e in engines), default=1)
    queue = [min(queue_length, cap) / cap, float(next_request is not None),
             min(1.0, next_request.prompt_tokens / max_model_len) if next_request else 0.0,
             (buckets.of(int(next_request.predicted_decode_tokens)) / max(1, buckets.count - 1))
             if next_request else 0.0]
    return queue + [x for engine in engines for x in instance_features(engine, now_s, buckets)]


def permute_instances(state: Sequence[float], order: Sequence[int], buckets: Buckets) -> list[float]:
    """The state with its instance rows in ``order`` (row j of the result is row ``order[j]``): on
    homogeneous instances (4.3) the same situation, relabelled, which training uses to learn each
    instance's value from every other's experience."""
    width = VALUES_PER_INSTANCE_BESIDES_BUCKETS + buckets.count
    rows = [state[QUEUE_VALUES + i * width: QUEUE_VALUES + (i + 1) * width] for i in range(len(order))]
    return list(state[:QUEUE_VALUES]) + [x for i in order for x in rows[i]]


def permute_actions(actions: Sequence[int], order: Sequence[int]) -> list[int]:
    """``actions`` in the state ``permute_instances`` relabels by ``order``: instance ``order[j]`` is
    action ``j`` there; no action (past the instances) stays."""
    return [order.index(a) if a < len(order) else a for a in actions]

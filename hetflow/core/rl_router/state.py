"""The RL router's state (load-balancer paper, 4.3 and C.10), as a fixed-length vector for the DQN.

Per instance (6 values with C.10's three decode buckets): the requests in their prompt phase, the requests
in their decode phase per decode bucket (the paper's P_t and D_t rows; a single prompt bucket), the
capacity available C = g(batch size, P, D), taken as the smaller of the free batch slots' and the free KV's
shares, and the estimated time until its earliest request completes (T-hat_c). For the queue (4 values):
its length w_q (capped at 4 x the batch size, C.10), whether a request is next, its prompt tokens p_t and
its decode bucket d_t. Counts are shares of the batch size and tokens of the context window, so every value
is about 0-1; capacity and completion time are rounded to two decimals (C.10). Time, here, is the
instance's decode iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetflow.core.rl_router.decode_bucket import Buckets

QUEUE_CAP_BATCHES = 4
"""C.10: the waiting queue given to the DQN is bounded at 4 x the batch size."""


@dataclass(frozen=True)
class InFlight:
    prompt_tokens: int
    prefilled_tokens: int
    output_tokens: int
    predicted_decode_tokens: float

    @property
    def in_prompt_phase(self) -> bool:
        return self.prefilled_tokens < self.prompt_tokens


@dataclass(frozen=True)
class InstanceView:
    in_flight: tuple[InFlight, ...]
    max_num_seqs: int
    free_kv_share: float
    iteration_s: float
    """The instance's decode iteration time: T-hat_c counts iterations left in it (section 3)."""


@dataclass(frozen=True)
class NextRequest:
    prompt_tokens: int
    decode_bucket: int


def instance_features(view: InstanceView, buckets: Buckets) -> list[float]:
    seqs = max(1, view.max_num_seqs)
    prompt_phase = sum(r.in_prompt_phase for r in view.in_flight)
    decode_counts = [0] * buckets.count
    left_s = []
    for r in view.in_flight:
        if not r.in_prompt_phase:
            decode_counts[buckets.of(int(r.predicted_decode_tokens))] += 1
            left_s.append(max(0.0, r.predicted_decode_tokens - r.output_tokens) * view.iteration_s)
    capacity = min(1.0 - len(view.in_flight) / seqs, view.free_kv_share)
    return [prompt_phase / seqs, *(c / seqs for c in decode_counts), round(max(0.0, capacity), 2),
            round(min(left_s, default=0.0), 2)]


def state_vector(queue_length: int, next_request: NextRequest | None, instances: Sequence[InstanceView],
                 buckets: Buckets, max_model_len: int) -> list[float]:
    """The state s_t (module docstring): the queue's 4 values, then each instance's, in the given order."""
    cap = QUEUE_CAP_BATCHES * max(v.max_num_seqs for v in instances) if instances else 1
    queue = [min(queue_length, cap) / cap, float(next_request is not None),
             (next_request.prompt_tokens / max_model_len) if next_request else 0.0,
             (next_request.decode_bucket / max(1, buckets.count - 1)) if next_request else 0.0]
    return queue + [x for view in instances for x in instance_features(view, buckets)]

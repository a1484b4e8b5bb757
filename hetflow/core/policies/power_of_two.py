"""Engine choice: the power of two choices (vLLM's router ``power_of_two``; a rival door).

vllm-project/router 0.1.17 ``src/policies/power_of_two.rs``: two different healthy workers drawn uniformly
at random, the one with the lower load wins, the first drawn on a tie (``load1 <= load2``). The load is
the router's own count of requests in flight per worker (vLLM serves no ``/get_load``, the cached figure
the router would prefer). Envoy's ``LEAST_REQUEST`` with ``choice_count: 2``, the replica choice of vLLM's
Semantic Router with ``reliability.lb_policy: least_request``, is the same rule.

Difference, named: the draw hashes the request id, so a run repeats (the router draws from a thread RNG).
"""

from __future__ import annotations

import hashlib

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot


def two_draws(request_id: str, count: int) -> tuple[int, int]:
    """Two different indices in 0..count-1 (the same twice only when count is 1), uniform, from the id."""
    digest = hashlib.blake2b(request_id.encode(), digest_size=16).digest()
    first = int.from_bytes(digest[:8], "big") % count
    if count == 1:
        return first, first
    second = int.from_bytes(digest[8:], "big") % (count - 1)
    return first, second + (second >= first)


@plugin("engine-picker", "power-of-two")
class PowerOfTwo(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = sorted(healthy_or_unavailable(snapshot, model), key=lambda e: e.engine_id)
        i, j = two_draws(call.request_id, len(engines))
        first, second = engines[i], engines[j]
        loads = {first.engine_id: float(first.in_flight_requests), second.engine_id: float(second.in_flight_requests)}
        chosen = first if first.in_flight_requests <= second.in_flight_requests else second
        return Choice(chosen.engine_id, "power-of-two:lower-in-flight", loads=loads)

"""Engine choice: SGLang's cache-aware router (a rival; ``sgl-model-gateway/src/policies/cache_aware.rs``).

With ``load`` the router's count of requests in flight per worker (the monitor's, over every balancer):
1. the load is imbalanced when ``max - min > balance_abs_threshold`` and ``max > min *
   balance_rel_threshold``: the least-loaded worker;
2. else, with ``match_rate`` the share of the prompt the best-matching worker holds: above
   ``cache_threshold``, that worker; otherwise the least-loaded one (since sglang PR #14650; before, the
   worker with the smallest tree).
Defaults are the ones users get from its launcher and CLI (``router_args.py``, ``main.rs``): 0.3, 64,
1.5. vLLM's router runs the same policy, its CLI default (vllm-project/router 0.1.17
``src/policies/cache_aware.rs``, the same launcher defaults), with one difference: among the workers of
the best match it takes the least loaded (``best_match_tiebreak: least-load``). Differences, named:
the match is over 16-token blocks of the monitor's index of what each engine
was sent (SGLang keeps a character radix tree per model, shared by its workers, updated at routing
as the index is); among equal best matches the first by id wins (SGLang: the tree's first tenant), and
among equal loads too.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot


@plugin("engine-picker", "cache-aware")
class CacheAware(EnginePicker):
    reads_prefix = True

    def __init__(self, cache_threshold: float = 0.3, balance_abs_threshold: int = 64,
                 balance_rel_threshold: float = 1.5, best_match_tiebreak: str = "first") -> None:
        if not 0.0 <= cache_threshold <= 1.0 or balance_abs_threshold < 0 or balance_rel_threshold < 1.0:
            raise ValueError("cache-aware needs 0 <= cache_threshold <= 1, balance_abs_threshold >= 0 and "
                             "balance_rel_threshold >= 1")
        if best_match_tiebreak not in ("first", "least-load"):
            raise ValueError(f"cache-aware's best_match_tiebreak is first or least-load, got {best_match_tiebreak!r}")
        self.best_match_tiebreak = best_match_tiebreak
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold, self.balance_rel_threshold = balance_abs_threshold, balance_rel_threshold

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = sorted(healthy_or_unavailable(snapshot, model), key=lambda e: e.engine_id)
        loads = {e.engine_id: float(e.in_flight_requests) for e in engines}
        least = min(engines, key=lambda e: loads[e.engine_id]).engine_id
        high, low = max(loads.values()), min(loads.values())
        params = {"cache_threshold": self.cache_threshold, "balance_abs_threshold": self.balance_abs_threshold,
                  "balance_rel_threshold": self.balance_rel_threshold}
        if high - low > self.balance_abs_threshold and high > low * self.balance_rel_threshold:
            return Choice(least, "sglang:imbalanced:least-load", loads=loads, params=params)
        total = len(call.prefix_blocks)
        rates = {e.engine_id: e.prefix_match_blocks / total if total else 0.0 for e in engines}
        best = max(engines, key=lambda e: rates[e.engine_id]).engine_id
        if self.best_match_tiebreak == "least-load":
            best = min((e.engine_id for e in engines if rates[e.engine_id] == rates[best]), key=lambda k: loads[k])
        if rates[best] > self.cache_threshold:
            return Choice(best, "sglang:cache-hit", scores=rates, loads=loads, params=params)
        return Choice(least, "sglang:cache-miss:least-load", scores=rates, loads=loads, params=params)

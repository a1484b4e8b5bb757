"""Engine choice: consistent hashing on the session (vLLM's router ``consistent_hash``; a rival door).

vllm-project/router 0.1.17 ``src/policies/consistent_hash.rs`` and ``hash_key.rs``: a ring of 160 virtual
nodes per worker (hard-coded), the first point at or after the key's hash; the key is the first of the
session headers ``x-session-id``, ``x-user-id``, ... that the request carries. No load is read; a target
that is down gives way to the first healthy worker. Its docs recommend it for "multi-turn chat, KV cache
reuse", with the session passed as a header: here every call of a program carries its program id as
``x-session-id``, as agent frameworks send theirs.

Difference, named: the ring hashes with blake2b (the router: FurcHash, then MurmurHash64A), as good as
random for placement; the ring is the one of ``program_ledger.HashRing``, which vLLM's Program scheduling
binds programs with.
"""

from __future__ import annotations

import functools

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.policies.program_ledger import HASH_VIRTUAL_NODES, HashRing
from hetflow.core.snapshot import ClusterSnapshot


@functools.lru_cache(maxsize=64)
def ring(engine_ids: tuple[str, ...]) -> HashRing:
    """The ring over these workers, built once for each worker list (the router rebuilds it when the list changes)."""
    return HashRing(list(engine_ids), HASH_VIRTUAL_NODES)


@plugin("engine-picker", "consistent-hash")
class ConsistentHash(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        every = tuple(sorted(e.engine_id for e in snapshot.engines if not model or e.model == model))
        healthy = sorted(e.engine_id for e in healthy_or_unavailable(snapshot, model))
        target = ring(every).home(f"x-session-id:{call.workflow.program_id}")
        if target in healthy:
            return Choice(target, "consistent-hash:session")
        return Choice(healthy[0], "consistent-hash:target-down:first-healthy")

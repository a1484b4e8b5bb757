"""Scorer: a continuing call's home engine, only while its KV has room for the call.

``program-affinity`` scores every engine by the share of a continuing call's prompt it holds, whatever
that engine's KV: at a weight that keeps programs home (text-to-SQL's pipelines, where a call that
leaves prefills its context again), it also holds calls on a home whose KV is full, and the batch
preempts (docs/results.md, "Program affinity at weight 10 on every family's evaluation seeds": 0.963x the
default's capacity on the agent family's KV-bound pool). This scorer adds to it the pull home only where
home can take the call without preempting: the call's uncached prompt and predicted output fit in
``kv_fraction`` of the home engine's KV beside what its running calls and pending prefills hold (vLLM's
``kv_cache_usage`` and the prompts dispatched since its last report). Elsewhere it scores 0, and the
load scorers decide as they would.

The same locality as vLLM's router's program binding (a program's calls on its home rank) and Autellix's
(a program's long prompts on its engine), with the escape Kairos's memory packer (6) makes for a call
whose engine lacks the room: HBM it would have to preempt for is not a place to keep it.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction
from hetflow.core.policies.scorers.prefix_affinity import PrefixAffinity
from hetflow.core.rl_router.hold import free_kv_tokens
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "program-home-with-room")
class ProgramHomeWithRoom(EngineScorer):
    reads_prefix = True

    def __init__(self, max_prefix_blocks: int = 256, kv_fraction: float = 1.0) -> None:
        if not 0.0 < kv_fraction <= 1.0:
            raise ValueError(f"program-home-with-room needs kv_fraction in (0, 1], got {kv_fraction}")
        self.prefix = PrefixAffinity(max_prefix_blocks)
        self.kv_fraction = kv_fraction

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        scores = {e.engine_id: 0.0 for e in engines}
        if not snapshot.program_dispatches:
            return scores
        home_id = snapshot.program_dispatches[-1][0]
        home = next((e for e in engines if e.engine_id == home_id), None)
        if home is None:
            return scores
        cached_share = self.prefix.score(call, [home], snapshot, prediction, store)[home_id]
        if has_room(home, call_kv_tokens(call, prediction, cached_share), self.kv_fraction):
            scores[home_id] = cached_share
        return scores


def call_kv_tokens(call: LlmCall, prediction: Prediction, cached_share: float) -> float:
    """The KV tokens the call adds on an engine holding ``cached_share`` of its prompt: the rest of the prompt
    and its predicted output."""
    return call.input_tokens * (1.0 - cached_share) + call_output_tokens(call, prediction)


def has_room(engine: EngineView, need_tokens: float, kv_fraction: float) -> bool:
    """Whether ``need_tokens`` fit in ``kv_fraction`` of the engine's KV beside its running calls' and its pending
    prefills'; an engine of unknown size always has room."""
    if not engine.kv_capacity_tokens:
        return True
    return need_tokens <= free_kv_tokens(engine) - (1.0 - kv_fraction) * engine.kv_capacity_tokens

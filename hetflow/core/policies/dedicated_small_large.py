"""Dedicated small-large (load-balancer paper, C.2.4): some instances serve only heavy-decode requests,
the others only light ones. A request is heavy-decode when its predicted decode time on the engine's
profile reaches ``heavy_decode_s`` (section 3: 5 s; ``hetflow.core.rl_router.request_class``); the
model's engines, by id, split in half (the first half takes heavy decodes), and within its half the call
goes to the engine with the fewest in-flight tokens. With one engine, that engine. The paper's example of
a routing that "can severely harm performance"; a baseline of issue 16."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.rl_router.request_class import ClassThresholds, decode_s
from hetflow.core.snapshot import ClusterSnapshot, EngineView

HEAVY_DECODE_S = ClassThresholds.heavy_decode_s


def heavy_decode(engine: EngineView, decode_tokens: float, heavy_decode_s: float) -> bool:
    """Section 3's heavy decode on the engine's profile (its reported iteration time without one)."""
    seconds = (decode_s(int(decode_tokens), engine.profile) if engine.profile is not None
               else decode_tokens * engine.decode_ms_per_token / 1e3)
    return seconds >= heavy_decode_s


@plugin("engine-picker", "dedicated-small-large")
class DedicatedSmallLarge(EnginePicker):
    def __init__(self, heavy_decode_s: float = HEAVY_DECODE_S) -> None:
        self.heavy_decode_s = heavy_decode_s

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = sorted(healthy_or_unavailable(snapshot, model), key=lambda e: e.engine_id)
        heavy = heavy_decode(engines[0], call_output_tokens(call, prediction), self.heavy_decode_s)
        half = max(1, len(engines) // 2)
        pool = (engines[:half] if heavy else engines[half:]) or engines
        best = min(pool, key=lambda e: (e.in_flight_tokens, e.engine_id))
        return Choice(best.engine_id, "dedicated:heavy-decode" if heavy else "dedicated:light-decode",
                      loads={e.engine_id: e.in_flight_tokens for e in pool},
                      params={"heavy_decode_s": self.heavy_decode_s})

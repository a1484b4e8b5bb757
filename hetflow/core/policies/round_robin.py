"""Round robin over the pool's healthy engines: a baseline with no load or model awareness.

The one stateful policy: its counter is the store it persists (per balancer process).
"""

from __future__ import annotations

import itertools
from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.errors import Unavailable
from hetflow.core.policies import Choice, Prediction, register
from hetflow.core.snapshot import ClusterSnapshot


class _Turns:
    def __init__(self) -> None:
        self._counter = itertools.count()

    def next_of(self, engine_ids: list[str]) -> str:
        if not engine_ids:
            raise Unavailable("no healthy engine")
        return sorted(engine_ids)[next(self._counter) % len(engine_ids)]


@register("model", "round-robin")
class RoundRobinModel:
    """Model stage: the model of the next engine in turn over the whole pool."""

    needs_router = False
    program_affinity = False

    def __init__(self) -> None:
        self._turns = _Turns()

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float]) -> Choice:
        engine_id = self._turns.next_of([e.engine_id for e in snapshot.healthy_engines()])
        return Choice(next(e.model for e in snapshot.engines if e.engine_id == engine_id), f"round-robin:{engine_id}")


@register("engine", "round-robin")
class RoundRobinEngine:
    def __init__(self) -> None:
        self._turns = _Turns()

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction | None = None
             ) -> Choice:
        return Choice(self._turns.next_of([e.engine_id for e in snapshot.healthy_engines(model)]), "round-robin")

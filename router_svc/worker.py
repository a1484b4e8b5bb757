"""Router worker process: holds one scorer, scores batches."""

from __future__ import annotations

from typing import Any, Mapping

from router_svc.scorers import Scorer, build_scorer

_scorer: Scorer | None = None


def init(spec: Mapping[str, Any]) -> None:
    global _scorer
    _scorer = build_scorer(spec)


def score_batch(prompts: list[str]) -> list[tuple[dict[str, float], bool]]:
    assert _scorer is not None, "worker not initialised"
    return _scorer.score_batch(prompts)

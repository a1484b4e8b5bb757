"""Router scorers: map a batch of prompts to per-model confidence q[m] (Chimera 3.3)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol


class Scorer(Protocol):
    kind: str
    models: tuple[str, ...]

    def score_batch(self, prompts: list[str]) -> list[tuple[dict[str, float], bool]]:
        """One (confidence per model, prompt truncated?) per prompt."""
        ...


def build_scorer(spec: Mapping[str, Any]) -> Scorer:
    kind = spec["kind"]
    if kind == "fixed-prior":
        from router_svc.scorers.fixed_prior import FixedPriorScorer

        return FixedPriorScorer(dict(spec["models"]))
    if kind == "minilm-onnx":
        from router_svc.scorers.onnx_router import OnnxRouterScorer

        if not spec.get("artifact"):
            raise ValueError("router.kind 'minilm-onnx' needs router.artifact (train one with `hetflow train router`)")
        return OnnxRouterScorer(spec["artifact"], list(spec["models"]), spec.get("precision", "int8"),
                                spec.get("threads", 1), spec.get("micro_batch", 4))
    raise ValueError(f"router.kind must be one of ['fixed-prior', 'minilm-onnx'], got {kind!r}")

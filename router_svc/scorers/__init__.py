"""Router scorers: map a batch of prompts to per-model confidence q[m] (Chimera 3.3), each a
``router-scorer`` plugin (``hetflow.core.plugins``), imported when built."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from hetflow.core import plugins

plugins.declare("router-scorer", "fixed-prior", "router_svc.scorers.fixed_prior:FixedPriorScorer")
plugins.declare("router-scorer", "minilm-onnx", "router_svc.scorers.onnx_router:OnnxRouterScorer")


class Scorer(Protocol):
    type_name: str
    models: tuple[str, ...]

    def score_batch(self, prompts: list[str]) -> list[tuple[dict[str, float], bool]]:
        """One (confidence per model, prompt truncated?) per prompt."""
        ...


def build_scorer(spec: Mapping[str, Any]) -> Scorer:
    """``spec``: the scorer's ``kind`` and its parameters (``RouterConfig.scorer_spec``)."""
    params = dict(spec)
    return plugins.build("router-scorer", params.pop("kind"), params)

"""The simulated cluster a stack config describes: one EngineSpec per engine, with its profile."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from engine_svc.config import from_stack as engine_config
from hetflow.core.engine.profile import EngineSpec, load_profile


def cluster_from_stack(raw: Mapping[str, Any]) -> list[EngineSpec]:
    specs = []
    for entry in raw.get("engines", []):
        cfg = engine_config(raw, entry["name"])
        profile = load_profile(cfg.profile)
        specs.append(EngineSpec(cfg.name, cfg.model or profile.model, profile))
    if not specs:
        raise ValueError("the stack config has no engines")
    return specs


def models_of(engines: Sequence[EngineSpec]) -> list[str]:
    return sorted({e.model for e in engines})

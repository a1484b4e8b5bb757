"""Learned router and predictor outputs for a trace, computed once and cached.

The simulator asks for thousands of decisions a second; the artifacts (router_svc's ONNX MiniLM,
predictor_svc's QRF) are run over the whole trace up front, in batches, exactly as the services run
them, and the results cached under ``bench_out/cache`` keyed by trace and artifacts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from hetflow.core.confidence import abilities_from_rates
from hetflow.core.features import PredictItem
from hetflow.core.trace import StageRecord, trace_sha256
from predictor_svc.training import examples
from simulator.signals import UPPER_QUANTILE, LearnedSignals

CACHE_DIR = Path("bench_out") / "cache"


def _artifact_id(path: Path) -> str:
    return hashlib.sha256((path / "meta.json").read_bytes()).hexdigest()[:12]


def learned_signals(records: Sequence[StageRecord], models: Sequence[str], router_dir: Path | None,
                    predictor_dir: Path | None, cache_dir: Path = CACHE_DIR) -> LearnedSignals:
    key = "-".join(["v2", trace_sha256(records)[:12],
                    *(_artifact_id(p) if p else "none" for p in (router_dir, predictor_dir)),
                    hashlib.sha256(json.dumps(sorted(models)).encode()).hexdigest()[:8]])
    cached = cache_dir / f"signals-{key}.json"
    abilities = router_abilities(router_dir, models) if router_dir else {}
    if cached.exists():
        return replace(_load(cached), abilities=abilities)
    confidence = _confidence(records, models, router_dir) if router_dir else {}
    median, upper = _predicted_tokens(records, models, predictor_dir) if predictor_dir else ({}, {})
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps({"confidence": [[p, s, c] for (p, s), c in confidence.items()],
                                  "median_tokens": [[p, s, m, v] for (p, s, m), v in median.items()],
                                  "upper_tokens": [[p, s, m, v] for (p, s, m), v in upper.items()]}))
    return LearnedSignals(confidence, median, upper, abilities)


def router_abilities(router_dir: Path, models: Sequence[str]) -> dict[str, float]:
    """Each model's ability from the router artifact's training label rates, as the served router reads
    its confidences with ``reading: one-difficulty``."""
    from router_svc import artifact

    return abilities_from_rates(artifact.solve_rates(artifact.read(router_dir, list(models))))


def _confidence(records: Sequence[StageRecord], models: Sequence[str], router_dir: Path) -> dict:
    from router_svc.scorers import build_scorer

    scorer = build_scorer({"kind": "minilm-onnx", "artifact": str(router_dir), "models": list(models), "threads": 2,
                           "micro_batch": 8, "reading": "per-model"})   # read per policy: simulator.signals
    first_calls = [r for r in records if not r.depends_on]  # the router is asked before a program has a model
    scored = scorer.score_batch([r.user_prompt for r in first_calls])
    return {(r.program_id, r.stage_index): scores for r, (scores, _) in zip(first_calls, scored)}


def _predicted_tokens(records: Sequence[StageRecord], models: Sequence[str], predictor_dir: Path
                      ) -> tuple[dict, dict]:
    """The QRF's median and ``UPPER_QUANTILE`` for every (program, stage, model)."""
    from predictor_svc.predictors import build_predictor

    predictor = build_predictor({"kind": "qrf", "artifact": str(predictor_dir), "models": list(models)})
    rows = examples(records, models)
    predicted = predictor.predict_batch([PredictItem(e.row, (UPPER_QUANTILE,)) for e in rows])
    keys = [(e.program_id, e.row.stage_index, e.row.model) for e in rows]
    return ({k: p.median_tokens for k, p in zip(keys, predicted)},
            {k: p.quantile_tokens[0] for k, p in zip(keys, predicted)})


def _load(path: Path) -> LearnedSignals:
    raw = json.loads(path.read_text())
    return LearnedSignals({(p, s): c for p, s, c in raw["confidence"]},
                          {(p, s, m): v for p, s, m, v in raw["median_tokens"]},
                          {(p, s, m): v for p, s, m, v in raw["upper_tokens"]})

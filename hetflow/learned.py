"""The learned router and predictor a demo stack serves: trained once, on a first run, and cached.

Artifacts live in ``$HETFLOW_CACHE/artifacts/demo-<key>/{router,predictor}``, where the key hashes
the training recipe below and the models, so a changed recipe trains anew and an unchanged one is
reused. Nothing large is written into the repository.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from hetflow.runtime.artifacts import ARTIFACTS

RECIPE: dict[str, Any] = {"families": ["chat", "code", "kairos-code", "kairos-qa", "kairos-report", "math", "sql"],
                          "programs_per_family": 200, "seed": 0, "router_epochs": 2, "router_max_length": 128,
                          "predictor_trees": 100}


def artifact_dirs(models: Sequence[str]) -> tuple[Path, Path]:
    key = hashlib.sha256(json.dumps({"recipe": RECIPE, "models": list(models)}, sort_keys=True).encode()).hexdigest()
    root = ARTIFACTS / f"demo-{key[:12]}"
    return root / "router", root / "predictor"


def ensure_trained(models: Sequence[str]) -> tuple[Path, Path]:
    """Train whichever of the two artifacts is missing; return their directories."""
    router_dir, predictor_dir = artifact_dirs(models)
    if (router_dir / "meta.json").exists() and (predictor_dir / "meta.json").exists():
        return router_dir, predictor_dir
    from hetflow.workloads.generate import generate

    print(f"training the demo's router and predictor once (cached in {router_dir.parent})", flush=True)
    records = [r for f in RECIPE["families"]
               for r in generate(f, RECIPE["programs_per_family"], RECIPE["seed"], models)]
    if not (predictor_dir / "meta.json").exists():
        from hetflow.core.trace import trace_sha256
        from predictor_svc import artifact
        from predictor_svc.training import train

        model, metrics = train(records, models, n_estimators=RECIPE["predictor_trees"], seed=RECIPE["seed"])
        artifact.save(model, predictor_dir, trace_sha256(records), metrics)
        print(f"predictor: Kendall tau distance {metrics['kendall_tau_distance']['qrf']:.3f} "
              f"(FCFS {metrics['kendall_tau_distance']['fcfs']:.3f})", flush=True)
    if not (router_dir / "meta.json").exists():
        from router_svc.training import train as train_router

        metrics = train_router(records, models, router_dir, max_length=RECIPE["router_max_length"],
                               epochs=RECIPE["router_epochs"], seed=RECIPE["seed"])
        print(f"router: macro mAP {metrics['macro_map']:.3f} (TF-IDF+LR {metrics['tfidf_lr_macro_map']:.3f})",
              flush=True)
    return router_dir, predictor_dir


def learned_overrides(router_dir: Path, predictor_dir: Path) -> dict[str, str]:
    """Environment overrides that switch a stack's router and predictor to the learned artifacts."""
    return {"HETFLOW__ROUTER__KIND": "minilm-onnx", "HETFLOW__ROUTER__ARTIFACT": str(router_dir),
            "HETFLOW__PREDICTOR__KIND": "qrf", "HETFLOW__PREDICTOR__ARTIFACT": str(predictor_dir)}

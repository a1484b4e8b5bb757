"""A trained learned judge on disk (``hetflow train judge``): ``scorer.pkl`` and ``meta.json`` (kind,
format, models, data hash, held-out metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from hetflow.core.cascade.learned_scorer import LearnedScorer
from hetflow.runtime.artifacts import ArtifactError, load_pickled, read_meta, save_pickled, write_meta

KIND = "learned-judge"
FORMAT = 1


def save(scorer: LearnedScorer, out_dir: Path, data_sha256: str, metrics: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    save_pickled(scorer, out_dir / "scorer.pkl")
    write_meta(out_dir, KIND, FORMAT, models=list(scorer.models), trained_on_sha256=data_sha256, metrics=metrics)
    return out_dir


def load(path: str | Path, cascade_models: Sequence[str]) -> LearnedScorer:
    """The scorer, refused with the reason when it is not one or was trained for other models than the
    cascade grades (every model but the last)."""
    path = Path(path)
    meta = read_meta(path, KIND, FORMAT, "hetflow train judge")
    graded = list(cascade_models[:-1])
    missing = sorted(set(graded) - set(meta.get("models", [])))
    if missing:
        raise ArtifactError(f"{path}: the learned judge was trained for {meta.get('models')}, but the cascade "
                            f"grades answers of {graded} (missing {missing})")
    return load_pickled(path / "scorer.pkl", LearnedScorer)

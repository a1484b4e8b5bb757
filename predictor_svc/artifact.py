"""A trained predictor on disk: ``model.pkl`` and ``meta.json`` (kind, format, models, data hash, metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetflow.runtime.artifacts import ArtifactError, load_pickled, read_meta, save_pickled, write_meta
from predictor_svc.qrf import QuantileLengthModel

KIND = "qrf"
FORMAT = 1
__all__ = ["ArtifactError", "load", "save"]


def save(model: QuantileLengthModel, out_dir: Path, data_sha256: str, metrics: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    save_pickled(model, out_dir / "model.pkl")
    write_meta(out_dir, KIND, FORMAT, models=list(model.models), per_model=model.per_model,
               trained_on_sha256=data_sha256, metrics=metrics)
    return out_dir


def load(path: Path, expected_models: list[str] | None = None) -> tuple[QuantileLengthModel, dict[str, Any]]:
    path = Path(path)
    meta = read_meta(path, KIND, FORMAT, "hetflow train predictor")
    if expected_models:
        missing = sorted(set(expected_models) - set(meta["models"]))
        if missing:
            raise ArtifactError(f"{path}: trained for models {meta['models']}, but the service is configured "
                                f"for {sorted(expected_models)} (missing {missing})")
    return load_pickled(path / "model.pkl", QuantileLengthModel), meta

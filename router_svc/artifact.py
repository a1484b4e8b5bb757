"""A trained router on disk: model.onnx, model.int8.onnx, tokenizer.json and meta.json (written last)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetflow.runtime.artifacts import ArtifactError, read_meta
from hetflow.runtime.artifacts import write_meta as _write_meta

KIND = "minilm-onnx"
FORMAT = 1
FILES = ("model.onnx", "model.int8.onnx", "tokenizer.json")
__all__ = ["ArtifactError", "read", "solve_rates", "write_meta"]


def write_meta(out_dir: Path, models: list[str], max_length: int, data_sha256: str, metrics: dict[str, Any]) -> None:
    _write_meta(out_dir, KIND, FORMAT, models=models, max_length=max_length, trained_on_sha256=data_sha256,
                metrics=metrics)


def read(path: Path, expected_models: list[str]) -> dict[str, Any]:
    """Validate the artifact and return its metadata; the models must be exactly the configured ones."""
    meta = read_meta(path, KIND, FORMAT, "hetflow train router")
    missing_files = [f for f in FILES if not (path / f).exists()]
    if missing_files:
        raise ArtifactError(f"{path}: missing {missing_files}")
    if sorted(meta["models"]) != sorted(expected_models):
        raise ArtifactError(f"{path}: the router artifact scores {meta['models']}, but router.models is "
                            f"{sorted(expected_models)}; retrain for these models or fix the configuration")
    rates = meta.get("metrics", {}).get("label_rate")
    if not isinstance(rates, dict) or sorted(rates) != sorted(meta["models"]):
        raise ArtifactError(f"{path}: the metadata's metrics.label_rate must name every model the router scores "
                            f"({sorted(meta['models'])}), got {sorted(rates) if isinstance(rates, dict) else rates!r}")
    return meta


def solve_rates(meta: dict[str, Any]) -> dict[str, float]:
    """The share of its training programs each model solved (the labels' rates, in the metadata ``read``
    returns): the reference the one-difficulty reading takes the models' abilities from."""
    return {m: float(r) for m, r in meta["metrics"]["label_rate"].items()}

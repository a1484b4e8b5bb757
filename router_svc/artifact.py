"""A trained router on disk: model.onnx, model.int8.onnx, tokenizer.json and meta.json (written last)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

KIND = "minilm-onnx"
FORMAT = 1
FILES = ("model.onnx", "model.int8.onnx", "tokenizer.json")


class ArtifactError(ValueError):
    pass


def write_meta(out_dir: Path, models: list[str], max_length: int, data_sha256: str, metrics: dict[str, Any]) -> None:
    meta = {"kind": KIND, "format": FORMAT, "models": models, "max_length": max_length,
            "trained_on_sha256": data_sha256, "metrics": metrics, "created_unix_s": time.time()}
    (out_dir / "meta.json.tmp").write_text(json.dumps(meta, indent=2))
    (out_dir / "meta.json.tmp").replace(out_dir / "meta.json")


def read(path: Path, expected_models: list[str]) -> dict[str, Any]:
    """Validate the artifact and return its metadata; the models must be exactly the configured ones."""
    meta_path = path / "meta.json"
    if not meta_path.exists():
        raise ArtifactError(f"{path}: no meta.json; not a router artifact (train one with `hetflow train router`)")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{meta_path}: malformed JSON: {exc}") from exc
    if meta.get("kind") != KIND or meta.get("format") != FORMAT:
        raise ArtifactError(f"{meta_path}: kind/format {meta.get('kind')}/{meta.get('format')}, expected {KIND}/{FORMAT}")
    missing_files = [f for f in FILES if not (path / f).exists()]
    if missing_files:
        raise ArtifactError(f"{path}: missing {missing_files}")
    if sorted(meta["models"]) != sorted(expected_models):
        raise ArtifactError(f"{path}: the router artifact scores {meta['models']}, but router.models is "
                            f"{sorted(expected_models)}; retrain for these models or fix the configuration")
    return meta

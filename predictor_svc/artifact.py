"""A trained predictor on disk: ``model.pkl`` and ``meta.json`` (kind, format, models, data hash, metrics).

Loading validates the metadata and the object before a service uses it, with messages that say
what is wrong and where.
"""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path
from typing import Any

from predictor_svc.qrf import QuantileLengthModel

KIND = "qrf"
FORMAT = 1


class ArtifactError(ValueError):
    pass


def save(model: QuantileLengthModel, out_dir: Path, data_sha256: str, metrics: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "model.pkl.tmp", "wb") as f:
        pickle.dump(model, f, protocol=pickle.HIGHEST_PROTOCOL)
    (out_dir / "model.pkl.tmp").replace(out_dir / "model.pkl")
    meta = {"kind": KIND, "format": FORMAT, "models": list(model.models), "per_model": model.per_model,
            "trained_on_sha256": data_sha256, "metrics": metrics, "created_unix_s": time.time()}
    (out_dir / "meta.json.tmp").write_text(json.dumps(meta, indent=2))
    (out_dir / "meta.json.tmp").replace(out_dir / "meta.json")  # written last: its presence means complete
    return out_dir


def read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / "meta.json"
    if not meta_path.exists():
        raise ArtifactError(f"{path}: no meta.json; not a predictor artifact (train one with `hetflow train predictor`)")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{meta_path}: malformed JSON: {exc}") from exc
    if meta.get("kind") != KIND or meta.get("format") != FORMAT:
        raise ArtifactError(f"{meta_path}: kind/format {meta.get('kind')}/{meta.get('format')}, expected {KIND}/{FORMAT}")
    return meta


def load(path: Path, expected_models: list[str] | None = None) -> tuple[QuantileLengthModel, dict[str, Any]]:
    path = Path(path)
    meta = read_meta(path)
    if expected_models:
        missing = sorted(set(expected_models) - set(meta["models"]))
        if missing:
            raise ArtifactError(f"{path}: trained for models {meta['models']}, but the service is configured "
                                f"for {sorted(expected_models)} (missing {missing})")
    try:
        with open(path / "model.pkl", "rb") as f:
            model = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise ArtifactError(f"{path / 'model.pkl'}: cannot load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, QuantileLengthModel):
        raise ArtifactError(f"{path / 'model.pkl'}: holds a {type(model).__name__}, not a QuantileLengthModel")
    return model, meta

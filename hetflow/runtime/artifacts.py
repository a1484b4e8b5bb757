"""Trained-model artifacts on disk: a directory whose meta.json is written last, so its presence
means the artifact is complete. Shared by the router's and the predictor's artifacts."""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
ARTIFACTS = Path(os.environ.get("HETFLOW_CACHE", Path.home() / ".cache" / "hetflow")) / "artifacts"
"""Where trained artifacts go by default (``$HETFLOW_CACHE/artifacts``), one directory each, named by the
hash of the data they were trained on."""


class ArtifactError(ValueError):
    """An artifact that cannot be served; the message says what is wrong and where."""


def write_meta(out_dir: Path, kind: str, fmt: int, **fields: Any) -> None:
    meta = {"kind": kind, "format": fmt, **fields, "created_unix_s": time.time()}
    tmp = out_dir / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2))
    tmp.replace(out_dir / "meta.json")


def read_meta(path: Path, kind: str, fmt: int, train_command: str) -> dict[str, Any]:
    meta_path = path / "meta.json"
    if not meta_path.exists():
        raise ArtifactError(f"{path}: no meta.json; not a {kind} artifact (train one with `{train_command}`)")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{meta_path}: malformed JSON: {exc}") from exc
    if meta.get("kind") != kind or meta.get("format") != fmt:
        raise ArtifactError(f"{meta_path}: kind/format {meta.get('kind')}/{meta.get('format')}, expected {kind}/{fmt}")
    return meta


def save_pickled(obj: object, path: Path) -> None:
    """Write ``obj`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)


def load_pickled(path: Path, expected: type[T]) -> T:
    """The ``expected`` object pickled at ``path``; ArtifactError naming the file when it cannot be read
    or holds something else."""
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise ArtifactError(f"{path}: cannot load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, expected):
        raise ArtifactError(f"{path}: holds a {type(obj).__name__}, not a {expected.__name__}")
    return obj

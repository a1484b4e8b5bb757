"""Shared fixtures and markers.

Builders of requests, profiles and snapshots are plain functions in ``tests.factories``; fixtures here
are what is costly to make and shared across test files: a small code and math trace, and a router and
a predictor trained on it once per session. Tests that start services or train models are marked
``slow`` (``make test-fast`` leaves them out; ``make test`` and CI run everything).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Stacks started by this session keep their state files and logs in a directory of its own, so two test
# runs on one host (or a developer's own stacks) never read each other's state for a stack of the same
# name; set before any test imports hetflow.supervisor, and inherited by the services the tests start.
os.environ["HETFLOW_RUN_DIR"] = tempfile.mkdtemp(prefix="hetflow-test-run-")

from hetflow.core.trace import StageRecord, trace_sha256
from hetflow.workloads.generate import generate

TWO_MODELS = ("qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct")
SLOW_DIRS = ("integration",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(part in SLOW_DIRS for part in Path(str(item.fspath)).parts):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def code_math_trace() -> list[StageRecord]:
    return (generate("code", 60, seed=4, models=TWO_MODELS)
            + generate("math", 60, seed=4, models=TWO_MODELS))


@pytest.fixture(scope="session")
def trained_router(code_math_trace, tmp_path_factory) -> tuple[Path, dict, list[StageRecord]]:
    """A MiniLM router fine-tuned for one epoch and exported to ONNX: (directory, metrics, trace)."""
    from router_svc.training import train

    out = tmp_path_factory.mktemp("router") / "art"
    metrics = train(code_math_trace, list(TWO_MODELS), out, max_length=32, epochs=1, batch_size=16)
    return out, metrics, code_math_trace


@pytest.fixture(scope="session")
def trained_predictor(code_math_trace, tmp_path_factory) -> Path:
    """A QRF predictor artifact trained on the same trace."""
    from predictor_svc import artifact
    from predictor_svc.training import train

    model, metrics = train(code_math_trace, TWO_MODELS, n_estimators=20)
    return artifact.save(model, tmp_path_factory.mktemp("predictor") / "art", trace_sha256(code_math_trace), metrics)

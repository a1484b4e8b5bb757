"""Predictor worker process: holds one predictor, predicts batches."""

from __future__ import annotations

from typing import Any, Mapping

from hetflow.core.features import LengthPrediction, PredictItem
from predictor_svc.predictors import Predictor, build_predictor

_predictor: Predictor | None = None


def init(spec: Mapping[str, Any]) -> None:
    global _predictor
    _predictor = build_predictor(spec)


def predict_batch(items: list[PredictItem]) -> list[LengthPrediction]:
    assert _predictor is not None, "worker not initialised"
    return _predictor.predict_batch(items)

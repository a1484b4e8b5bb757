"""Length predictors: a batch of feature rows -> predicted total remaining output tokens Y_r."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from hetflow.core.features import LengthPrediction, PredictItem


class Predictor(Protocol):
    kind: str

    def predict_batch(self, items: list[PredictItem]) -> list[LengthPrediction]: ...


def build_predictor(spec: Mapping[str, Any]) -> Predictor:
    kind = spec["kind"]
    if kind == "input-length":
        from predictor_svc.predictors.input_length import InputLengthPredictor

        return InputLengthPredictor()
    if kind == "qrf":
        from predictor_svc.predictors.qrf_predictor import QrfPredictor

        if not spec.get("artifact"):
            raise ValueError("predictor.kind 'qrf' needs predictor.artifact (train one with `hetflow train predictor`)")
        return QrfPredictor(spec["artifact"], spec.get("models") or None)
    raise ValueError(f"predictor.kind must be one of ['input-length', 'qrf'], got {kind!r}")

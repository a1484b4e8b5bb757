"""Length predictors: a batch of feature rows -> predicted total remaining output tokens Y_r, each a
``predictor`` plugin (``hetflow.core.plugins``), imported when built."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from hetflow.core import plugins
from hetflow.core.features import LengthPrediction, PredictItem

plugins.declare("predictor", "input-length", "predictor_svc.predictors.input_length:InputLengthPredictor")
plugins.declare("predictor", "qrf", "predictor_svc.predictors.qrf_predictor:QrfPredictor")


class Predictor(Protocol):
    type_name: str

    def predict_batch(self, items: list[PredictItem]) -> list[LengthPrediction]: ...


def build_predictor(spec: Mapping[str, Any]) -> Predictor:
    """``spec``: the predictor's ``kind`` and its parameters (``PredictorConfig.predictor_spec``)."""
    params = dict(spec)
    return plugins.build("predictor", params.pop("kind"), params)

"""The learned predictor (Chimera 3.4): a QRF artifact from ``hetflow train predictor``."""

from __future__ import annotations

from pathlib import Path

from hetflow.core.features import LengthPrediction, PredictItem
from predictor_svc import artifact


class QrfPredictor:
    kind = "qrf"

    def __init__(self, path: str, expected_models: list[str] | None = None) -> None:
        self.model, self.meta = artifact.load(Path(path), expected_models)

    def predict_batch(self, items: list[PredictItem]) -> list[LengthPrediction]:
        return self.model.predict_items(items)

"""Model stage of vLLM's Semantic Router (vllm-project/semantic-router; a rival that chooses among models).

Its default selection, as its docs configure it (``config/config.yaml``; ``pkg/classification/classifier.go``
``selectBestModelInternal``; the ``static`` selector of ``pkg/selection/static.go`` since its decisions):
1. a classifier puts the request in one of MMLU-Pro's 14 categories (``math``, ``computer science``,
   ``other``, ...); below its confidence threshold the category is the fallback, ``other``;
2. the model with the highest ``score`` among the category's ``model_scores`` serves it (the first listed
   on a tie); a category without scores goes to ``default_model``.
The scores are each model's accuracy on the category (``website/docs/training/model-performance-eval.md``:
"descending ranking by accuracy"), and ``default_model`` is "the best average performer". It reads no load:
the replica within the model is Envoy's choice (round robin by default), the engine stage here.

Differences, named: the category comes from the call's workflow through ``categories`` (the classifier
taken as always right: the rival at its best); ``model_scores`` come from the configuration (a sweep
states them from the models' published accuracy per family); without a ``default_model`` the model with
the highest fixed prior serves (the confidences the preset is given, ``Preset.confidence = "prior"``: the
cluster's statement of each model's average quality).
"""

from __future__ import annotations

from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, ModelPicker, PolicyStore, Prediction
from hetflow.core.snapshot import ClusterSnapshot

FALLBACK_CATEGORY = "other"
WORKFLOW_CATEGORIES = {"code": "computer science", "agent": "computer science", "sql": "computer science",
                       "kairos-code": "computer science", "math": "math"}
"""hetflow's workload families in MMLU-Pro's categories: code-writing workflows are computer science;
chat, question answering and report writing are none of the 14 and fall to ``other``."""


def best_scored(scores: Mapping[str, float], served: list[str]) -> str | None:
    """The served model with the highest score, the first listed on a tie (strict ``>``); None if none is scored."""
    best: str | None = None
    for model, score in scores.items():
        if model in served and (best is None or score > scores[best]):
            best = model
    return best


@plugin("model-picker", "semantic-router")
class SemanticRouter(ModelPicker):
    needs_router = True
    """It reads the fixed priors only, for the best average performer when no ``default_model`` is set."""
    program_affinity = True
    """A program's calls share its workflow, so its category and model: the first call decides (and is the
    only one the router is asked about)."""

    def __init__(self, model_scores: Mapping[str, Mapping[str, float]] | None = None,
                 categories: Mapping[str, str] | None = None, default_model: str = "") -> None:
        self.model_scores = {str(c): dict(s) for c, s in (model_scores or {}).items()}
        self.categories = dict(WORKFLOW_CATEGORIES if categories is None else categories)
        self.default_model = default_model

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        served = snapshot.healthy_models()
        category = self.categories.get(call.workflow.workflow, FALLBACK_CATEGORY)
        scores = self.model_scores.get(category, {})
        model = best_scored(scores, served)
        if model is not None:
            return Choice(model, f"semantic-router:{category}:highest-score", scores=scores)
        if self.default_model in served:
            return Choice(self.default_model, f"semantic-router:{category}:default-model")
        model = max(served, key=lambda m: (confidence.get(m, 0.0), m))
        return Choice(model, f"semantic-router:{category}:best-average", scores=dict(confidence))

"""The learned router: a small fine-tune exports to ONNX that agrees with PyTorch; the scorer serves it,
cuts long prompts as training did, and refuses artifacts for other models."""

import json

import numpy as np
import pytest

from router_svc import artifact
from router_svc.encoding import PromptEncoder
from router_svc.scorers import build_scorer
from router_svc.training import ONNX_TOLERANCE, encoder_dir, examples
from tests.conftest import TWO_MODELS

MODELS = list(TWO_MODELS)


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(trained_router):
    return trained_router


def test_fine_tune_and_export_end_to_end(trained):
    out, metrics, _ = trained
    assert metrics["onnx_fp32_max_abs_diff"] <= ONNX_TOLERANCE
    assert 0.0 <= metrics["macro_map"] <= 1.0 and 0.0 <= metrics["tfidf_lr_macro_map"] <= 1.0
    assert set(metrics["per_family"]["router"]) == {"code", "math"}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["models"] == MODELS and len(meta["trained_on_sha256"]) == 64


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_scorer_serves_both_exports(trained, precision):
    out, _, records = trained
    scorer = build_scorer({"kind": "minilm-onnx", "artifact": str(out), "models": {m: 0.5 for m in MODELS},
                           "precision": precision})
    prompts = [g.user_prompt for g in records[:5]]
    scores = scorer.score_batch(prompts)
    assert len(scores) == 5 and all(set(c) == set(MODELS) and all(0 <= v <= 1 for v in c.values()) for c, _ in scores)
    assert scorer.score_batch([]) == []


def test_the_default_reading_reads_the_sigmoids_through_one_difficulty_with_the_artifacts_label_rates(trained):
    from hetflow.core.confidence import abilities_from_rates, one_difficulty

    out, metrics, records = trained
    spec = {"kind": "minilm-onnx", "artifact": str(out), "models": MODELS, "precision": "fp32"}
    prompts = [g.user_prompt for g in records[:6]]
    per_model = build_scorer({**spec, "reading": "per-model"}).score_batch(prompts)
    read = build_scorer(spec).score_batch(prompts)                       # hetflow's default reading
    abilities = abilities_from_rates(metrics["label_rate"])
    for (raw, cut), (got, got_cut) in zip(per_model, read):
        assert got == pytest.approx(one_difficulty(raw, abilities)) and got_cut == cut
    with pytest.raises(ValueError, match="reading"):
        build_scorer({**spec, "reading": "sideways"})


def test_long_prompts_are_cut_the_same_way_as_in_training(trained):
    out, _, _ = trained
    scorer = build_scorer({"kind": "minilm-onnx", "artifact": str(out), "models": MODELS, "precision": "fp32"})
    long_prompt = "solve " * 200
    (conf_long, cut), (conf_prefix, cut_prefix) = scorer.score_batch([long_prompt, "solve " * 200 + "tail words"])
    assert cut and cut_prefix
    assert conf_long == pytest.approx(conf_prefix, abs=1e-6)   # only the first 32 tokens count
    training_encoder = PromptEncoder(encoder_dir() / "tokenizer.json", 32)
    assert training_encoder.encode([long_prompt]).input_ids.shape[1] == 32


def test_artifact_for_other_models_is_refused(trained):
    out, _, _ = trained
    with pytest.raises(artifact.ArtifactError, match="scores"):
        build_scorer({"kind": "minilm-onnx", "artifact": str(out), "models": ["qwen2.5-14b-instruct"]})


def test_malformed_artifact_is_refused(tmp_path):
    with pytest.raises(artifact.ArtifactError, match="no meta.json"):
        build_scorer({"kind": "minilm-onnx", "artifact": str(tmp_path), "models": MODELS})
    (tmp_path / "meta.json").write_text(json.dumps({"kind": "minilm-onnx", "format": 1, "models": MODELS,
                                                    "max_length": 32}))
    with pytest.raises(artifact.ArtifactError, match="missing"):
        build_scorer({"kind": "minilm-onnx", "artifact": str(tmp_path), "models": MODELS})


def test_an_artifact_whose_label_rates_miss_a_model_is_refused_at_load(tmp_path):
    """Its one-difficulty reading takes each model's ability from them: loaded, every call would fail."""
    for name in artifact.FILES:
        (tmp_path / name).write_text("")
    (tmp_path / "meta.json").write_text(json.dumps({"kind": "minilm-onnx", "format": 1, "models": MODELS,
                                                    "max_length": 32, "metrics": {"label_rate": {MODELS[0]: 0.5}}}))
    with pytest.raises(artifact.ArtifactError, match="label_rate"):
        artifact.read(tmp_path, MODELS)


def test_serve_settings_may_sit_flat_in_the_routers_section():
    from router_svc.config import from_stack

    cfg = from_stack({"router": {"port": 1, "max_pending_rpcs": 10, "kind": "fixed-prior", "models": {"m": 0.5}}})
    assert cfg.serve.max_pending_rpcs == 10


def test_one_example_per_program_labelled_per_model(trained):
    _, _, records = trained
    data = examples(records, MODELS)
    assert len(data) == len({r.program_id for r in records})
    assert all(len(e.labels) == 2 and set(e.labels) <= {0.0, 1.0} for e in data)
    assert np.mean([e.labels[1] for e in data]) > np.mean([e.labels[0] for e in data]) - 0.05

"""Chimera's QRF predictor: it orders held-out requests better than FCFS, handles unknown categories,
and its artifact refuses to load when it is wrong."""

import numpy as np
import pytest

from hetflow.core.features import FeatureRow, PredictItem
from hetflow.core.trace import trace_sha256
from hetflow.workloads.generate import generate
from predictor_svc import artifact
from predictor_svc.qrf import Featurizer
from predictor_svc.training import examples, fit, train

MODELS = ("qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    records = generate("code", 80, seed=1, models=MODELS) + generate("sql", 80, seed=1, models=MODELS)
    model, metrics = train(records, MODELS, n_estimators=30, seed=0)
    path = artifact.save(model, tmp_path_factory.mktemp("art") / "pred", trace_sha256(records), metrics)
    return model, metrics, path


def row(**kw):
    values = dict(model=MODELS[0], workflow="code", agent="planner", stage_index=1, stage_count=4,
                  system_prompt_tokens=20, user_prompt_tokens=100, input_tokens=120,
                  user_prompt="def add(a, b): return the sum")
    values.update(kw)
    return FeatureRow(**values)


def test_beats_fcfs_and_input_length_on_held_out_programs(trained):
    _, metrics, _ = trained
    k = metrics["kendall_tau_distance"]
    assert k["qrf"] < k["fcfs"] - 0.1 and k["qrf"] < k["input_length"] - 0.1
    assert 0.5 < metrics["coverage"] <= 1.0


def test_unknown_workflow_agent_and_model_take_the_unknown_path(trained):
    model, _, _ = trained
    out = model.predict([row(workflow="never-seen", agent="oracle", model="gpt-17")], (0.1, 0.9))
    assert out.shape == (1, 3) and np.all(np.isfinite(out)) and out[0, 0] > 0


def test_a_model_never_trained_for_gets_every_models_forest_averaged_not_the_first_models():
    data = examples(generate("code", 60, seed=2, models=MODELS), MODELS)
    model = fit(data, MODELS, per_model=True, n_estimators=10, seed=0,
                featurizer=Featurizer().fit([e.row for e in data]))
    known = model.predict([row(model=m) for m in MODELS], (0.1, 0.9))
    unknown = model.predict([row(model="gpt-17"), row(model=MODELS[1])], (0.1, 0.9))
    assert np.allclose(unknown[0], known.mean(axis=0)) and np.allclose(unknown[1], known[1])
    assert not np.allclose(known[0], known[1])  # the two models' forests disagree on this row


def test_quantiles_are_ordered_and_later_stages_have_less_left(trained):
    model, _, _ = trained
    out = model.predict([row(stage_index=1), row(stage_index=4)], (0.1, 0.9))
    assert np.all(out[:, 1] <= out[:, 0]) and np.all(out[:, 0] <= out[:, 2])
    assert out[1, 0] < out[0, 0]


def test_empty_batch_is_an_empty_answer(trained):
    model, _, _ = trained
    assert model.predict_items([]) == [] and model.predict([], (0.5,)).shape == (0, 2)
    items = [PredictItem(row(), (0.1, 0.9)), PredictItem(row(stage_index=2), ())]
    got = model.predict_items(items)
    assert len(got[0].quantile_tokens) == 2 and got[1].quantile_tokens == ()


def test_artifact_round_trip_and_model_check(trained):
    _, _, path = trained
    loaded, meta = artifact.load(path, list(MODELS))
    assert meta["models"] == list(MODELS) and meta["trained_on_sha256"]
    with pytest.raises(artifact.ArtifactError, match="missing"):
        artifact.load(path, ["qwen2.5-14b-instruct"])


def test_malformed_artifacts_fail_with_a_clear_message(tmp_path, trained):
    with pytest.raises(artifact.ArtifactError, match="no meta.json"):
        artifact.load(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(artifact.ArtifactError, match="malformed"):
        artifact.load(tmp_path)
    (tmp_path / "meta.json").write_text('{"kind": "qrf", "format": 1, "models": []}')
    (tmp_path / "model.pkl").write_bytes(b"garbage")
    with pytest.raises(artifact.ArtifactError, match="cannot load"):
        artifact.load(tmp_path)

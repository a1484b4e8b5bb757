"""A learned judge's artifact: saved and loaded whole; a broken one, another object or other models refused
with the reason."""

import pickle

import pytest

from balancer_svc import judge_artifact
from hetflow.core.cascade.learned_scorer import GradedAnswer, fit
from hetflow.runtime.artifacts import ArtifactError


def scorer():
    return fit([GradedAnswer(f"q{i}", m, 10, 80.0 if i % 2 else 20.0, bool(i % 2), f"p{i}")
                for i in range(10) for m in ("small", "large")], ["small", "large"])


def test_a_saved_judge_loads_and_grades_the_same(tmp_path):
    saved = scorer()
    judge_artifact.save(saved, tmp_path, "sha", {})
    loaded = judge_artifact.load(tmp_path, ["small", "large"])
    assert loaded.grade("q3", "small", 10) == saved.grade("q3", "small", 10)


@pytest.mark.parametrize("damage, named", [
    (lambda d: (d / "scorer.pkl").write_bytes(b"not a pickle"), "cannot load"),
    (lambda d: (d / "scorer.pkl").write_bytes(pickle.dumps({"a": 1})), "holds a dict, not a LearnedScorer"),
    (lambda d: (d / "meta.json").write_text("{"), "malformed JSON"),
])
def test_a_broken_artifact_is_refused_naming_what_is_wrong(tmp_path, damage, named):
    judge_artifact.save(scorer(), tmp_path, "sha", {})
    damage(tmp_path)
    with pytest.raises(ArtifactError, match=named):
        judge_artifact.load(tmp_path, ["small", "large"])


def test_a_judge_for_other_models_is_refused(tmp_path):
    judge_artifact.save(scorer(), tmp_path, "sha", {})
    with pytest.raises(ArtifactError, match="missing \\['medium'\\]"):
        judge_artifact.load(tmp_path, ["medium", "large"])  # the cascade grades the medium model's answers

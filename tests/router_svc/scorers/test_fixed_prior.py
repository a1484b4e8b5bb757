import pytest

from hetflow.core.confidence import abilities_from_rates, one_difficulty
from router_svc.scorers import build_scorer

PRIORS = {"qwen2.5-1.5b-instruct": 0.45, "qwen2.5-7b-instruct": 0.62}


def test_every_prompt_gets_the_priors_whatever_the_reading():
    per_model = build_scorer({"kind": "fixed-prior", "models": PRIORS, "reading": "per-model"})
    default = build_scorer({"kind": "fixed-prior", "models": PRIORS})
    prompts = ["short", "a much longer prompt " * 40]
    assert per_model.score_batch(prompts) == default.score_batch(prompts) == [(PRIORS, False)] * 2


def test_the_priors_read_through_one_difficulty_are_the_priors():
    assert one_difficulty(PRIORS, abilities_from_rates(PRIORS)) == pytest.approx(PRIORS)


@pytest.mark.parametrize("spec, match", [({"models": PRIORS, "reading": "sideways"}, "reading"),
                                         ({"models": {}}, "at least one"),
                                         ({"models": {"m": 1.5}}, r"\[0, 1\]")])
def test_bad_settings_are_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        build_scorer({"kind": "fixed-prior", **spec})

"""The cascade's configuration: bad sections are refused naming the setting."""

import pytest

from hetflow.core.cascade.config import CascadeConfig

MODELS = ["qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct", "qwen2.5-14b-instruct"]


def test_a_three_model_cascade_with_an_llm_judge_reads_from_yaml_values():
    cfg = CascadeConfig.from_mapping({"models": MODELS, "thresholds": [70, 60.5],
                                      "judge": {"kind": "llm", "model": MODELS[-1]}})
    assert cfg.models == tuple(MODELS) and cfg.thresholds == (70.0, 60.5)
    assert cfg.judge.name == f"llm:{MODELS[-1]}" and cfg.judge.max_tokens == 2


@pytest.mark.parametrize("raw, named", [
    ({"models": MODELS[:1], "thresholds": [], "judge": {"kind": "learned", "artifact": "x"}}, "at least two"),
    ({"models": MODELS, "thresholds": [70], "judge": {"kind": "learned", "artifact": "x"}}, "one threshold per model"),
    ({"models": MODELS, "thresholds": [70, 101], "judge": {"kind": "learned", "artifact": "x"}}, "h_2"),
    ({"models": MODELS, "thresholds": [float("nan"), 1], "judge": {"kind": "learned", "artifact": "x"}}, "h_1"),
    ({"models": [MODELS[0], MODELS[0]], "thresholds": [1], "judge": {"kind": "learned", "artifact": "x"}}, "twice"),
    ({"models": MODELS[:2], "thresholds": [50], "judge": {"kind": "llm"}}, "judge.model"),
    ({"models": MODELS[:2], "thresholds": [50], "judge": {"kind": "learned"}}, "hetflow train judge"),
    ({"models": MODELS[:2], "thresholds": [50], "judge": {"kind": "oracle"}}, "judge.kind"),
    ({"models": MODELS[:2], "thresholds": [50], "judge": {"kind": "llm", "model": "m", "max_tokens": 0}},
     "max_tokens"),
    ({"models": MODELS[:2], "thresholds": [50], "judge": {"kind": "llm", "model": "m", "prompt": "x"}}, "prompt"),
    ({"models": MODELS[:2], "thresholds": [50], "judgee": {}}, "judgee"),
    (["not", "a", "mapping"], "must be a mapping"),
])
def test_a_bad_cascade_section_is_refused_naming_the_setting(raw, named):
    with pytest.raises(ValueError, match=named):
        CascadeConfig.from_mapping(raw)

"""The encoder benchmark measures the prompts the router is asked about (each program's first call), each
timed pass over all of them, and refuses an unknown family before it loads anything."""

from __future__ import annotations

import pytest

from hetflow.bench import encoder_cost
from hetflow.workloads.generate import generate
from hetflow.workloads.models import DEFAULT_MODELS


def test_the_prompts_are_each_programs_first_call():
    records = generate("agent", 6, 2, DEFAULT_MODELS)
    prompts = encoder_cost.first_prompts("agent", 6, 2)
    assert len(prompts) == 6 < len(records)
    assert prompts == [r.user_prompt for r in records if not r.depends_on]


def test_the_cost_per_prompt_counts_every_timed_pass_and_not_the_warm_up():
    class CountingScorer:
        def __init__(self) -> None:
            self.scored: list[int] = []

        def score_batch(self, prompts):
            self.scored.append(len(prompts))
            return [({}, False)] * len(prompts)

    scorer = CountingScorer()
    assert encoder_cost.cpu_ms_per_prompt(scorer, ["a", "b", "c"], rounds=4) >= 0.0
    assert scorer.scored == [3] * 5


def test_an_unknown_family_is_refused(capsys):
    with pytest.raises(SystemExit):
        encoder_cost.main(["--artifact", "nowhere", "--families", "code,poetry"])
    assert "poetry" in capsys.readouterr().err

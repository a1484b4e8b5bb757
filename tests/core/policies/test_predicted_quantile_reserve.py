"""The reserve rule: the output tokens a call keeps KV room for (issue 35)."""

import pytest

from hetflow.core.policies.contracts import Prediction
from hetflow.core.policies.no_reserve import NoReserve
from hetflow.core.policies.predicted_quantile_reserve import PredictedQuantileReserve
from tests.factories import call, context


def test_the_upper_quantile_of_the_remaining_output_split_over_the_remaining_stages():
    c = call(max_tokens=1000, stage_index=2, stage_count=3)          # 2 stages left
    tokens, choice = PredictedQuantileReserve().reserve_tokens(c, Prediction(300.0, {0.9: 800.0}), context())
    assert tokens == 400 and choice.rule == "predicted-quantile" and choice.params == {"quantile": 0.9}


def test_never_more_than_max_tokens_and_the_median_without_the_quantile():
    c = call(max_tokens=100)
    assert PredictedQuantileReserve().reserve_tokens(c, Prediction(50.0, {0.9: 900.0}), context())[0] == 100
    tokens, choice = PredictedQuantileReserve().reserve_tokens(c, Prediction(50.0), context())
    assert tokens == 50 and choice.rule == "no-quantile:median"


def test_the_baseline_reserves_nothing_and_a_bad_quantile_is_refused():
    assert NoReserve().reserve_tokens(call(), Prediction(50.0, {0.9: 90.0}), context())[0] == 0
    with pytest.raises(ValueError, match="quantile"):
        PredictedQuantileReserve(quantile=0.3)

import pytest

from hetflow.core.errors import Unavailable
from hetflow.core.policies.contracts import PolicyStore, Prediction
from hetflow.core.policies.least_inflight_tokens import LeastInflightTokens
from tests.factories import call, engine, snapshot


def test_picks_fewest_in_flight_tokens_of_the_model():
    snap = snapshot(engine("a", "m", 500), engine("b", "m", 100), engine("c", "other", 0),
                    engine("d", "m", 0, healthy=False))
    choice = LeastInflightTokens().pick(call(), snap, "m", Prediction(1), PolicyStore())
    assert choice.chosen == "b" and set(choice.loads) == {"a", "b"}


def test_ties_break_on_requests_then_id():
    snap = snapshot(engine("b", "m", 0, in_flight_requests=1), engine("c", "m", 0),
                    engine("a", "m", 0, in_flight_requests=1))
    assert LeastInflightTokens().pick(call(), snap, "m", Prediction(1), PolicyStore()).chosen == "c"


def test_no_engine_is_unavailable():
    with pytest.raises(Unavailable):
        LeastInflightTokens().pick(call(), snapshot(engine("a", "x")), "m", Prediction(1), PolicyStore())

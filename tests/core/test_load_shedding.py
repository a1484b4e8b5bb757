"""The balancer's overload rule, without a server."""

import pytest

from hetflow.core.errors import ResourceExhausted
from hetflow.core.load_shedding import LoadShedder


def test_calls_past_the_cap_are_refused_with_a_retry_hint_and_room_comes_back_as_calls_leave():
    shedder = LoadShedder(max_calls=2)
    shedder.enter(0.0)
    shedder.enter(0.0)
    with pytest.raises(ResourceExhausted, match="limit is 2") as refused:
        shedder.enter(0.0)
    assert refused.value.retry_after_s == 1.0 and shedder.calls == 2
    shedder.leave()
    shedder.enter(0.0)


def test_a_late_event_loop_refuses_new_calls_and_an_unset_limit_never_does():
    with pytest.raises(ResourceExhausted, match="event loop"):
        LoadShedder(max_loop_lag_s=0.5).enter(0.8)
    unlimited = LoadShedder()
    for _ in range(100):
        unlimited.enter(10.0)
    assert unlimited.calls == 100

"""The balancer's overload rule, without a server."""

import pytest

from hetflow.core.errors import ResourceExhausted
from hetflow.core.load_shedding import LoadShedder, LoopLag


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


def test_loop_lag_is_the_median_of_recent_probes_so_one_pause_does_not_refuse_calls():
    lag = LoopLag(window=5)
    for late_s in (0.0001, 0.0002, 0.0001, 0.0002):
        lag.add(late_s)
    assert lag.add(0.25) == pytest.approx(0.0002)  # one 250 ms garbage-collection pause
    LoadShedder(max_loop_lag_s=0.005).enter(lag.lag_s)
    for _ in range(3):
        lag.add(0.008)  # turns stay long: most recent probes late
    assert lag.lag_s == pytest.approx(0.008)
    with pytest.raises(ResourceExhausted, match="8.0 ms late"):
        LoadShedder(max_loop_lag_s=0.005).enter(lag.lag_s)


def test_loop_lag_counts_an_early_wake_as_on_time_and_forgets_old_probes():
    lag = LoopLag(window=3)
    assert lag.lag_s == 0.0
    for late_s in (0.5, 0.5, -0.001, 0.0, 0.0):
        lag.add(late_s)
    assert lag.lag_s == 0.0 and list(lag.samples_s) == [0.0, 0.0, 0.0]


def test_a_late_loop_takes_decide_only_calls_while_the_oldest_decision_is_young():
    """A burst the balancer decides within max_decision_wait_s is taken whole; a relayed call is refused
    on the lag alone, since it costs the loop for every token."""
    shedder = LoadShedder(max_loop_lag_s=0.005, max_decision_wait_s=1.0)
    with shedder.deciding(now_s=10.0), shedder.deciding(now_s=10.4):
        for _ in range(50):
            shedder.enter(0.040, now_s=10.9, relays=False)
        with pytest.raises(ResourceExhausted, match="event loop runs 40.0 ms late; the limit"):
            shedder.enter(0.040, now_s=10.9, relays=True)
    assert shedder.calls == 50


def test_a_decision_wait_past_the_limit_refuses_decide_only_calls_until_the_oldest_is_decided():
    shedder = LoadShedder(max_loop_lag_s=0.005, max_decision_wait_s=1.0)
    oldest, younger = shedder.deciding(now_s=10.0), shedder.deciding(now_s=10.8)
    oldest.__enter__()
    younger.__enter__()
    with pytest.raises(ResourceExhausted, match="waited 1.50 s for its decision") as refused:
        shedder.enter(0.040, now_s=11.5, relays=False)
    assert refused.value.retry_after_s == 1.0 and shedder.calls == 0
    shedder.enter(0.001, now_s=11.5, relays=False)  # the loop on time: taken whatever the wait
    oldest.__exit__(None, None, None)  # decided first: the younger one is now the oldest
    assert shedder.oldest_decision_wait_s(11.5) == pytest.approx(0.7)
    shedder.enter(0.040, now_s=11.5, relays=False)
    younger.__exit__(None, None, None)
    assert shedder.oldest_decision_wait_s(11.5) == 0.0 and shedder.calls == 2


def test_without_a_decision_wait_decide_only_calls_are_refused_on_the_lag_as_before():
    shedder = LoadShedder(max_loop_lag_s=0.005)
    with pytest.raises(ResourceExhausted, match="event loop"):
        shedder.enter(0.040, now_s=1.0, relays=False)


def test_a_decision_that_fails_still_stops_counting():
    shedder = LoadShedder(max_loop_lag_s=0.005, max_decision_wait_s=1.0)
    with pytest.raises(RuntimeError), shedder.deciding(now_s=0.0):
        raise RuntimeError("the pipeline failed")
    assert shedder.oldest_decision_wait_s(100.0) == 0.0

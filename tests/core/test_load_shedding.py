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
    shedder = LoadShedder(max_loop_lag_s=0.5)
    shedder.observe(0.8, now_s=10.0)
    with pytest.raises(ResourceExhausted, match="event loop"):
        shedder.enter(now_s=10.0)
    unlimited = LoadShedder()
    for now_s in range(100):
        unlimited.observe(10.0, now_s=float(now_s))
        unlimited.enter(now_s=float(now_s))
    assert unlimited.calls == 100


def test_a_burst_the_loop_clears_within_the_sustain_time_is_queued_and_a_lasting_lag_is_refused():
    shedder = LoadShedder(max_loop_lag_s=0.005, lag_sustain_s=1.0)
    for now_s in (0.0, 0.4, 0.9):  # a burst: the loop runs late for under a second
        shedder.observe(0.050, now_s)
        shedder.enter(now_s)
    shedder.observe(0.001, 1.2)  # and catches up: the clock starts again
    shedder.observe(0.050, 1.5)
    shedder.enter(2.4)
    with pytest.raises(ResourceExhausted, match="late for 1.0 s") as refused:
        shedder.enter(2.5)  # late without a break for a second: overload
    assert refused.value.retry_after_s == 1.0 and shedder.calls == 4


def test_loop_lag_is_the_median_of_recent_probes_so_one_pause_does_not_refuse_calls():
    lag = LoopLag(window=5)
    for late_s in (0.0001, 0.0002, 0.0001, 0.0002):
        lag.add(late_s)
    assert lag.add(0.25) == pytest.approx(0.0002)  # one 250 ms garbage-collection pause
    shedder = LoadShedder(max_loop_lag_s=0.005)
    shedder.observe(lag.lag_s, 0.0)
    shedder.enter(0.0)
    for _ in range(3):
        lag.add(0.008)  # turns stay long: most recent probes late
    assert lag.lag_s == pytest.approx(0.008)
    shedder.observe(lag.lag_s, 0.1)
    with pytest.raises(ResourceExhausted, match="8.0 ms late"):
        shedder.enter(0.1)


def test_loop_lag_counts_an_early_wake_as_on_time_and_forgets_old_probes():
    lag = LoopLag(window=3)
    assert lag.lag_s == 0.0
    for late_s in (0.5, 0.5, -0.001, 0.0, 0.0):
        lag.add(late_s)
    assert lag.lag_s == 0.0 and list(lag.samples_s) == [0.0, 0.0, 0.0]

"""The balancer's overload rule, without a server."""

import pytest

from hetflow.core.errors import ResourceExhausted
from hetflow.core.load_shedding import AcceptWaits, LoadShedder, LoopLag


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


def test_a_late_loop_takes_a_burst_of_decide_only_calls_and_refuses_relayed_ones():
    """A burst within the allowance is taken whole; a relayed call is refused on the lag alone, since it
    costs the loop for every token."""
    shedder = LoadShedder(max_loop_lag_s=0.005, burst_calls=100, burst_refill_s=10.0)
    with pytest.raises(ResourceExhausted, match="event loop runs 40.0 ms late"):
        shedder.enter(0.040, relays=True)  # the allowance is full, and not for it
    assert shedder.burst_allowance == 100.0 and shedder.calls == 0
    assert all(shedder.enter(0.040, relays=False) for _ in range(100))  # each spent allowance
    assert shedder.calls == 100 and shedder.burst_allowance == 0.0
    assert shedder.enter(0.001, relays=False) is False  # an on-time loop takes it without


def test_the_allowance_comes_back_only_while_the_loop_runs_on_time():
    """Lasting overload keeps the loop late, so once the allowance is spent it is refused as before."""
    shedder = LoadShedder(max_loop_lag_s=0.005, burst_calls=100, burst_refill_s=10.0)
    for _ in range(100):
        shedder.enter(0.040, relays=False)
    for _ in range(200):
        shedder.probed(0.040, 0.05)  # ten seconds of a late loop: nothing comes back
    shedder.probed(3.0, 0.05)  # nor from one long stall
    with pytest.raises(ResourceExhausted, match="event loop") as refused:
        shedder.enter(0.040, relays=False)
    assert refused.value.retry_after_s == 1.0
    for _ in range(10):
        shedder.probed(0.001, 0.05)  # half a second on time: 5 calls' worth
    assert shedder.burst_allowance == pytest.approx(5.0)
    for _ in range(5):
        shedder.enter(0.040, relays=False)
    with pytest.raises(ResourceExhausted):
        shedder.enter(0.040, relays=False)
    for _ in range(1000):
        shedder.probed(0.0, 0.05)
    assert shedder.burst_allowance == 100.0  # whole again, never more
    shedder.enter(0.001, relays=False)  # an on-time loop spends none
    assert shedder.burst_allowance == 100.0 and shedder.calls == 106


def test_a_call_refused_after_spending_allowance_gives_it_back():
    shedder = LoadShedder(max_loop_lag_s=0.005, burst_calls=2)
    spent = shedder.enter(0.040, relays=False)
    shedder.leave(refund_burst=spent)  # refused by its tenant's limit, say
    assert shedder.burst_allowance == 2.0 and shedder.calls == 0


@pytest.mark.parametrize("burst_calls, burst_refill_s", [(-1, 10.0), (10, 0.0), (10, -1.0)])
def test_an_allowance_needs_a_size_and_a_refill_time(burst_calls: int, burst_refill_s: float):
    with pytest.raises(ValueError, match="burst_refill_s"):
        LoadShedder(burst_calls=burst_calls, burst_refill_s=burst_refill_s)


def test_without_an_allowance_decide_only_calls_are_refused_on_the_lag_as_relayed_ones():
    with pytest.raises(ResourceExhausted, match="event loop"):
        LoadShedder(max_loop_lag_s=0.005).enter(0.040, relays=False)


def test_a_standing_queue_of_waits_refuses_relayed_calls_and_a_burst_or_a_quick_call_does_not():
    """CoDel's rule: refused while even the shortest wait of the last interval (at least ``min_calls``
    calls) is above the target; one long wait, or a call that came through quickly, ends it."""
    waits = AcceptWaits(target_s=0.02, interval_s=0.1, min_calls=4)
    assert waits.add(0.00, 0.5) == 0.0  # one call, however late: a burst, not a standing queue
    assert [waits.add(t, 0.05) for t in (0.01, 0.02, 0.03)] == [0.0, 0.0, 0.05]
    with pytest.raises(ResourceExhausted, match="calls wait 50 ms for it to take them"):
        LoadShedder().enter(0.0, relays=True, standing_wait_s=waits.add(0.04, None))  # unknown: not recorded
    assert waits.add(0.05, 0.001) == 0.0  # one came through quickly: the queue has drained
    assert waits.add(0.20, 0.06) == 0.0  # the interval forgot the older waits: too few to say
    assert AcceptWaits().add(0.0, 9.0) == 0.0  # no target: never


def test_a_standing_queue_spends_the_burst_allowance_of_decide_only_calls():
    shedder = LoadShedder(burst_calls=2)
    assert shedder.enter(0.0, relays=False, standing_wait_s=0.05) is True
    assert shedder.enter(0.0, relays=False, standing_wait_s=0.05) is True
    with pytest.raises(ResourceExhausted, match="calls wait"):
        shedder.enter(0.0, relays=False, standing_wait_s=0.05)
    assert shedder.calls == 2

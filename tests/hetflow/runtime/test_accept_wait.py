"""A call's wait to be taken, from the timeout its client sent and the time its deadline has left."""

import pytest

from hetflow.runtime.accept_wait import (
    PREVIOUS_ATTEMPTS_KEY,
    SENT_TIMEOUT_KEY,
    StreamWaits,
    accept_wait_s,
    sent_timeout,
)


def test_the_wait_is_the_sent_timeout_less_the_time_left():
    assert sent_timeout(2.5) == ((SENT_TIMEOUT_KEY, "2500"),) and sent_timeout(None) == ()
    assert accept_wait_s([("x", "y"), *sent_timeout(2.5)], 2.1) == pytest.approx(0.4)
    assert accept_wait_s(sent_timeout(2.5), 2.6) == 0.0  # the clocks' rounding: never below 0


@pytest.mark.parametrize("metadata,time_remaining_s", [
    ((), 2.0),                                                   # the client sent no timeout
    (sent_timeout(2.5), None),                                   # the call has no deadline
    ((*sent_timeout(2.5), (PREVIOUS_ATTEMPTS_KEY, "1")), 1.0),   # gRPC's retry: the first attempt's timeout
    (((SENT_TIMEOUT_KEY, "soon"),), 1.0),                        # not a number
])
def test_a_wait_that_cannot_be_told_is_unknown(metadata, time_remaining_s):
    assert accept_wait_s(metadata, time_remaining_s) is None


def test_a_streamed_message_waits_what_its_gap_is_above_the_least_gap_seen():
    """Server clock 1000 s ahead of the client's: the offset cancels, the first message stands for no wait."""
    waits = StreamWaits(started_s=1000.0)
    assert waits.wait_s(sent_after_s=1.0, read_s=1001.2) == pytest.approx(0.0)    # gap 0.2: the base
    assert waits.wait_s(sent_after_s=2.0, read_s=1002.5) == pytest.approx(0.3)    # gap 0.5
    assert waits.wait_s(sent_after_s=3.0, read_s=1003.1) == pytest.approx(0.0)    # gap 0.1: the new base
    assert waits.wait_s(sent_after_s=4.0, read_s=1004.3) == pytest.approx(0.2)
    assert waits.wait_s(sent_after_s=0.0, read_s=1005.0) is None                  # sent time not given


def test_the_base_forgets_minutes_older_than_its_history_so_drift_cannot_pass_for_a_wait():
    """The client's clock runs slow by 1 ms a minute: after an hour a message's gap is 60 ms above the
    first one's, yet each minute's base is recent, so no wait is read."""
    waits = StreamWaits(started_s=0.0)
    for minute in range(61):
        read_s = minute * 60.0 + 1.0
        wait_s = waits.wait_s(sent_after_s=read_s - 0.01 - minute * 1e-3, read_s=read_s)
    assert wait_s is not None and wait_s <= StreamWaits.BASE_HISTORY * 1e-3 + 1e-9


def test_a_client_says_its_timeout_only_on_a_connected_channel():
    assert sent_timeout(2.5, connected=False) == () and sent_timeout(2.5, connected=True) == sent_timeout(2.5)

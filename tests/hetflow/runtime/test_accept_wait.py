"""A call's wait to be taken, from the timeout its client sent and the time its deadline has left."""

import pytest

from hetflow.runtime.accept_wait import PREVIOUS_ATTEMPTS_KEY, SENT_TIMEOUT_KEY, accept_wait_s, sent_timeout


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

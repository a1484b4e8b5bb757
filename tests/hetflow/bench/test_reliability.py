"""The reliability benchmark's accounting, on outcomes and monitor views made by hand."""

from hetflow.bench.reliability import HealthLog, Outcome, _fault_summary


def test_a_fault_counts_calls_lost_before_their_first_token_apart_from_those_cut_while_streaming():
    outcomes = [
        Outcome(1.0, "OK", 1.1, 2.0),
        Outcome(9.0, "UNAVAILABLE", 9.5, 10.5),        # cut while streaming: not lost
        Outcome(10.5, "UNAVAILABLE", None, 11.0),      # never started: lost
        Outcome(12.0, "RESOURCE_EXHAUSTED", None, 12.0),  # refused with a retry hint: not lost
        Outcome(13.0, "OK", 13.2, 14.0),
    ]
    health = HealthLog("unused")
    health.samples = [(9.9, {"e": True}), (10.0, {"e": True}), (11.5, {"e": False}), (14.0, {"e": True})]
    summary = _fault_summary(outcomes, 10.0, health, "e")
    assert summary["lost_before_first_token"] == 1 and summary["failed_after_first_token"] == 1
    assert summary["recovery_s"] == 2.0                      # the last failing arrival, 12.0, after the fault at 10.0
    assert summary["marked_unhealthy_after_s"] == 1.5
    assert summary["serving_again_after_s"] == 4.0
    assert summary["codes"] == {"OK": 2, "UNAVAILABLE": 2, "RESOURCE_EXHAUSTED": 1}


def test_no_failure_after_the_fault_is_no_recovery_time():
    summary = _fault_summary([Outcome(11.0, "OK", 11.1, 12.0)], 10.0, HealthLog("unused"), "e")
    assert summary["recovery_s"] == 0.0 and summary["marked_unhealthy_after_s"] is None

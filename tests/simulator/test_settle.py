from simulator.clock import EventLoop
from simulator.settle import SettledMisses, StopBelowSlo, certainly_missed


def _watch(arrivals_s, isolated_s, attainment=0.75):
    loop = EventLoop()
    return loop, SettledMisses(StopBelowSlo(2.0, attainment), arrivals_s, isolated_s, loop)


def test_a_workflow_still_running_past_its_slo_instant_counts_as_late_and_one_on_time_does_not():
    arrivals = {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}
    loop, watch = _watch(arrivals, {"a": 1.0, "b": 1.0, "c": 10.0, "d": 10.0})
    finished = {"a": 1.5, "b": 0.0, "c": 0.0, "d": 0.0}     # a within 2 x 1 s, b still running at 3 s
    loop.at(3.0, watch.check, finished.__getitem__)
    loop.run()
    assert watch.late == 1 and watch.stopped_s is None     # 3 of 4 may still meet it: 75% is not below 75%
    assert watch.summary() is None


def test_the_run_stops_once_the_share_that_can_still_meet_the_slo_falls_below_the_rule():
    arrivals = {"a": 0.0, "b": 0.0, "c": 0.0, "d": 5.0}
    loop, watch = _watch(arrivals, {"a": 1.0, "b": 1.0, "c": 10.0, "d": 1.0})
    finished = {"a": 2.5, "b": 0.0, "c": 0.0, "d": 0.0}     # a finished late, b is running late
    ran = []
    loop.at(3.0, watch.check, finished.__getitem__)
    loop.at(4.0, ran.append, "after the stop")
    loop.run()
    assert watch.stopped_s == 3.0 and not ran               # nothing after the check that settled it
    assert watch.summary() == {"stopped_at_s": 3.0, "late_programs": 2, "programs": 4,
                               "within_slo_share_at_most": 0.5}


def test_a_workflow_that_finished_exactly_at_its_slo_instant_met_it():
    loop, watch = _watch({"a": 1.0}, {"a": 2.0}, attainment=1.0)
    loop.at(9.0, watch.check, {"a": 5.0}.__getitem__)      # latency 4 s = 2 x 2 s
    loop.run()
    assert watch.late == 0 and watch.stopped_s is None


def test_a_miss_is_certain_once_the_instant_has_passed_unfinished_or_finished_late():
    assert certainly_missed(arrival_s=10.0, allowed_s=5.0, finished_s=0.0, now_s=15.5)       # still running
    assert certainly_missed(arrival_s=10.0, allowed_s=5.0, finished_s=15.2, now_s=15.5)      # finished late
    assert not certainly_missed(arrival_s=10.0, allowed_s=5.0, finished_s=14.9, now_s=15.5)  # on time
    assert not certainly_missed(arrival_s=10.0, allowed_s=5.0, finished_s=0.0, now_s=14.0)   # may still make it

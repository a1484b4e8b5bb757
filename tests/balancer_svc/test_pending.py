"""The overlay of this balancer's own admits on top of a monitor snapshot."""

from dataclasses import replace

from balancer_svc.pending import PendingAdmits
from hetflow.core.snapshot import InFlightCall
from tests.factories import engine, snapshot


def loads(snap):
    return {e.engine_id: (e.in_flight_tokens, e.in_flight_requests) for e in snap.engines}


def test_unacknowledged_and_newer_admits_are_added():
    pending = PendingAdmits(horizon_s=10)
    snap = snapshot(engine("a", "m", 100, in_flight_requests=1), engine("b", "m", 0))
    pending.add("r1", "a", 50)            # not acknowledged yet
    pending.add("r2", "b", 30)
    pending.acked("r2", admit_seq=7, now_s=0)
    assert loads(pending.apply(snap, snapshot_admit_seq=6, now_s=1)) == {"a": (150, 2), "b": (30, 1)}
    assert loads(pending.apply(snap, snapshot_admit_seq=7, now_s=1)) == {"a": (150, 2), "b": (0, 0)}


def test_released_and_expired_entries_are_forgotten():
    pending = PendingAdmits(horizon_s=5)
    snap = snapshot(engine("a", "m", 0))
    pending.add("r1", "a", 50)
    pending.drop("r1")
    pending.add("r2", "a", 20)
    pending.acked("r2", admit_seq=3, now_s=0)
    assert loads(pending.apply(snap, snapshot_admit_seq=1, now_s=6)) == {"a": (0, 0)}
    assert len(pending) == 0


def test_many_old_acknowledged_entries_are_skipped_not_counted():
    pending = PendingAdmits(horizon_s=100)
    snap = snapshot(engine("a", "m", 0))
    for i in range(1000):
        pending.add(f"r{i}", "a", 1.0)
        pending.acked(f"r{i}", admit_seq=i + 1, now_s=0)
    assert loads(pending.apply(snap, snapshot_admit_seq=990, now_s=1)) == {"a": (10, 10)}


def test_after_a_monitor_restart_every_entry_counts_until_acknowledged_anew():
    pending = PendingAdmits(horizon_s=100)
    snap = snapshot(engine("a", "m", 0))
    for request_id, seq in (("r1", 5), ("r2", 6)):
        pending.add(request_id, "a", 10.0)
        pending.acked(request_id, admit_seq=seq, now_s=0)
    assert loads(pending.apply(snap, snapshot_admit_seq=6, now_s=1)) == {"a": (0, 0)}
    pending.forget_acks()  # the new monitor's admit_seq counts from zero and holds neither call
    assert loads(pending.apply(snap, snapshot_admit_seq=6, now_s=1)) == {"a": (20, 2)}
    pending.acked("r1", admit_seq=1, now_s=1)
    pending.drop("r2")
    assert loads(pending.apply(snap, snapshot_admit_seq=1, now_s=1)) == {"a": (0, 0)}


def test_a_pending_admit_adds_its_call_after_the_snapshots_older_ones():
    pending = PendingAdmits(horizon_s=10)
    known = InFlightCall(prompt_tokens=100, predicted_tokens=40.0, admitted_s=5.0)
    snap = snapshot(replace(engine("a", "m", 40, in_flight_requests=1), in_flight_calls=(known,)), engine("b", "m"))
    pending.add("r2", "a", 30, prompt_tokens=700, admitted_unix_s=7.0)
    pending.add("r1", "a", 20, prompt_tokens=300, admitted_unix_s=6.0)
    pending.acked("r1", admit_seq=4, now_s=0)
    calls = {e.engine_id: e.in_flight_calls for e in pending.apply(snap, snapshot_admit_seq=3, now_s=1).engines}
    assert calls == {"a": (known, InFlightCall(300, 20.0, 6.0), InFlightCall(700, 30.0, 7.0)), "b": ()}
    calls = {e.engine_id: e.in_flight_calls for e in pending.apply(snap, snapshot_admit_seq=4, now_s=1).engines}
    assert calls["a"] == (known, InFlightCall(700, 30.0, 7.0))  # r1 is in the snapshot already


def test_a_pending_admit_older_than_a_counted_call_goes_before_it():
    pending = PendingAdmits(horizon_s=10)
    known = InFlightCall(prompt_tokens=100, predicted_tokens=40.0, admitted_s=8.0)  # the monitor's stamp, later
    snap = snapshot(replace(engine("a", "m", 40, in_flight_requests=1), in_flight_calls=(known,)))
    pending.add("r1", "a", 20, prompt_tokens=300, admitted_unix_s=6.0)
    (view,) = pending.apply(snap, snapshot_admit_seq=3, now_s=1).engines
    assert view.in_flight_calls == (InFlightCall(300, 20.0, 6.0), known)
    assert (view.in_flight_tokens, view.in_flight_requests) == (60, 2)

"""A call no engine has room for is held in the balancer and decided again (Kairos 6), until its
program's deadline would pass: then DEADLINE_EXCEEDED, not an endless wait."""

import asyncio
import time
from types import SimpleNamespace

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.direct import DirectDecisions
from balancer_svc.dispatcher import Advice, Dispatch, Dispatcher
from hetflow.core.errors import DeadlineExceeded, ResourceExhausted
from hetflow.core.policies.contracts import Prediction, Priority, WaitForCapacity
from hetflow.v1 import balancer_pb2, monitor_pb2
from tests.factories import call, engine, streamed


def decides_by(dispatcher: Dispatcher, decide) -> None:
    """The dispatcher's decisions, the first and each round's, made by ``decide(call)`` (raising
    ``WaitForCapacity`` for no room); its fetches and admits stubbed."""
    async def fetch(c, known=None):
        return c

    async def place(c, start_perf_s):
        return await decide(c)

    async def confirmed(placed):
        return placed

    dispatcher._fetch, dispatcher._place, dispatcher._confirmed = fetch, place, confirmed


async def held_at(dispatcher: Dispatcher, priorities: tuple[float, ...], priority_of: dict) -> tuple[list, list]:
    """Calls at ``priorities`` decided at once (``priority_of`` filled for the stubs), returned with their
    callers' tasks once every one is held."""
    calls = [call() for _ in priorities]
    for c, p in zip(calls, priorities):
        priority_of[c.request_id] = Priority(p)
    tasks = [asyncio.create_task(dispatcher.decide(c)) for c in calls]
    while len(dispatcher.decisions.held) < len(calls):
        await asyncio.sleep(0.005)
    return calls, tasks


def test_held_call_is_decided_again_until_an_engine_has_room():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        attempts = []

        async def decide_once(c):
            attempts.append(c.request_id)
            if len(attempts) < 3:
                raise WaitForCapacity("no room", retry_after_s=0.0)
            return "decided"

        decides_by(dispatcher, decide_once)
        try:
            return await dispatcher.decide(call()), attempts
        finally:
            await dispatcher.close()

    decision, attempts = asyncio.run(scenario())
    assert decision == "decided" and len(attempts) == 3


def test_each_release_round_is_timed_and_its_redecided_calls_counted():
    from prometheus_client import REGISTRY

    def sample(name):
        return REGISTRY.get_sample_value(name) or 0.0

    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        attempts = []

        async def decide_once(c):
            attempts.append(c.request_id)
            if len(attempts) < 3:   # the first decision and the first round hold it; the second round places it
                raise WaitForCapacity("no room", retry_after_s=0.0)
            return "decided"

        decides_by(dispatcher, decide_once)
        try:
            await dispatcher.decide(call())
        finally:
            await dispatcher.close()

    before = {n: sample(n) for n in ("hetflow_balancer_release_round_seconds_count",
                                     "hetflow_balancer_held_redecided_total")}
    asyncio.run(scenario())
    assert sample("hetflow_balancer_release_round_seconds_count") - before[
        "hetflow_balancer_release_round_seconds_count"] == 2
    assert sample("hetflow_balancer_held_redecided_total") - before["hetflow_balancer_held_redecided_total"] == 2


def test_the_held_calls_gauge_counts_the_calls_waiting_for_room_now():
    from balancer_svc.dispatcher import HELD_CALLS

    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        room = asyncio.Event()
        seen = []

        async def decide_once(c):
            seen.append(HELD_CALLS._value.get())
            if not room.is_set():
                raise WaitForCapacity("no room", retry_after_s=0.01)
            return "decided"

        decides_by(dispatcher, decide_once)
        try:
            waiting = [asyncio.create_task(dispatcher.decide(call())) for _ in range(2)]
            while len(dispatcher.decisions.held) < 2:
                await asyncio.sleep(0.01)
            held_now = HELD_CALLS._value.get()
            room.set()
            await asyncio.gather(*waiting)
            return held_now, HELD_CALLS._value.get()
        finally:
            await dispatcher.close()

    assert asyncio.run(scenario()) == (2, 0)


def test_held_call_whose_deadline_would_pass_is_deadline_exceeded():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))

        async def decide_once(c):
            raise WaitForCapacity("no room", retry_after_s=60.0)

        decides_by(dispatcher, decide_once)
        try:
            await dispatcher.decide(call(deadline_unix_s=time.time() + 30.0))
        finally:
            await dispatcher.close()

    with pytest.raises(DeadlineExceeded, match="deadline passed while waiting for KV room"):
        asyncio.run(scenario())


def test_held_calls_are_released_in_priority_order_as_room_frees():
    """Kairos 6 with one hold queue: three calls held, room freed for one call at a time; each round
    tries them in priority order, so they leave in that order, not the order they were held in."""
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        room, released = [0], []
        priority_of = {}

        async def decide_once(c):
            if room[0] == 0:
                raise WaitForCapacity("no room", retry_after_s=0.01, priority=priority_of[c.request_id])
            room[0] -= 1
            released.append(c.request_id)
            return c.request_id

        decides_by(dispatcher, decide_once)
        calls, tasks = await held_at(dispatcher, (3.0, 1.0, 2.0), priority_of)
        for _ in calls:
            room[0] += 1
            while room[0]:
                await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
        await dispatcher.close()
        return [priority_of[r].key for r in released], len(dispatcher.decisions.held)

    order, still_held = asyncio.run(scenario())
    assert order == [1.0, 2.0, 3.0] and still_held == 0


def test_a_round_fetches_its_held_calls_together_then_places_them_in_priority_order():
    """A round's snapshots go out together (one batch to the monitor, not one round trip per held call);
    only then is each call placed, in the hold queue's order, and the confirmations are awaited last."""
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        events, room, priority_of = [], asyncio.Event(), {}

        async def fetch(c, known=None):
            events.append(("fetch", c.request_id))
            await asyncio.sleep(0)                        # a round trip: the others' fetches start meanwhile
            return c

        async def place(c, start_perf_s):
            events.append(("place", c.request_id))
            if not room.is_set():
                raise WaitForCapacity("no room", retry_after_s=0.01, priority=priority_of[c.request_id])
            return c

        async def confirmed(placed):
            events.append(("confirm", placed.request_id))
            return placed.request_id

        dispatcher._fetch, dispatcher._place, dispatcher._confirmed = fetch, place, confirmed
        calls, tasks = await held_at(dispatcher, (3.0, 1.0, 2.0), priority_of)
        events.clear()
        room.set()
        decided = await asyncio.gather(*tasks)
        await dispatcher.close()
        return events, [c.request_id for c in calls], decided

    events, (low, first, middle), decided = asyncio.run(scenario())
    round_events = events[:9]                             # the first round after the room came
    assert [kind for kind, _ in round_events] == ["fetch"] * 3 + ["place"] * 3 + ["confirm"] * 3
    assert [r for kind, r in round_events if kind == "place"] == [first, middle, low]
    assert decided == [low, first, middle]


def test_a_held_call_is_decided_again_on_its_first_advice():
    """The router's confidences and the predictions read the call alone: each round passes the call's
    advice from its first decision back to the fetch, which reuses it rather than asking again."""
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        known_per_fetch, attempts = [], []
        advice = Advice(call(), {"small": (Prediction(10.0), "")}, None)

        async def fetch(c, known=None):
            known_per_fetch.append(known)
            return c

        async def place(c, start_perf_s):
            dispatcher._advice[c.request_id] = advice        # as ``_place`` records a held call's advice
            attempts.append(c.request_id)
            if len(attempts) < 3:
                raise WaitForCapacity("no room", retry_after_s=0.0)
            return c

        async def confirmed(placed):
            return placed

        dispatcher._fetch, dispatcher._place, dispatcher._confirmed = fetch, place, confirmed
        c = call()
        await dispatcher.decide(c)
        left = dict(dispatcher._advice)
        await dispatcher.close()
        return known_per_fetch, left

    known_per_fetch, left = asyncio.run(scenario())
    assert known_per_fetch[0] is None and all(k is not None for k in known_per_fetch[1:])
    assert len(known_per_fetch) == 3 and left == {}      # and forgotten once the call is decided


def test_a_call_whose_caller_gives_up_while_a_round_holds_it_again_leaves_no_advice():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        in_round, finish, attempts = asyncio.Event(), asyncio.Event(), []

        async def fetch(c, known=None):
            return c

        async def place(c, start_perf_s):
            attempts.append(c.request_id)
            if len(attempts) > 1:   # a round: its caller gives up while the router is asked
                in_round.set()
                await finish.wait()
            dispatcher._advice[c.request_id] = Advice(c, {}, None)  # as ``_place`` records a held call's advice
            raise WaitForCapacity("no room", retry_after_s=0.0)

        dispatcher._fetch, dispatcher._place = fetch, place
        caller = asyncio.create_task(dispatcher.decide(call()))
        await in_round.wait()
        caller.cancel()
        await asyncio.sleep(0)
        finish.set()
        while dispatcher.decisions.held or dispatcher._releaser is not None and not dispatcher._releaser.done():
            await asyncio.sleep(0.001)
        left = dict(dispatcher._advice)
        await dispatcher.close()
        return left

    assert asyncio.run(scenario()) == {}


def test_a_call_whose_caller_gives_up_while_a_round_admits_it_is_released():
    """The round's decision admitted the call in the monitor; its caller is gone, so the entry is
    released at once rather than left to orphan reconciliation."""
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        deciding, finish, released = asyncio.Event(), asyncio.Event(), []
        attempts = []

        async def decide_once(c):
            attempts.append(c.request_id)
            if len(attempts) == 1:
                raise WaitForCapacity("no room", retry_after_s=0.0)
            deciding.set()
            await finish.wait()
            return SimpleNamespace(admitted=None)

        decides_by(dispatcher, decide_once)
        dispatcher.monitor_view.release_later = (
            lambda request_id, tokens, outcome, started=0.0, admitted=None: released.append((request_id, outcome)))
        c = call()
        caller = asyncio.create_task(dispatcher.decide(c))
        await deciding.wait()
        caller.cancel()                                  # the client gives up mid-round
        await asyncio.sleep(0)
        finish.set()
        while dispatcher.decisions.held:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)
        await dispatcher.close()
        return c.request_id, released

    request_id, released = asyncio.run(scenario())
    assert released == [(request_id, "cancelled")]


def _recording_monitor(dispatcher: Dispatcher) -> list[str]:
    """The dispatcher's monitor, recording each release in the list returned."""
    order: list[str] = []

    async def release_batch(batch, timeout):
        order.extend(f"release:{r.request_id}" for r in batch.releases)
        return monitor_pb2.ReleaseBatchReply(replies=[monitor_pb2.ReleaseReply() for _ in batch.releases])

    dispatcher.monitor_view.monitor = SimpleNamespace(
        ReleaseStream=streamed(release_batch, monitor_pb2.ReleaseBatchReply))
    return order


async def _slow_admit(order: list[str]) -> None:
    await asyncio.sleep(0.02)
    order.append("admit")


def test_a_release_waits_for_the_admit_sent_beside_the_engine_request():
    """The admit runs beside the engine request; a release must never reach the monitor before it."""
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        order = _recording_monitor(dispatcher)
        admitted = asyncio.create_task(_slow_admit(order))
        dispatcher.monitor_view.release_later("r1", 5, "completed", admitted=admitted)
        await asyncio.gather(*dispatcher.monitor_view._releases.values())
        await dispatcher.close()
        return order

    assert asyncio.run(scenario()) == ["admit", "release:r1"]


def test_a_direct_caller_that_gives_up_during_its_admit_leaves_it_to_finish_then_releases_it():
    """``DirectDecisions`` waits for the admit shielded: the caller's cancellation does not cancel it, and
    the release follows it, so the monitor is never left holding the call."""
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        order = _recording_monitor(dispatcher)
        decided = call()
        admitted = asyncio.create_task(_slow_admit(order))
        dispatch = Dispatch("small", engine("small-0", "small"), Priority(1.0), balancer_pb2.Receipt(),
                            monitor_pb2.AdmitRequest(request_id=decided.request_id),
                            admitted=admitted)
        handing = asyncio.create_task(DirectDecisions(dispatcher)._handed_over(decided, dispatch, ()))
        await asyncio.sleep(0)
        handing.cancel()
        await asyncio.gather(handing, return_exceptions=True)
        await asyncio.gather(*dispatcher.monitor_view._releases.values())
        await dispatcher.close()
        return order, decided.request_id, admitted.cancelled()

    order, request_id, admit_cancelled = asyncio.run(scenario())
    assert order == ["admit", f"release:{request_id}"] and not admit_cancelled


def test_a_release_goes_out_even_when_its_admit_was_cancelled():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        order = _recording_monitor(dispatcher)
        admitted = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        admitted.cancel()
        dispatcher.monitor_view.release_later("r1", 0, "cancelled", admitted=admitted)
        await asyncio.gather(*dispatcher.monitor_view._releases.values())
        await dispatcher.close()
        return order

    assert asyncio.run(scenario()) == ["release:r1"]


def _never_room(dispatcher: Dispatcher) -> None:
    async def decide_once(c):
        raise WaitForCapacity("no room", retry_after_s=0.01)

    decides_by(dispatcher, decide_once)


def test_a_held_call_waits_at_most_max_hold_s_then_is_resource_exhausted_with_a_hint():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", max_hold_s=0.05))
        _never_room(dispatcher)
        try:
            with pytest.raises(ResourceExhausted, match="max_hold_s") as refused:
                await dispatcher.decide(call())
            return refused.value.retry_after_s, len(dispatcher.decisions.held)
        finally:
            await dispatcher.close()

    retry_after_s, still_held = asyncio.run(scenario())
    assert retry_after_s == 1.0 and still_held == 0


def test_a_call_placed_in_the_loop_turn_its_hold_runs_out_goes_with_its_dispatch(monkeypatch):
    """The round's admit resolves the hold as max_hold_s runs out: the caller gets the dispatch (refused,
    its admit would stay in the monitor with no one to release it)."""
    timeouts = []
    real_timeout = asyncio.timeout

    def recorded(delay):
        timeouts.append(real_timeout(delay))
        return timeouts[-1]

    monkeypatch.setattr(asyncio, "timeout", recorded)

    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", max_hold_s=60.0))

        async def decide_once(c):
            raise WaitForCapacity("no room", retry_after_s=30.0)  # no round runs in the test's time

        decides_by(dispatcher, decide_once)
        released = []
        dispatcher.monitor_view.release_later = (
            lambda request_id, tokens, outcome, started=0.0, admitted=None: released.append(request_id))
        c = call()
        caller = asyncio.create_task(dispatcher.decide(c))
        while c.request_id not in dispatcher._held_calls:
            await asyncio.sleep(0.001)
        loop, placed = asyncio.get_running_loop(), SimpleNamespace(admitted=None)

        def admitted_as_the_hold_runs_out():
            timeouts[-1].reschedule(loop.time())  # the hold's end runs next,
            dispatcher._held_calls[c.request_id][1].set_result(placed)  # then the caller wakes to the admit

        loop.call_soon(admitted_as_the_hold_runs_out)
        try:
            return await caller is placed, released
        finally:
            await dispatcher.close()

    assert asyncio.run(scenario()) == (True, [])


def test_a_full_hold_queue_refuses_at_once():
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", max_held_calls=1))
        _never_room(dispatcher)
        first = asyncio.ensure_future(dispatcher.decide(call()))
        while not dispatcher.decisions.held:
            await asyncio.sleep(0.001)
        try:
            with pytest.raises(ResourceExhausted, match="max_held_calls"):
                await dispatcher.decide(call())
        finally:
            first.cancel()
            await dispatcher.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("arriving", ["together", "one-by-one"])
def test_a_round_asks_the_monitor_once_for_all_its_held_calls_and_the_predictor_not_again(arriving):
    """The real fetch path with the memory packer on a small engine and a real monitor servicer: calls past
    the engine's KV are held, and each round then sends their snapshots in one batch (one round trip,
    not one per held call) and asks the predictor nothing (their predictions read the call alone).
    ``arriving`` together, calls are held when the monitor refuses their admits; one by one, when their
    decisions find no room."""
    from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
    from hetflow.core.policy_config import PolicyConfig
    from hetflow.v1 import predictor_pb2
    from monitor_svc.servicer import MonitorServicer
    from tests.balancer_svc.test_two_balancers import PACKER, InProcessMonitor
    from tests.factories import profile

    async def scenario():
        state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
        state.report(EngineStatus("small-0", model="small", address="127.0.0.1:1",
                                  profile=profile(kv_capacity_tokens=1000, max_model_len=1000)), time.time())
        monitor, held_at_batch, predicted_rows = InProcessMonitor(MonitorServicer(state)), [], []
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", predictor_address="127.0.0.1:3",
                                               max_hold_s=600.0, policy=PolicyConfig.from_mapping(PACKER)))
        snapshots = monitor.Snapshots

        async def recording(request, timeout):
            held_at_batch.append((len(dispatcher.decisions.held), len(request.calls)))
            return await snapshots(request, timeout)

        async def predict(request, timeout):
            predicted_rows.append(len(request.rows))
            return predictor_pb2.PredictReply(predictions=[predictor_pb2.Prediction(median_tokens=60.0)
                                                           for _ in request.rows])

        monitor.Snapshots = recording
        predictor = SimpleNamespace(Predict=predict)
        predictor.PredictStream = streamed(lambda r, timeout: predictor.Predict(r, timeout), predictor_pb2.PredictReply)
        dispatcher.monitor_view.monitor, dispatcher.advisors.predictor = monitor, predictor
        calls = [call(prompt="word " * 120, program_id=f"p{i}", max_tokens=60) for i in range(10)]
        tasks = []
        for c in calls:
            tasks.append(asyncio.create_task(dispatcher.decide(c)))
            if arriving == "one-by-one":                  # each decided (placed or held) before the next
                while not tasks[-1].done() and c.request_id not in dispatcher.decisions.held:
                    await asyncio.sleep(0.01)
        while len(dispatcher.decisions.held) + sum(t.done() for t in tasks) < len(tasks):
            await asyncio.sleep(0.01)
        held_at_batch.clear()
        predicted_rows.clear()
        while len(held_at_batch) < 2:                     # two rounds, no room freed meanwhile
            await asyncio.sleep(0.05)
        rounds, asked = list(held_at_batch), list(predicted_rows)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await dispatcher.close()
        return rounds, asked

    rounds, asked = asyncio.run(scenario())
    assert len(rounds) >= 2 and all(held > 1 and batch == held for held, batch in rounds)
    assert asked == []


def test_a_round_goes_on_when_a_call_whose_caller_gave_up_fails_to_place():
    """A held call's placement awaits (the router asked late), its caller gives up meanwhile, then the
    placement fails: the round neither trips on the settled caller nor leaves the next held call waiting."""
    async def scenario():
        dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1"))
        placing, fail, rounds = asyncio.Event(), asyncio.Event(), [0]
        first, second = call(), call()
        priority_of = {first.request_id: Priority(1.0), second.request_id: Priority(2.0)}

        async def decide_once(c):
            if rounds[0] == 0:
                raise WaitForCapacity("no room", retry_after_s=0.01, priority=priority_of[c.request_id])
            if c.request_id == first.request_id:
                placing.set()
                await fail.wait()
                raise RuntimeError("the router's answer broke the decision")
            return c.request_id

        decides_by(dispatcher, decide_once)
        callers = [asyncio.create_task(dispatcher.decide(c)) for c in (first, second)]
        while len(dispatcher.decisions.held) < 2:
            await asyncio.sleep(0.005)
        rounds[0] = 1
        await placing.wait()
        callers[0].cancel()                                # the first caller gives up mid-placement
        await asyncio.sleep(0)
        fail.set()
        decided = await asyncio.wait_for(callers[1], 5.0)
        await asyncio.gather(callers[0], return_exceptions=True)
        await dispatcher.close()
        return decided, second.request_id

    decided, expected = asyncio.run(scenario())
    assert decided == expected

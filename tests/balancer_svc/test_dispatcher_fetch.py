"""The balancer fetches the snapshot, the router and the predictor together once it knows the served
models, and skips the router for a program it has seen assigned and where its confidences cannot change the
model."""

import asyncio
from types import SimpleNamespace

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Advice, Dispatcher
from hetflow import wire
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2, predictor_pb2, router_pb2
from tests.factories import call, profile, streamed


def _number_in(prompt: str) -> int:
    last = prompt.split()[-1] if prompt.split() else ""
    return int(last) if last.isdigit() else 0


def stack(state: MonitorState, snapshot_waits_for: asyncio.Event | None = None):
    """Stub monitor, router and predictor recording what was asked; the snapshot may wait until the
    router has been asked (which only happens when they are asked together)."""
    asked = []

    async def snapshot(request, timeout):
        asked.append("snapshot")
        if snapshot_waits_for is not None:
            await asyncio.wait_for(snapshot_waits_for.wait(), 1.0)
        view = cluster_snapshot(state, 1.0, request.program_id, request.agent, request.workflow, request.stage_index,
                                request.stage_count, upstream_agent=request.upstream_agent)
        return wire.snapshot_to_proto(view, state.engines, state.admit_seq)

    async def score(request, timeout):
        asked.append("router")
        if snapshot_waits_for is not None:
            snapshot_waits_for.set()
        return router_pb2.ScoreReply(scores=[router_pb2.ModelConfidence(confidence={"small": 0.4, "large": 0.8})])

    async def predict(request, timeout):  # each row's prediction names its program and model
        asked.append("predictor:" + ",".join(sorted(r.model for r in request.rows)))
        return predictor_pb2.PredictReply(predictions=[
            predictor_pb2.Prediction(median_tokens=50.0 + _number_in(r.user_prompt) + (r.model == "large") / 2)
            for r in request.rows])

    async def snapshots(request, timeout):
        return monitor_pb2.SnapshotsReply(snapshots=[await snapshot(c, timeout) for c in request.calls])

    async def admit_batch(request, timeout):
        asked.append("admit")
        return monitor_pb2.AdmitBatchReply(outcomes=[monitor_pb2.AdmitOutcome(reply=monitor_pb2.AdmitReply(
            admit_seq=i + 1)) for i in range(len(request.admits))])

    monitor = SimpleNamespace(Snapshot=snapshot, Snapshots=snapshots, AdmitBatch=admit_batch)
    router, predictor = SimpleNamespace(Score=score), SimpleNamespace(Predict=predict)
    # each stream answers by its stub's unary method as it is when asked (a test may swap it)
    monitor.SnapshotsStream = streamed(lambda r, timeout: monitor.Snapshots(r, timeout), monitor_pb2.SnapshotsReply)
    monitor.AdmitStream = streamed(lambda r, timeout: monitor.AdmitBatch(r, timeout), monitor_pb2.AdmitBatchReply)
    router.ScoreStream = streamed(lambda r, timeout: router.Score(r, timeout), router_pb2.ScoreReply)
    predictor.PredictStream = streamed(lambda r, timeout: predictor.Predict(r, timeout), predictor_pb2.PredictReply)
    return asked, monitor, router, predictor


def dispatcher_on(state, waits_for=None):
    dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", router_address="127.0.0.1:2",
                                           predictor_address="127.0.0.1:3"))
    view, advisors = dispatcher.monitor_view, dispatcher.advisors
    asked, view.monitor, advisors.router, advisors.predictor = stack(state, waits_for)
    return dispatcher, asked


def two_models() -> MonitorState:
    state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
    state.report(EngineStatus("small-0", model="small", profile=profile()), 0.0)
    state.report(EngineStatus("large-0", model="large", profile=profile()), 0.0)
    return state


def test_the_first_call_fetches_in_two_steps_and_later_ones_in_one():
    async def scenario():
        state = two_models()
        dispatcher, asked = dispatcher_on(state)
        first = await dispatcher._fetch(call(program_id="p1"))
        assert asked[0] == "snapshot" and set(asked[1:]) == {"router", "predictor:large,small"}
        waits = asyncio.Event()
        dispatcher, asked = dispatcher_on(state, waits)
        dispatcher._served_models = ["large", "small"]
        second = await dispatcher._fetch(call(program_id="p2", stage_index=1, stage_count=2))  # the snapshot
        # only answers once the router was asked
        await dispatcher.close()
        return first, second, asked

    first, second, asked = asyncio.run(scenario())
    assert sorted(asked) == ["predictor:large,small", "router", "snapshot"]
    for fetched in (first, second):
        assert fetched.router_asked
        assert fetched.confidences[0] == {"small": 0.4, "large": 0.8}
        assert set(fetched.predictions) == {"large", "small"}


def test_a_call_fetched_again_on_its_advice_asks_the_monitor_alone():
    """A held call's round (Kairos 6) asks only the snapshot again: the router's confidences and the
    predictions read the call alone and come from its advice; another call's advice is not taken."""
    async def scenario():
        state = two_models()
        dispatcher, asked = dispatcher_on(state)
        dispatcher._served_models = ["large", "small"]
        held = call(program_id="p1", stage_index=1, stage_count=2)
        first = await dispatcher._fetch(held)
        asked.clear()
        again = await dispatcher._fetch(held, Advice.of(first))
        asked_again = list(asked)
        asked.clear()
        other = await dispatcher._fetch(call(program_id="p2", stage_index=1, stage_count=2), Advice.of(first))
        await dispatcher.close()
        return first, again, asked_again, other, asked

    first, again, asked_again, other, asked_other = asyncio.run(scenario())
    assert asked_again == ["snapshot"]
    assert again.router_asked and again.confidences == first.confidences
    assert again.predictions == first.predictions
    assert sorted(asked_other) == ["predictor:large,small", "router", "snapshot"] and other.router_asked


def test_a_program_seen_assigned_skips_the_router():
    async def scenario():
        state = two_models()
        state.admit("r0", "p1", "large", "large-0", 10.0, 0.5)
        dispatcher, asked = dispatcher_on(state)
        dispatcher._served_models = ["large", "small"]
        await dispatcher._fetch(call(program_id="p1"))              # learns A[p1] = large from the snapshot
        asked.clear()
        fetched = await dispatcher._fetch(call(program_id="p1"))
        await dispatcher.close()
        return asked, fetched

    asked, fetched = asyncio.run(scenario())
    assert "router" not in asked and not fetched.router_asked


def test_a_call_without_stages_gets_them_from_the_snapshot_before_the_predictor_reads_them():
    """Kairos 4.2 online: the monitor has seen two runs of "code" (planner, then coder); a new run's first
    call, named only by its program, is decided at stage 1 of 2, and the predictor is asked with that."""
    async def scenario():
        state = two_models()
        for run in ("old-1", "old-2"):
            for i, (agent, upstream) in enumerate((("planner", ""), ("coder", "planner"))):
                state.admit(f"{run}-{i}", run, "large", "large-0", 10.0, 0.1 + i, workflow="code", agent=agent,
                            upstream_agent=upstream)
                state.release(f"{run}-{i}", 0.5 + i)
        state.sweep(100.0)                                      # idle past program_idle_after_s: runs learned
        for engine_id, model in (("small-0", "small"), ("large-0", "large")):
            state.report(EngineStatus(engine_id, model=model, profile=profile()), 100.0)
        dispatcher, asked = dispatcher_on(state)
        dispatcher._served_models = ["large", "small"]
        rows = []
        predict = dispatcher.advisors.predictor.Predict

        async def recording(request, timeout):
            rows.extend(request.rows)
            return await predict(request, timeout)
        dispatcher.advisors.predictor.Predict = recording
        fetched = await dispatcher._fetch(call(program_id="new", workflow="code", agent="planner"))
        await dispatcher.close()
        return fetched, asked, rows

    fetched, asked, rows = asyncio.run(scenario())
    assert asked[0] == "snapshot" and len(asked) == 3       # the snapshot first, then router and predictor
    assert (fetched.call.workflow.stage_index, fetched.call.workflow.stage_count) == (1, 2)
    inferred = fetched.snapshot.inferred_stages
    assert inferred is not None and (inferred.stage_index, inferred.runs_seen) == (1, 2)
    assert {(r.stage_index, r.stage_count) for r in rows} == {(1, 2)}


def test_calls_deciding_at_once_share_one_router_and_one_predictor_rpc():
    async def scenario():
        state = two_models()
        dispatcher, asked = dispatcher_on(state)
        dispatcher._served_models = ["large", "small"]
        score = dispatcher.advisors.router.Score

        async def scoring(request, timeout):
            reply = await score(request, timeout)
            return type(reply)(scores=[reply.scores[0]] * len(request.prompts))
        dispatcher.advisors.router.Score = scoring
        fetched = await asyncio.gather(*(dispatcher._fetch(call(program_id=f"p{i}", prompt=f"question {i}",
                                                                 stage_index=1, stage_count=2)) for i in range(3)))
        await dispatcher.close()
        return fetched, asked

    fetched, asked = asyncio.run(scenario())
    assert sorted(asked) == ["predictor:large,large,large,small,small,small", "router",
                             "snapshot", "snapshot", "snapshot"]
    for i, f in enumerate(fetched):  # each call got its own rows' predictions back
        assert {m: p.median_tokens for m, (p, _) in f.predictions.items()} == {"small": 50.0 + i, "large": 50.5 + i}
        assert f.confidences[0]


def test_the_router_is_not_asked_where_its_confidences_cannot_change_the_model():
    """The default's slack rule at no slack with the small model busy and the large one idle: only the large
    model can be taken, so no confidence is read, before or after the snapshot."""
    async def scenario():
        state = two_models()
        state.admit("r0", "busy", "small", "small-0", 4_000.0, 0.5)
        dispatcher, asked = dispatcher_on(state)
        first = await dispatcher._fetch(call(program_id="p1"))        # asks after the snapshot, if at all
        dispatcher.monitor_view.watched_engines = lambda: cluster_snapshot(state, 1.0)  # as the watch tells it
        second = await dispatcher._fetch(call(program_id="p2"))       # would ask beside the snapshot
        await dispatcher.close()
        return first, second, asked

    first, second, asked = asyncio.run(scenario())
    assert "router" not in asked and not first.router_asked and not second.router_asked
    assert first.confidences == ({}, False)


def test_the_router_is_asked_when_this_balancers_own_admits_bring_a_second_model_within_the_slack():
    """The snapshot alone leaves one model within code's slack (tau 1): the small one idle, the large one
    busy. This balancer's admits on the small engine since, not yet in the snapshot, put both within it:
    the decision reads the router then, as it would on the view it decides on."""
    async def scenario():
        state = two_models()
        state.admit("r0", "busy", "large", "large-0", 3_000.0, 0.5)
        dispatcher, asked = dispatcher_on(state)
        dispatcher.monitor_view.pending.add("mine", "small-0", 2_000.0)
        dispatch = await dispatcher._decide_once(call(program_id="p1", workflow="code"))
        await dispatcher.close()
        return asked, dispatch

    asked, dispatch = asyncio.run(scenario())
    assert "router" in asked
    model_stage = next(s for s in dispatch.receipt.stages if s.stage == "model")
    assert dict(model_stage.scores) == pytest.approx({"small": 0.4, "large": 0.8})

"""Two balancers share one monitor and decide on their own snapshots: the memory packer's calls are
admitted only while their plans still fit the engine's ledger as the monitor holds it (``within_kv``),
and the working-set gate's new programs only while the engine's active programs leave their room
(``within_working_set``), so however the two balancers' decisions interleave, the engine is never
promised more KV than it has; a call whose room went to the other balancer is held and decided again,
not sent."""

import asyncio
import time
from dataclasses import replace

import grpc
import numpy as np
import pytest

from balancer_svc import convert
from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Dispatcher
from hetflow.core.errors import AlreadyExists, ResourceExhausted, Unavailable
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.core.policy_config import PolicyConfig
from hetflow.v1 import monitor_pb2
from monitor_svc.servicer import MonitorServicer
from tests.factories import StreamedCall, call, profile

KV_CAPACITY_TOKENS = 1000


class InProcessMonitor:
    """A balancer's monitor stub answered by a real ``MonitorServicer`` in this process: both balancers'
    stubs share it, as two balancer processes share one monitor."""

    def __init__(self, servicer: MonitorServicer) -> None:
        self.servicer = servicer
        self.calls_on_the_watch = 0
        """Snapshots asked without the engines: decisions that took them from a balancer's watch."""

    async def Snapshot(self, request, timeout):
        return await self.servicer.Snapshot(request, None)

    async def Snapshots(self, request, timeout):
        self.calls_on_the_watch += sum(c.without_engines for c in request.calls)
        return await self.servicer.Snapshots(request, None)

    async def Admit(self, request, timeout):
        return await self.servicer.Admit(request, None)

    async def AdmitBatch(self, request, timeout):
        return await self.servicer.AdmitBatch(request, None)

    def SnapshotsStream(self):
        return StreamedCall(self.Snapshots, monitor_pb2.SnapshotsReply)

    def WatchEngines(self, request):
        return self.servicer.WatchEngines(request, None)

    def AdmitStream(self):
        return StreamedCall(self.AdmitBatch, monitor_pb2.AdmitBatchReply)

    async def Complete(self, request, timeout):
        return await self.servicer.Complete(request, None)

    Cancel = Complete

    def ReleaseStream(self):
        async def release_batch(batch, timeout):
            return monitor_pb2.ReleaseBatchReply(replies=[await self.Complete(r, timeout) for r in batch.releases])
        return StreamedCall(release_batch, monitor_pb2.ReleaseBatchReply)


PACKER = {"engine": "memory-packer"}
WORKING_SET_GATE = {"engine": "scored", "engine_params": {"filters": ["working-set"], "scorers": {"queue": 1}}}


def _balancer(monitor: InProcessMonitor, policy: dict) -> Dispatcher:
    dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", max_hold_s=0.2,
                                           policy=PolicyConfig.from_mapping(policy)))
    dispatcher.monitor_view.monitor = monitor
    return dispatcher


def _one_engine(monitor: type[InProcessMonitor]) -> tuple[MonitorState, Dispatcher]:
    """A monitor that knows one engine, ``small-0``, and a balancer of the default policy in front of it."""
    state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
    state.report(EngineStatus("small-0", model="small", address="127.0.0.1:1", profile=profile()), time.time())
    return state, _balancer(monitor(MonitorServicer(state)), {})


def _promised_tokens(state: MonitorState, policy: dict) -> float:
    """What the engine is promised: the packer's ledger peak, or the gate's active programs' contexts."""
    if policy is WORKING_SET_GATE:
        return float(state.resident(state.engines["small-0"], time.time()).tokens)
    window = state.engines["small-0"].ledger.window(time.time(), 64)
    return float(np.max(window)) if len(window) else 0.0


async def _watching(balancer: Dispatcher, state: MonitorState) -> None:
    """Start the balancer's watch of the engines and wait until its decisions take them from it."""
    view = balancer.monitor_view
    view.start()
    await view.snapshot(call(program_id="warm-up"))  # the whole snapshot the watch must follow
    for _ in range(500):
        if view.engine_watch.current(state.epoch) is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the watch never heard from the monitor")


@pytest.mark.parametrize("policy", [PACKER, WORKING_SET_GATE], ids=["memory-packer", "working-set-gate"])
@pytest.mark.parametrize("conditional", [True, False])
@pytest.mark.parametrize("watching", [False, True], ids=["snapshots", "watching"])
def test_two_balancers_deciding_at_once_never_promise_an_engine_more_kv_than_it_has(policy, conditional, watching,
                                                                                    monkeypatch):
    """Control (``conditional`` False, the admit sent without its condition): the two balancers, each
    counting only its own admits on top of a snapshot taken before either admitted, promise the engine
    more than its capacity between them; the check that fails there is the one that holds otherwise.
    ``watching``: the balancers take the engines from their watches (``EngineWatch``), which lag the
    monitor by its watch interval, rather than from a snapshot per decision."""
    if not conditional:
        admit_request = convert.admit_request

        def unconditional(c, decision):
            admit = admit_request(c, decision)
            admit.within_kv = False
            admit.ClearField("within_working_set")
            return admit
        monkeypatch.setattr(convert, "admit_request", unconditional)

    async def scenario():
        state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
        state.report(EngineStatus("small-0", model="small", address="127.0.0.1:1",
                                  profile=profile(kv_capacity_tokens=KV_CAPACITY_TOKENS, max_model_len=1000)),
                     time.time())
        monitor = InProcessMonitor(MonitorServicer(state))
        balancers = [_balancer(monitor, policy), _balancer(monitor, policy)]
        if watching:
            for balancer in balancers:
                await _watching(balancer, state)
        calls = [call(prompt="word " * 120, program_id=f"p{i}", max_tokens=60) for i in range(12)]
        try:
            outcomes = await asyncio.gather(*(balancers[i % 2].decide(c) for i, c in enumerate(calls)),
                                            return_exceptions=True)
        finally:
            for balancer in balancers:
                await balancer.close()
        return state, outcomes, monitor.calls_on_the_watch

    state, outcomes, calls_on_the_watch = asyncio.run(scenario())
    assert (calls_on_the_watch >= 12) == watching
    admitted = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert admitted and len(state.entries) == len(admitted)
    assert all(isinstance(o, ResourceExhausted) and "KV room" in str(o) for o in refused)
    if conditional:
        assert _promised_tokens(state, policy) <= KV_CAPACITY_TOKENS
        assert refused  # some calls' room went to the other balancer: held, never sent
    else:
        assert _promised_tokens(state, policy) > KV_CAPACITY_TOKENS


def test_a_request_id_in_flight_is_refused_and_the_refused_call_leaves_the_first_ones_entry():
    """A client that sends one request id twice while the first call runs: the balancer running it refuses
    the second at its door (ALREADY_EXISTS); the monitor refuses another balancer's admit of it, and that
    balancer's release then leaves the first call's entry where it is (it used to end it)."""

    async def scenario():
        state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
        state.report(EngineStatus("small-0", model="small", address="127.0.0.1:1", profile=profile()), time.time())
        monitor = InProcessMonitor(MonitorServicer(state))
        first, other = _balancer(monitor, {}), _balancer(monitor, {})
        try:
            running = await first.decide(replace(call(program_id="p1"), request_id="r1"))
            await running.admitted
            with pytest.raises(AlreadyExists):
                await first.decide(replace(call(program_id="p1"), request_id="r1"))
            again = await other.decide(replace(call(program_id="p1"), request_id="r1"))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await again.admitted
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            await other.monitor_view.release_later("r1", 0, "cancelled", admitted=again.admitted)
            assert "r1" in state.entries   # the first call's, still running
            await first.monitor_view.release_later("r1", 10, "completed", admitted=running.admitted)
            assert "r1" not in state.entries
        finally:
            await first.close()
            await other.close()

    asyncio.run(scenario())


def test_a_direct_call_handed_to_its_engine_may_be_decided_again_under_its_id():
    """Once a direct-path call is handed to its engine (its ticket out), its caller may decide it again
    under the same id (its model server out of reach, it streams from the engine instead): not refused."""

    async def scenario():
        state, balancer = _one_engine(InProcessMonitor)
        try:
            first = await balancer.decide(replace(call(program_id="p1"), request_id="r1"))
            await first.admitted
            balancer.monitor_view.hand_over("r1", 5.0)
            state.release("r1", time.time(), completed=False)   # its engine ended the held call
            again = await balancer.decide(replace(call(program_id="p1"), request_id="r1"))
            await again.admitted
            assert "r1" in state.entries
        finally:
            await balancer.close()

    asyncio.run(scenario())


def test_a_direct_call_admitted_while_the_monitor_was_away_stops_counting_once_handed_over():
    """Its admit failed (the monitor away), so the balancer counted it on top of its snapshots; once its
    ticket is out it is its engine's, and it no longer counts here (it used to, for good)."""

    class AwayMonitor(InProcessMonitor):
        async def AdmitBatch(self, request, timeout):
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "away")

    async def scenario():
        state, balancer = _one_engine(AwayMonitor)
        try:
            decided = await balancer.decide(replace(call(program_id="p1"), request_id="r1"))
            await decided.admitted
            assert len(balancer.monitor_view.pending) == 1
            balancer.monitor_view.hand_over("r1", 0.01)
            for _ in range(200):
                if not len(balancer.monitor_view.pending):
                    break
                await asyncio.sleep(0.01)
            assert len(balancer.monitor_view.pending) == 0
        finally:
            await balancer.close()

    asyncio.run(scenario())


def test_a_direct_call_given_up_after_its_last_failed_attempt_leaves_no_entry():
    """Past ``redispatch_attempts`` the caller is refused, and the entry its last attempt left in the monitor
    is ended all the same (it stood until the engine's entries were dropped as lost, 600 s)."""
    from balancer_svc.direct import DirectDecisions, FailedAttempt

    async def scenario():
        state, balancer = _one_engine(InProcessMonitor)
        direct = DirectDecisions(balancer)
        balancer.answers_health = lambda address: asyncio.sleep(0, result=True)   # the engine answers its health
        try:
            asked = replace(call(program_id="p1"), request_id="r1")
            await direct.decide(asked, ())
            assert "r1" in state.entries
            failed = [FailedAttempt("small-0", grpc.StatusCode.UNAVAILABLE, "reset")] * (
                balancer.cfg.redispatch_attempts + 1)
            with pytest.raises(Unavailable, match="small-0"):
                await direct.decide(asked, failed)
            assert "r1" not in state.entries
        finally:
            await balancer.close()

    asyncio.run(scenario())


def test_a_call_decided_again_is_forgotten_when_its_new_ticket_expires_not_its_first():
    """The first hand-over's timer used to forget the second attempt's registration (and its count on top of
    the snapshots) before the second ticket expired."""

    async def scenario():
        state, balancer = _one_engine(InProcessMonitor)
        try:
            decided = await balancer.decide(replace(call(program_id="p1"), request_id="r1"))
            await decided.admitted
            view = balancer.monitor_view
            view.hand_over("r1", 0.05)
            view.hand_over("r1", 60.0)   # decided again: a ticket of its own
            await asyncio.sleep(0.2)
            assert "r1" in view.registrations
        finally:
            await balancer.close()

    asyncio.run(scenario())

"""The direct path (issue 34): the balancer decides and admits a call; the caller streams it from the engine.

``Balancer.Decide`` runs the same decision as ``Balancer.Generate`` (snapshot, router, predictor,
pipeline, holds for KV room, the monitor's admit) and answers with the engine's address and the engine
request, signed with a dispatch ticket (``hetflow.runtime.tickets``) that lets that engine run it once,
for this tenant, within ``TICKET_TTL_S``. The tokens then go from the engine to the caller; the engine
ends the monitor's entry when the call ends. A call whose engine failed before its first token comes
back with every failed engine named (``DecideRequest.failed``): the balancer cancels the entry the
failed attempt left, skips a dead engine for everyone (as the relay path does), and decides again
without those engines, up to ``redispatch_attempts`` times. A ticket that expired before it reached
its engine (FAILED_PRECONDITION) comes back the same way, its engine not excluded.

What this path leaves to the relay path (``Balancer.Generate``): cascades (the balancer must read the
answer to judge it), HexGen-Flow's live alpha tuning (it learns from the calls the balancer sees end)
and the live workload's output lengths (the re-planner's sample keeps each call's input only).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Sequence

import grpc

from balancer_svc import convert
from balancer_svc.dispatcher import Dispatch, Dispatcher, NeverReached
from hetflow.core.call import LlmCall
from hetflow.core.errors import InvalidArgument
from hetflow.runtime.interceptors import REDISPATCHABLE
from hetflow.runtime.logs import get_logger
from hetflow.runtime.tickets import TICKET_TTL_S
from hetflow.v1 import balancer_pb2

log = get_logger(__name__)


@dataclass(frozen=True)
class FailedAttempt:
    """An engine that failed the call before its first token, as the caller reports it."""

    engine_id: str
    code: grpc.StatusCode
    details: str

    @property
    def expired(self) -> bool:
        """The ticket expired before it reached the engine: decided again, the engine not excluded."""
        return self.code == grpc.StatusCode.FAILED_PRECONDITION

    @classmethod
    def from_proto(cls, msg: balancer_pb2.FailedDispatch) -> FailedAttempt:
        code = grpc.StatusCode.__members__.get(msg.code)
        if code not in REDISPATCHABLE:
            raise InvalidArgument(f"failed[].code must be one of {[c.name for c in REDISPATCHABLE]} (a failure "
                                  f"another engine may not share, or an expired ticket), got {msg.code!r}")
        if not msg.engine_id:
            raise InvalidArgument("failed[].engine_id is required")
        return cls(msg.engine_id, code, msg.details)


class DirectDecisions:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def decide(self, call: LlmCall, failed: Sequence[FailedAttempt]) -> balancer_pb2.DispatchDecision:
        """Decide and admit ``call`` for its caller to stream from the engine."""
        d = self.dispatcher
        with d.admission(call.workflow.tenant, relays=False, accept_wait_s=call.accept_wait_s):
            if failed:
                await self._after_failure(call, failed)
            else:
                d.workload.record(call.received_unix_s, call.full_input, call.input_tokens, call.workflow.workflow)
            d.monitor_view.exclude(call.request_id, {f.engine_id for f in failed if not f.expired})
            try:
                dispatch = await d.decide(call)
            finally:
                d.monitor_view.exclude(call.request_id, set())
            return await self._handed_over(call, dispatch, failed)

    async def _handed_over(self, call: LlmCall, dispatch: Dispatch,
                           failed: Sequence[FailedAttempt]) -> balancer_pb2.DispatchDecision:
        """The admitted decision, with its ticket. The monitor holds the entry before the caller hears
        of the engine, so the engine's release cannot overtake the admit."""
        d = self.dispatcher
        dispatch.receipt.redispatched_from.extend(f.engine_id for f in failed)
        request = d.engine_request(call, dispatch, direct=True)
        try:
            if dispatch.admitted is not None:
                await asyncio.shield(dispatch.admitted)
        except asyncio.CancelledError:
            d.monitor_view.release_later(call.request_id, 0, "cancelled", admitted=dispatch.admitted)
            raise
        d.monitor_view.hand_over(call.request_id, TICKET_TTL_S)
        d.sent(dispatch)
        return convert.dispatch_decision(request, dispatch.model, dispatch.engine.engine_id, dispatch.engine.address,
                                         dispatch.receipt if call.want_receipt else None)

    async def _after_failure(self, call: LlmCall, failed: Sequence[FailedAttempt]) -> None:
        """The last attempt failed before its first token: skip its engine for everyone when it is dead; end
        the entry it left in the monitor (an engine that answered has ended it already, which is no error);
        give up past ``redispatch_attempts``, the entry ended all the same."""
        d = self.dispatcher
        last = failed[-1]
        address = d.monitor_view.engine_status(last.engine_id).address
        failure = NeverReached(last.engine_id, address, last.code, last.details)
        if failure.engine_fault and not last.expired and (not address or not await d.answers_health(address)):
            await d.monitor_view.engine_unreachable(last.engine_id, str(failure))
        d.monitor_view.release_later(call.request_id, 0, f"engine-error:{last.code.name}")
        await d.monitor_view.released(call.request_id)
        if len(failed) > d.cfg.redispatch_attempts:
            raise failure.as_error()
        log.warning("redeciding", failed_engine=last.engine_id, reason=str(failure), attempt=len(failed))

"""The decision loop from a call's arrival to its placement, holds included: one copy for the balancer
and the simulator (issue 63).

A call is decided on what its caller gathered for it (the monitor's view, the router's confidences,
the predictions: ``Gathered``) by the policy pipeline (``hetflow.core.pipeline``, Chimera Algorithm 1).
A call no engine has room for is held (Kairos 6: "the request remains in the scheduling queue, awaiting
the next scheduling round") in one queue ordered by its priority on its model; each round decides the
held calls again in that order, and each that fits goes. The loop keeps no clock and does no I/O: time
is passed in, and the caller runs the rounds (the balancer on its event loop, the simulator on its
virtual one), sends the engine request and tells the monitor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.errors import DeadlineExceeded, ResourceExhausted
from hetflow.core.hold_queue import HeldCall, HoldQueue
from hetflow.core.pipeline import Decision, Pipeline
from hetflow.core.policies.contracts import Prediction, Priority, WaitForCapacity
from hetflow.core.snapshot import ClusterSnapshot


@dataclass(frozen=True)
class HoldLimits:
    """How long and how many calls the loop holds for KV room."""

    max_held_calls: int = 0
    """Calls held at once; a call past it is refused (RESOURCE_EXHAUSTED). 0: no limit."""
    max_hold_s: float = math.inf
    """How long a call may wait for room before it is refused (RESOURCE_EXHAUSTED)."""
    refuse_past_deadline: bool = False
    """Refuse (DEADLINE_EXCEEDED) a call whose program's deadline would pass before the next round,
    rather than hold it past its deadline."""


@dataclass(frozen=True)
class Gathered:
    """What one decision reads, gathered by the caller for ``call``."""

    call: LlmCall
    """The call as decided (with the stages the monitor inferred, if any)."""
    view: ClusterSnapshot
    candidates: list[str]
    """``DecisionLoop.candidates(call, view)``: the models the call may go to, each with a prediction."""
    router_asked: bool
    confidence: Mapping[str, float]
    predictions: Mapping[str, tuple[Prediction, str]]
    prompt_truncated: bool = False


class DecisionLoop:
    def __init__(self, pipeline: Pipeline, limits: HoldLimits) -> None:
        self.pipeline = pipeline
        self.limits = limits
        self.held = HoldQueue()
        """Calls waiting for KV room, decided again each round in priority order (Kairos 6)."""

    def candidates(self, call: LlmCall, view: ClusterSnapshot) -> tuple[list[str], bool]:
        """The models ``call`` may go to, and whether the router is asked about them (the caller then
        gathers the router's confidences and a prediction for each)."""
        candidates = self.pipeline.candidate_models(call, view)
        return candidates, self.pipeline.needs_router(call, candidates, view)

    def decide(self, gathered: Gathered, held_as: str = "") -> Decision:
        """Chimera Algorithm 1 on what was gathered; raises ``WaitForCapacity`` when no engine has room
        (the caller then ``hold``s the call) and the pipeline's errors for a call no engine can take.
        ``held_as``: the id the call is held under, when not its request id (``hold``)."""
        request_id = held_as or gathered.call.request_id
        self.pipeline.store.waiting_calls = self.held.waiting_with(request_id)
        self.pipeline.store.call_is_held = request_id in self.held
        return self.pipeline.decide(gathered.call, gathered.view, gathered.candidates, gathered.confidence,
                                    gathered.predictions, gathered.router_asked, gathered.prompt_truncated)

    def hold(self, call: LlmCall, wait: WaitForCapacity, now_unix_s: float, held_as: str = "") -> float:
        """Hold ``call`` for room (a call held again keeps its place); returns how long it may wait, in
        seconds. Refuses it instead when the limits say so. ``held_as``: the id to hold it under, when not
        its request id (the simulator holds a cascade's stages of one call under the call's id)."""
        request_id = held_as or call.request_id
        deadline = call.workflow.deadline_unix_s
        if self.limits.refuse_past_deadline and deadline and now_unix_s + wait.retry_after_s > deadline:
            raise DeadlineExceeded(f"program deadline passed while waiting for KV room: {wait}") from wait
        if request_id not in self.held and self.limits.max_held_calls and \
                len(self.held) >= self.limits.max_held_calls:
            raise ResourceExhausted(f"{len(self.held)} calls already wait for KV room (max_held_calls): {wait}",
                                    retry_after_s=max(1.0, wait.retry_after_s)) from wait
        self.held.hold(request_id, wait.priority or Priority(0.0), now_unix_s)
        if self.limits.refuse_past_deadline and deadline:
            return min(self.limits.max_hold_s, deadline - now_unix_s)
        return self.limits.max_hold_s

    def round(self) -> list[HeldCall]:
        """A scheduling round: the held calls in the order they are decided again."""
        return self.held.in_order()

    def leave(self, request_id: str) -> float | None:
        """The call left the hold queue (placed, refused or given up); when it was first held, None if it
        never was."""
        held = self.held.release(request_id)
        return held.held_since_s if held is not None else None

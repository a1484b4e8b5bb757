"""When the RL router may take no action (load-balancer paper, 4.3). The paper offers no action at every
step and gives its reason in the reward's design: the router should keep requests from "being queued at
each model instance due to a lack of memory". Offered always, it was learned for another reason: eq. 3
counts a held request's wait the same as a routed one's, while the prefill a routing adds slows every
request at that instance at once, so with a discount of 0.99 per 20 ms step a routing's cost fell by
40% for each second it was put off, and the trained agent held more requests every episode
(docs/rl-router.md). So no action is offered only for the reason the paper gives: while no instance has
a free batch slot and KV room for the request (its prompt and predicted decode tokens, as maximum
capacity usage asks, C.3.2), and then at most ``max_hold_s`` from its arrival. Room is counted against
what the in-flight calls will hold at their end (prompt and predicted decode, the monitor's account),
or what they hold now where that is more: against the KV free now, routed calls grew into memory that
held ones had been let into, and engines preempted: in the paper's setting one trained network made
668 preemptions a run on seed 0 with the KV free now, 207 with this (docs/rl-router.md). Training and
the balancer's ``rl-router`` apply this same rule.

hetflow also filters the instances before the Q-values score them (``offered_actions``), as the Gateway
API Inference Extension's endpoint picker filters before it scores: while some instance has room for the
request, only those are offered. The paper offers every instance; trained so, the router sent 13% of its
routings to an instance without room while another had it (docs/rl-router.md), each a request queued
for lack of memory, the outcome the paper's guidance term is there to prevent."""

from __future__ import annotations

from typing import Sequence

from hetflow.core.rl_router.state import NextRequest
from hetflow.core.snapshot import EngineView


def free_kv_tokens(engine: EngineView) -> float:
    """KV capacity less what is in use and what was dispatched but not yet prefilled."""
    return engine.kv_capacity_tokens * (1.0 - engine.kv_cache_usage) - engine.pending_prefill_tokens


def reserved_kv_tokens(engine: EngineView) -> float:
    """KV the in-flight calls will hold at their end (prompt and predicted decode tokens, from the view's
    ``in_flight_calls``), or the KV in use and dispatched now where that is more."""
    at_end = sum(c.prompt_tokens + c.predicted_tokens for c in engine.in_flight_calls)
    return max(at_end, engine.kv_capacity_tokens - free_kv_tokens(engine))


def has_room(engine: EngineView, request: NextRequest) -> bool:
    """A free batch slot, and KV for the request's prompt and predicted decode tokens beside what is
    reserved (``reserved_kv_tokens``)."""
    return (engine.in_flight_requests < engine.max_batch_size
            and engine.kv_capacity_tokens - reserved_kv_tokens(engine)
            >= request.prompt_tokens + request.predicted_decode_tokens)


def may_hold(engines: Sequence[EngineView], request: NextRequest, held_s: float, max_hold_s: float) -> bool:
    """Whether no action is offered for ``request``, held ``held_s`` so far (module docstring)."""
    return held_s < max_hold_s and not any(has_room(e, request) for e in engines)


def offered_actions(engines: Sequence[EngineView], request: NextRequest, held_s: float,
                    max_hold_s: float) -> list[int]:
    """The actions offered for ``request``, as indices of ``engines`` (``len(engines)``: no action): the
    instances with room for it when one has; otherwise every instance, and no action while
    ``may_hold``."""
    roomy = [i for i, engine in enumerate(engines) if has_room(engine, request)]
    if roomy:
        return roomy
    return list(range(len(engines))) + ([len(engines)] if held_s < max_hold_s else [])

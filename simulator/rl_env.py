"""The RL router's environment (load-balancer paper, 4.3): the cluster as the balancer serving the policy
sees it. A request is decided when it arrives; no action (offered only while no instance has room for
it, ``hetflow.core.rl_router.hold``) holds it in the balancer's hold queue (``hetflow.core.hold_queue``)
until an instance has room, and every ``step_s`` (section 5: "we take actions every 0.02 seconds") a
round decides again, in the queue's order, every held request an instance now has room for. Between
rounds the engines (hetflow's engine model, FCFS as vLLM's default) run. (Deciding a held request again
while still no instance has room would offer the choice it took again: re-decided every step, 1,600
requests made 1.6 million decisions an episode.) The paper routes the head of a router queue, one request a
step; trained that way, the agent met a queue the balancer never has (one request decided while the
others wait behind it, so a large request held at the head blocks the small ones that would fit), and
maximum capacity usage itself was 9% below round robin there but 39.5% in the balancer
(docs/rl-router.md). So decisions come as the balancer takes them: several at one instant (a round, or
arrivals in the same step), where the transition from one to the next takes no time.

The paper's 0.02 s is its V100's shortest decode iteration; it is kept as the round's interval (the
``rl-router`` picker's ``retry_after_s``), whatever the cluster's own iteration.

The engines report to a monitor every 0.5 s as live ones do, and the state is computed from the monitor's
cluster snapshot by the code the balancer's ``rl-router`` runs (``hetflow.core.rl_router.state``), with the
queue length the balancer gives it (``HoldQueue.waiting_with``), so a policy trained here reads in service
what it read in training. The reward is eq. 3 per step, and eq. 4's guidance per routing
(``hetflow.core.rl_router``). Baselines act through the same ``decide``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetflow.core.engine.profile import EngineSpec
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.engine.request import EngineRequest
from hetflow.core.hold_queue import HoldQueue
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import MonitorLimits, MonitorState
from hetflow.core.policies.contracts import Priority
from hetflow.core.policies.rl_router import MAX_HOLD_S
from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS, Buckets
from hetflow.core.rl_router.hold import free_kv_tokens, may_hold, offered_actions
from hetflow.core.rl_router.impact import Gradients, Running, guidance, mixing_reward
from hetflow.core.rl_router.request_class import ClassThresholds
from hetflow.core.rl_router.reward import Progress, reward
from hetflow.core.rl_router.state import NextRequest, state_vector
from hetflow.core.snapshot import EngineView
from simulator.clock import EventLoop
from simulator.engine import VirtualEngine
from simulator.run import ENGINE_REPORT_INTERVAL_S

HEAVY_PROMPT_S = ClassThresholds.heavy_prompt_s
STEP_S = 0.02
"""Section 5's step."""
COMPLETION_REWARD = 60.0
"""r_w (C.10.3)."""


@dataclass(frozen=True)
class RoutedRequest:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    predicted_decode_tokens: float
    """What the router believes (the bucket predictor's estimate, or the truth for an oracle)."""


class RoutingEnv:
    def __init__(self, engines: Sequence[EngineSpec], requests: Sequence[RoutedRequest],
                 buckets: Buckets = DQN_BUCKETS, step_s: float = STEP_S, alpha: float = 0.5,
                 epsilon_s: float = HEAVY_PROMPT_S, max_hold_s: float = MAX_HOLD_S) -> None:
        self.specs, self.requests = list(engines), sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        self.buckets, self.alpha = buckets, alpha
        self.step_s = step_s
        self.max_model_len = max(s.profile.max_model_len for s in self.specs)
        self._ideal_s = {r.request_id: self.specs[0].profile.isolated_request_s(r.prompt_tokens,
                                                                               int(r.predicted_decode_tokens))
                         for r in self.requests}
        """T-hat_j (eq. 3): each request alone on an instance (they are homogeneous, 4.3)."""
        self.epsilon_s = epsilon_s
        """Eq. 1's epsilon (the paper gives no value): by default a heavy prompt's prefill time (section 3),
        so a prompt phase that would take longer than that is penalised."""
        self.max_hold_s = max_hold_s
        """The balancer's ``rl-router`` bound, kept in training so that the policy learns what it will do."""
        self._by_id = {r.request_id: r for r in self.requests}
        self.reset()

    @property
    def actions(self) -> int:
        """Each instance, then no action (4.3)."""
        return len(self.specs) + 1

    @property
    def no_action(self) -> int:
        return len(self.specs)

    def reset(self) -> list[float]:
        self.loop = EventLoop()
        self.engines = [VirtualEngine(s.engine_id, s.model, s.profile, QueueConfig("priority"), self.loop, self._done)
                        for s in self.specs]
        self.monitor = MonitorState(MonitorLimits(engine_stale_after_s=float("inf"),
                                                  engine_failed_after_s=float("inf"),
                                                  orphan_grace_s=float("inf"), program_ttl_s=float("inf")))
        self._report()
        self.loop.every(ENGINE_REPORT_INTERVAL_S, self._report)
        self.held = HoldQueue()
        """Requests held by no action, decided again each round (the balancer's hold queue)."""
        self._arriving = list(self.requests)
        self._active: dict[str, tuple[RoutedRequest, EngineRequest]] = {}
        """Routed requests not finished yet."""
        self.finished: dict[str, float] = {}
        self.first_token_s: dict[str, float] = {}
        self._completed_now = 0
        self._views: tuple[tuple[int, float], list[EngineView]] | None = None
        """The instances' views with the monitor's (version, time) they were read at."""
        self._to_decide = self._arrivals()
        """This instant's decisions still to take, the current one first."""
        return self._settle()

    def _report(self) -> None:
        for engine in self.engines:
            self.monitor.report(engine.status(), self.loop.now)

    def _done(self, req: EngineRequest) -> None:
        self._active.pop(req.request_id)
        self.finished[req.request_id] = self.loop.now
        self.first_token_s[req.request_id] = req.first_token_s or self.loop.now
        self.monitor.release(req.request_id, self.loop.now, req.output_tokens)
        self._completed_now += 1

    def _arrivals(self) -> list[RoutedRequest]:
        arrived = []
        while self._arriving and self._arriving[0].arrival_s <= self.loop.now:
            arrived.append(self._arriving.pop(0))
        return arrived

    @property
    def deciding(self) -> RoutedRequest | None:
        """The request decided now; None when this instant's decisions are taken (``advance`` next)."""
        return self._to_decide[0] if self._to_decide else None

    def views(self) -> list[EngineView]:
        """The instances in the monitor's cluster snapshot now (read again once the monitor changed or
        time moved on)."""
        key = (self.monitor.version, self.loop.now)
        if self._views is None or self._views[0] != key:
            views = {e.engine_id: e for e in cluster_snapshot(self.monitor, self.loop.now,
                                                              in_flight_calls=True).engines}
            self._views = (key, [views[s.engine_id] for s in self.specs])
        return self._views[1]

    def state(self) -> list[float]:
        """s_t of the request decided now (of none between decisions)."""
        current = self._next_request()
        waiting = self.held.waiting_with(self._to_decide[0].request_id) if self._to_decide else len(self.held)
        return state_vector(waiting, current, self.views(), self.loop.now, self.buckets, self.max_model_len)

    def _next_request(self) -> NextRequest | None:
        current = self.deciding
        return NextRequest(current.prompt_tokens, current.predicted_decode_tokens) if current else None

    def may_hold(self) -> bool:
        """Whether no action is offered for the request decided now (``hetflow.core.rl_router.hold``,
        the balancer's rule)."""
        current = self._next_request()
        return current is not None and may_hold(self.views(), current, self.waited_s(), self.max_hold_s)

    def offered(self) -> list[int]:
        """The actions offered for the request decided now (``hetflow.core.rl_router.hold``, the
        balancer's rule): the instances with room for it when one has; all actions when none is decided."""
        current = self._next_request()
        if current is None:
            return list(range(self.actions))
        return offered_actions(self.views(), current, self.waited_s(), self.max_hold_s)

    def _settle(self) -> list[float]:
        """Pass over the held requests no instance has room for yet (they wait on, undecided); the state
        of the first request to decide, or of none."""
        while self._to_decide and self._to_decide[0].request_id in self.held and self.may_hold():
            self._to_decide.pop(0)
        return self.state()

    def waited_s(self) -> float:
        """How long the request decided now has waited since it arrived (0 for none)."""
        return self.loop.now - self._to_decide[0].arrival_s if self._to_decide else 0.0

    def mixing(self, request: RoutedRequest) -> list[float]:
        """r_mixing of sending ``request`` to each instance now (4.2)."""
        out = []
        for engine in self.engines:
            running = [Running(min(r.num_computed_tokens, r.prompt_tokens), r.output_tokens)
                       for r in engine.scheduler.running]
            out.append(mixing_reward(request.prompt_tokens, int(request.predicted_decode_tokens), running,
                                     Gradients.of(engine.profile), self.epsilon_s, self.alpha))
        return out

    def max_capacity_action(self) -> int:
        """Maximum capacity usage (C.3.2) in this environment's actions, the teacher of demonstrations:
        the request decided now to the instance with the most free KV among those with room for it; no
        action while none has room (and no action is offered); otherwise the most free KV."""
        if self._next_request() is None:
            return self.no_action
        offered, views = self.offered(), self.views()
        if self.no_action in offered:
            return self.no_action
        return max(offered, key=lambda i: free_kv_tokens(views[i]))

    @property
    def done(self) -> bool:
        return len(self.finished) == len(self.requests)

    @property
    def routing_left(self) -> bool:
        """Requests held, to decide or still to arrive: decisions to come."""
        return bool(self.held or self._to_decide or self._arriving)

    def run_to_end(self) -> None:
        """Run the engines until every routed request is finished, without steps (nothing is left to
        route, so there is nothing to decide: a request of 16k decode tokens alone would take 60k steps)."""
        if self.routing_left:
            raise RuntimeError("requests are left to route; decide and advance the environment")
        self.loop.run()

    def decide(self, action: int, gamma: float = 0.99, guided_gamma: float = 0.99) -> tuple[list[float], float]:
        """Route the request decided now to instance ``action``, or hold it (no action: ``actions - 1``);
        return the next state (the next decision's at this instant, or the one between decisions) and
        the decision's reward: eq. 3's guidance term (the steps' rewards come with ``advance``). No
        action is offered only while no instance has room, where every routing would queue the request
        for lack of memory, which the guidance is meant to prevent (4.3, reward (c)): it is not charged."""
        if not self._to_decide:
            raise RuntimeError("no request to decide now; advance the environment")
        current = self._to_decide.pop(0)
        h = 0.0
        if action < len(self.engines):
            self.held.release(current.request_id)
            h = self._route(current, action)
        else:
            self.held.hold(current.request_id, Priority(0.0), self.loop.now)  # FCFS: in the order held
        return self._settle(), reward([], 0, COMPLETION_REWARD, h, gamma, guided_gamma)

    def advance(self) -> tuple[list[float], float, bool]:
        """Run the engines one step once this instant's decisions are taken; the arrivals of the step are
        decided, then a round over the requests held before them that an instance has room for. Returns
        (s_{t+1}, eq. 3's reward of the step, done)."""
        if self._to_decide:
            raise RuntimeError("requests are still to decide at this instant")
        self._completed_now = 0
        self.loop.run_until(self.loop.now + self.step_s)
        self._to_decide = self._arrivals() + [self._by_id[h.request_id] for h in self.held.in_order()]
        return self._settle(), self._reward(), self.done

    def _route(self, request: RoutedRequest, action: int) -> float:
        """Send ``request`` to instance ``action``, tell the monitor; eq. 4's h of the choice."""
        mixes = self.mixing(request)
        engine, now = self.engines[action], self.loop.now
        req = EngineRequest(request_id=request.request_id, prompt_tokens=request.prompt_tokens,
                            max_tokens=request.output_tokens, priority=now, arrival_s=now,
                            target_output_tokens=request.output_tokens)
        self._active[request.request_id] = (request, req)
        self.monitor.admit(request.request_id, "", engine.model, engine.engine_id, request.predicted_decode_tokens,
                           now, prompt_tokens=request.prompt_tokens)
        engine.submit(req)
        return guidance(mixes[action], mixes)

    def _reward(self) -> float:
        """Eq. 3 without the guidance term: every routed request's progress and every waiting one's."""
        progress = [Progress(self._ideal_s[rid], req.output_tokens / max(1.0, r.predicted_decode_tokens))
                    for rid, (r, req) in self._active.items()]
        progress += [Progress(self._ideal_s[r.request_id], 0.0) for r in self._to_decide
                     if r.request_id not in self.held]
        progress += [Progress(self._ideal_s[h.request_id], 0.0) for h in self.held.in_order()]
        return reward(progress, self._completed_now, COMPLETION_REWARD, 0.0, 1.0, 1.0)

    def latencies_s(self) -> dict[str, float]:
        """Arrival to last token of each finished request (the paper's end-to-end latency)."""
        arrival = {r.request_id: r.arrival_s for r in self.requests}
        return {rid: t - arrival[rid] for rid, t in self.finished.items()}

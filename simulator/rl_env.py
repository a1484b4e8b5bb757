"""The RL router's environment (load-balancer paper, 4.3): requests queue at the router and are routed one
at a time; every ``step_s`` (section 5: "we take actions every 0.02 seconds") the agent sends the head of
the queue to an instance or takes no action, and the engines (hetflow's engine model, FCFS as vLLM's
default: the priority queue keyed by arrival) run until the next step. The paper's 0.02 s is its V100's
shortest decode iteration, and a router that routes one request per step must outpace the arrivals: 50
routings/s against its 20 and 40 requests/s. A step of this cluster's own shortest iteration (74 ms for
Qwen2.5-7B on an L4) would cap the router at 13.5/s, below the same load of 5 requests/s per instance, so
the paper's figure is kept. (Routing the next request at once instead, as the balancer does, makes a
routing a zero-time transition while holding earns a step's completions: the agent learned to hold.)

The engines report to a monitor every 0.5 s as live ones do, and the state is computed from the monitor's
cluster snapshot by the code the balancer's ``rl-router`` runs (``hetflow.core.rl_router.state``), so a
policy trained here reads in service what it read in training. The reward is eq. 3 with the guidance of
eq. 4 (``hetflow.core.rl_router``). Baselines act through the same ``step``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetflow.core.engine.profile import EngineSpec
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.engine.request import EngineRequest
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import MonitorLimits, MonitorState
from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS, Buckets
from hetflow.core.rl_router.hold import free_kv_tokens, has_room, may_hold
from hetflow.core.rl_router.impact import Gradients, Running, guidance, mixing_reward
from hetflow.core.rl_router.request_class import ClassThresholds
from hetflow.core.rl_router.reward import Progress, reward
from hetflow.core.rl_router.state import NextRequest, state_vector
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
                 epsilon_s: float = HEAVY_PROMPT_S) -> None:
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
        self.queue: list[RoutedRequest] = []
        self._arriving = list(self.requests)
        self._active: dict[str, tuple[RoutedRequest, EngineRequest]] = {}
        """Routed requests not finished yet."""
        self.finished: dict[str, float] = {}
        self.first_token_s: dict[str, float] = {}
        self._completed_now = 0
        self._admit_arrivals()
        return self.state()

    def _report(self) -> None:
        for engine in self.engines:
            self.monitor.report(engine.status(), self.loop.now)

    def _done(self, req: EngineRequest) -> None:
        self._active.pop(req.request_id)
        self.finished[req.request_id] = self.loop.now
        self.first_token_s[req.request_id] = req.first_token_s or self.loop.now
        self.monitor.release(req.request_id, self.loop.now, req.output_tokens)
        self._completed_now += 1

    def _admit_arrivals(self) -> None:
        while self._arriving and self._arriving[0].arrival_s <= self.loop.now:
            self.queue.append(self._arriving.pop(0))

    def state(self) -> list[float]:
        views = {e.engine_id: e for e in cluster_snapshot(self.monitor, self.loop.now, in_flight_calls=True).engines}
        self._views = [views[s.engine_id] for s in self.specs]
        return state_vector(len(self.queue), self._head(), self._views, self.loop.now, self.buckets,
                            self.max_model_len)

    def _head(self) -> NextRequest | None:
        head = self.queue[0] if self.queue else None
        return NextRequest(head.prompt_tokens, head.predicted_decode_tokens) if head else None

    def may_hold(self, max_hold_s: float) -> bool:
        """Whether no action is offered for the head of the queue now (``hetflow.core.rl_router.hold``,
        the balancer's rule), from the snapshot the last state was computed from."""
        head = self._head()
        return head is not None and may_hold(self._views, head, self.head_waited_s(), max_hold_s)

    def mixing(self, request: RoutedRequest) -> list[float]:
        """r_mixing of sending ``request`` to each instance now (4.2)."""
        out = []
        for engine in self.engines:
            running = [Running(min(r.num_computed_tokens, r.prompt_tokens), r.output_tokens)
                       for r in engine.scheduler.running]
            out.append(mixing_reward(request.prompt_tokens, int(request.predicted_decode_tokens), running,
                                     Gradients.of(engine.profile), self.epsilon_s, self.alpha))
        return out

    def head_waited_s(self) -> float:
        """How long the request at the head of the queue has waited since it arrived (0 for none)."""
        return self.loop.now - self.queue[0].arrival_s if self.queue else 0.0

    def max_capacity_action(self, max_hold_s: float) -> int:
        """Maximum capacity usage (C.3.2) in this environment's actions, the teacher of demonstrations:
        the head of the queue to the instance with the most free KV among those with room for it; no
        action while none has room (and no action is offered); otherwise the most free KV."""
        head = self._head()
        if head is None:
            return self.no_action
        roomy = [i for i, view in enumerate(self._views) if has_room(view, head)]
        if not roomy and self.may_hold(max_hold_s):
            return self.no_action
        return max(roomy or range(len(self._views)), key=lambda i: free_kv_tokens(self._views[i]))

    @property
    def done(self) -> bool:
        return len(self.finished) == len(self.requests)

    @property
    def routing_left(self) -> bool:
        """Requests queued or still to arrive: decisions to come."""
        return bool(self.queue or self._arriving)

    def run_to_end(self) -> None:
        """Run the engines until every routed request is finished, without steps (nothing is left to
        route, so there is nothing to decide: a request of 16k decode tokens alone would take 60k steps)."""
        if self.routing_left:
            raise RuntimeError("requests are left to route; step the environment")
        self.loop.run()

    def step(self, action: int, gamma: float = 0.99, guided_gamma: float = 0.99) -> tuple[list[float], float, bool]:
        """Route the head of the queue to instance ``action`` (no action: ``actions - 1``, or an empty
        queue), run the engines one step, and return (s_{t+1}, r_t, done)."""
        h = 0.0  # no action: offered only while no instance has room, where every routing would queue the
        # request for lack of memory, which the guidance is meant to prevent (4.3, reward (c)): not charged
        if action < len(self.engines) and self.queue:
            h = self._route(self.queue.pop(0), action)
        self._completed_now = 0
        self.loop.run_until(self.loop.now + self.step_s)
        self._admit_arrivals()
        return self.state(), self._reward(h, gamma, guided_gamma), self.done

    def _route(self, head: RoutedRequest, action: int) -> float:
        """Send ``head`` to instance ``action``, tell the monitor; eq. 4's h of the choice."""
        mixes = self.mixing(head)
        engine, now = self.engines[action], self.loop.now
        req = EngineRequest(request_id=head.request_id, prompt_tokens=head.prompt_tokens,
                            max_tokens=head.output_tokens, priority=now, arrival_s=now,
                            target_output_tokens=head.output_tokens)
        self._active[head.request_id] = (head, req)
        self.monitor.admit(head.request_id, "", engine.model, engine.engine_id, head.predicted_decode_tokens, now,
                           prompt_tokens=head.prompt_tokens)
        engine.submit(req)
        return guidance(mixes[action], mixes)

    def _reward(self, h: float, gamma: float, guided_gamma: float) -> float:
        progress = [Progress(self._ideal_s[rid], req.output_tokens / max(1.0, r.predicted_decode_tokens))
                    for rid, (r, req) in self._active.items()]
        progress += [Progress(self._ideal_s[r.request_id], 0.0) for r in self.queue]
        return reward(progress, self._completed_now, COMPLETION_REWARD, h, gamma, guided_gamma)

    def latencies_s(self) -> dict[str, float]:
        """Arrival to last token of each finished request (the paper's end-to-end latency)."""
        arrival = {r.request_id: r.arrival_s for r in self.requests}
        return {rid: t - arrival[rid] for rid, t in self.finished.items()}

"""The RL router's environment (load-balancer paper, 4.3): requests queue at the router and are routed one
at a time; every ``step_s`` (the paper's 0.02 s, its shortest decode iteration) the agent sends the head of
the queue to an instance or takes no action, and the engines (hetflow's engine model, FCFS as vLLM's
default: the priority queue keyed by arrival) run until the next step. The reward is eq. 3 with the
guidance of eq. 4 (``hetflow.core.rl_router``); the state is ``state_vector``. Baselines act through the
same ``step``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetflow.core.engine.profile import EngineSpec
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.engine.request import EngineRequest
from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS, Buckets
from hetflow.core.rl_router.impact import Gradients, Running, guidance, mixing_reward
from hetflow.core.rl_router.request_class import ClassThresholds
from hetflow.core.rl_router.reward import Progress, reward
from hetflow.core.rl_router.state import InFlight, InstanceView, NextRequest, state_vector
from simulator.clock import EventLoop
from simulator.engine import VirtualEngine

STEP_S = 0.02
HEAVY_PROMPT_S = ClassThresholds.heavy_prompt_s
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
        self.buckets, self.step_s, self.alpha = buckets, step_s, alpha
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

    def reset(self) -> list[float]:
        self.loop = EventLoop()
        self.engines = [VirtualEngine(s.engine_id, s.model, s.profile, QueueConfig("priority"), self.loop, self._done)
                        for s in self.specs]
        self.queue: list[RoutedRequest] = []
        self._arriving = list(self.requests)
        self._routed: dict[str, tuple[RoutedRequest, EngineRequest]] = {}
        self.finished: dict[str, float] = {}
        self._completed_now = 0
        self._admit_arrivals()
        return self.state()

    def _done(self, req: EngineRequest) -> None:
        self.finished[req.request_id] = self.loop.now
        self._completed_now += 1

    def _admit_arrivals(self) -> None:
        while self._arriving and self._arriving[0].arrival_s <= self.loop.now:
            self.queue.append(self._arriving.pop(0))

    def instance_views(self) -> list[InstanceView]:
        views = []
        for engine in self.engines:
            s = engine.scheduler
            in_flight = tuple(InFlight(r.prompt_tokens, min(r.num_computed_tokens, r.prompt_tokens), r.output_tokens,
                                       self._predicted(r.request_id)) for r in s.running)
            views.append(InstanceView(in_flight, engine.profile.max_num_seqs, 1.0 - s.kv.usage,
                                      engine.profile.decode_ms_per_token / 1e3))
        return views

    def _predicted(self, request_id: str) -> float:
        return self._routed[request_id][0].predicted_decode_tokens

    def state(self) -> list[float]:
        head = self.queue[0] if self.queue else None
        nxt = NextRequest(head.prompt_tokens, self.buckets.of(int(head.predicted_decode_tokens))) if head else None
        return state_vector(len(self.queue), nxt, self.instance_views(), self.buckets,
                            max(e.profile.max_model_len for e in self.engines))

    def mixing(self, request: RoutedRequest) -> list[float]:
        """r_mixing of sending ``request`` to each instance now (4.2)."""
        out = []
        for engine in self.engines:
            running = [Running(min(r.num_computed_tokens, r.prompt_tokens), r.output_tokens)
                       for r in engine.scheduler.running]
            out.append(mixing_reward(request.prompt_tokens, int(request.predicted_decode_tokens), running,
                                     Gradients.of(engine.profile), self.epsilon_s, self.alpha))
        return out

    @property
    def done(self) -> bool:
        return len(self.finished) == len(self.requests)

    def step(self, action: int, gamma: float = 0.99, guided_gamma: float = 0.99) -> tuple[list[float], float, bool]:
        """Route the head of the queue to instance ``action`` (no action: ``actions - 1``, or an empty
        queue), run the engines one step, and return (s_{t+1}, r_t, done)."""
        h = 0.0
        if action < len(self.engines) and self.queue:
            head = self.queue.pop(0)
            mixes = self.mixing(head)
            h = guidance(mixes[action], mixes)
            req = EngineRequest(request_id=head.request_id, prompt_tokens=head.prompt_tokens,
                                max_tokens=head.output_tokens, priority=self.loop.now, arrival_s=self.loop.now,
                                target_output_tokens=head.output_tokens)
            self._routed[head.request_id] = (head, req)
            self.engines[action].submit(req)
        self._completed_now = 0
        self.loop.run_until(self.loop.now + self.step_s)
        self._admit_arrivals()
        return self.state(), self._reward(h, gamma, guided_gamma), self.done

    def _reward(self, h: float, gamma: float, guided_gamma: float) -> float:
        progress = [Progress(self._ideal_s[rid], req.output_tokens / max(1.0, r.predicted_decode_tokens))
                    for rid, (r, req) in self._routed.items() if rid not in self.finished]
        progress += [Progress(self._ideal_s[r.request_id], 0.0) for r in self.queue]
        return reward(progress, self._completed_now, COMPLETION_REWARD, h, gamma, guided_gamma)

    def latencies_s(self) -> dict[str, float]:
        """Arrival to last token of each finished request (the paper's end-to-end latency)."""
        arrival = {r.request_id: r.arrival_s for r in self.requests}
        return {rid: t - arrival[rid] for rid, t in self.finished.items()}

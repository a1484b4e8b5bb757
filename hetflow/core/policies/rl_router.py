"""The load-balancer paper's RL router (4.3) as an engine picker: the trained Double DQN (C.10.3, a policy
file of ``hetflow train rl``) reads the state of ``hetflow.core.rl_router.state`` from the snapshot and
sends the call to the instance of highest Q, or takes no action: the call is held, the paper's delayed
routing. While some instance has room for the call, only those are offered; no action is offered only
while none has (``hetflow.core.rl_router.hold``, the rules training applies), and then at most
``max_hold_s`` from its arrival if one is set. A held call waits, undecided, until an instance has room
for it (or its max hold passes): each round (a step, the policy's 0.02 s, later) checks, then the
network chooses its instance; a policy can delay calls but never starve one (``simulator.rl_env``
trains it so).

The network's rows and actions are its engines. When the model's healthy engines are not exactly
those (an engine added, removed or down), or the call is for another model, the decision falls back to
the default engine choice (``PolicyConfig().engine``) and the receipt's rule says so. The receipt's
scores are the Q-values of every action.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from hetflow.core import plugins
from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.policies.contracts import (
    Choice,
    EnginePicker,
    PolicyStore,
    Prediction,
    WaitForCapacity,
    healthy_or_unavailable,
)
from hetflow.core.policy_config import PolicyConfig
from hetflow.core.rl_router.hold import offered_actions
from hetflow.core.rl_router.policy_file import load
from hetflow.core.rl_router.state import NextRequest, state_vector
from hetflow.core.snapshot import ClusterSnapshot

NO_ACTION = "no-action"
MAX_HOLD_S = float("inf")
"""The longest a call is held by no action, from its arrival; training keeps the same bound. None by
default: no action is offered only while no instance has room, so a held call goes as soon as one has
(a bound of 1 s sent calls of an overloaded cluster to engine queues that max-capacity usage would have
held, docs/rl-router.md); the balancer's own ``max_hold_s`` still ends any hold."""


class RlRouter(EnginePicker):
    """Engine picker ``rl-router`` (declared in ``hetflow.core.policies.builtins``; torch is imported when built)."""

    reads_in_flight_calls = True

    def __init__(self, policy: str = "", max_hold_s: float = MAX_HOLD_S) -> None:
        if not policy:
            raise ValueError("engine picker 'rl-router' needs 'policy': the file hetflow train rl wrote")
        if max_hold_s < 0:
            raise ValueError(f"max_hold_s must be >= 0, got {max_hold_s}")
        self.path, self.max_hold_s = policy, max_hold_s
        self.policy = load(Path(policy))
        self.network = self.policy.network()
        default = PolicyConfig().engine
        self.fallback: EnginePicker = plugins.build("engine-picker", default.type, default.params)
        self.reads_prefix = self.fallback.reads_prefix
        self.reads_resident = self.fallback.reads_resident

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = {e.engine_id: e for e in healthy_or_unavailable(snapshot, model)}
        mismatch = self._mismatch(model, sorted(engines))
        if mismatch:
            choice = self.fallback.pick(call, snapshot, model, prediction, store)
            return replace(choice, rule=f"rl-router:fallback ({mismatch}):{choice.rule}")
        now_s = snapshot.taken_unix_s
        ordered = [engines[e] for e in self.policy.engine_ids]
        request = NextRequest(call.input_tokens, call_output_tokens(call, prediction))
        held_s = now_s - call.received_unix_s
        offered = offered_actions(ordered, request, held_s, self.max_hold_s)
        hold_offered = len(ordered) in offered
        if hold_offered and store.call_is_held:
            raise WaitForCapacity(f"rl-router: held {held_s:.2f} s, waits for room", self.policy.step_s)
        state = state_vector(store.waiting_calls, request, ordered, now_s, self.policy.buckets,
                             self.policy.max_model_len)
        with torch.no_grad():
            q = [float(v) for v in self.network(torch.tensor([state], dtype=torch.float32))[0]]
        scores = {**dict(zip(self.policy.engine_ids, q)), NO_ACTION: q[-1]}
        best = max((a for a in offered if a < len(ordered)), key=lambda a: (q[a], -a))
        if hold_offered and q[-1] > q[best]:
            raise WaitForCapacity(f"rl-router: no action (Q {q[-1]:.3f} > {q[best]:.3f} of "
                                  f"{self.policy.engine_ids[best]}), held {held_s:.2f} s", self.policy.step_s)
        return Choice(self.policy.engine_ids[best], "rl-router:q-max", scores=scores,
                      loads={e.engine_id: e.in_flight_tokens for e in ordered},
                      params={"queue_length": float(store.waiting_calls), "max_hold_s": self.max_hold_s,
                              "held_s": held_s, "no_action_offered": float(hold_offered),
                              "instances_offered": float(len(offered) - hold_offered)})

    def _mismatch(self, model: str, engine_ids: list[str]) -> str:
        if model != self.policy.model:
            return f"trained for {self.policy.model}, not {model}"
        if engine_ids != sorted(self.policy.engine_ids):
            return f"engines now {engine_ids}, trained for {sorted(self.policy.engine_ids)}"
        return ""

"""Priority: Kairos's workflow-aware order (5.1-5.2). Agents whose remaining-latency distribution lies
nearer the zero-latency anchor go first; within an agent, the program that started earlier goes first,
since it has already waited longer in earlier stages.

The monitor computes the agent's distance to the anchor in the background and puts it in the snapshot
with the program's start. The two are packed into one key, ``distance * AGENT_STRIDE + start``: agent
distances (seconds) dominate any difference of start times within a run, and the engine's heap keeps
the key as an ordinary priority. An agent the monitor has no distribution for yet counts as distance 0
(a cold start orders by program start alone).
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies import Choice, Prediction, PriorityContext, PriorityRule

AGENT_STRIDE = 1e7
"""Start-time seconds per second of agent distance: 1 ms of distance outweighs ~2.8 h of start times."""


@plugin("priority-rule", "agent-priority")
class AgentPriority(PriorityRule):
    needs_agent_stats = True
    """The simulator runs the monitor's background refresh only for rules that read it."""

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[float, Choice]:
        snap = context.snapshot
        distance = snap.agent_anchor_distance_s if snap.agent_anchor_distance_s is not None else 0.0
        start = snap.program_start_s or context.now_s
        key = distance * AGENT_STRIDE + start
        rule = "kairos:agent-priority" if snap.agent_anchor_distance_s is not None else "kairos:agent-unknown"
        return key, Choice(f"{key:.3f}", rule, scores={"anchor_distance_s": distance, "program_start_s": start})

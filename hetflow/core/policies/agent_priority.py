"""Priority: Kairos's workflow-aware order (5.1-5.2). Agents whose remaining-latency distribution lies
nearer the zero-latency anchor go first; within an agent, the program that started earlier goes first,
since it has already waited longer in earlier stages.

The monitor computes the agent's distance to the anchor in the background and puts it in the snapshot
with the program's start. The order is lexicographic: the distance is the priority's key and the
program's start its tiebreak, both kept by the engine's queue ahead of the arrival there.

An agent the monitor has no distribution for yet (Kairos does not say) is placed at the median of the
known agents' distances: it neither jumps ahead of every known agent nor waits behind all of them.
With no agent known (a cold start) every call orders by its program's start.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, Priority, PriorityContext, PriorityRule


@plugin("priority-rule", "agent-priority")
class AgentPriority(PriorityRule):
    needs_agent_stats = True
    """The simulator runs the monitor's background refresh only for rules that read it."""

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        snap = context.snapshot
        if snap.agent_anchor_distance_s is not None:
            distance, rule = snap.agent_anchor_distance_s, "kairos:agent-priority"
        else:
            distance, rule = snap.anchor_distance_median_s or 0.0, "kairos:agent-unknown:median"
        start = context.now_s if snap.program_start_s is None else snap.program_start_s
        return Priority(distance, start), Choice(f"{distance:.3f}/{start:.3f}", rule,
                                                 scores={"anchor_distance_s": distance, "program_start_s": start})

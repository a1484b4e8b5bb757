"""How much a program's context grows from one call to the next, per workflow (issue 35).

An agent's next prompt repeats its last one and adds the call's output, the tool's result and the next
message; a chain's next stage adds its upstream's answer. The growth is what the working-set gate needs
to count an active program at the context its remaining stages will bring back to the engine, not only
at the one it holds now: a gate that counts only today's contexts admits programs whose working sets
then outgrow the KV, and the prefix cache evicts the contexts about to return (the agent family's
capacity cliff, docs/history/results-log.md, "Working sets counted with their growth").

Learned from each program's second stage on: the prompt tokens a call of a new stage adds over the
largest prompt of its program's stage before (``MonitorState._count_stage``; over its previous call for
programs that tell no stage index), 0 when it has fewer, as a DAG's branch may, averaged per workflow over
the stages seen. A chain's
growth is what this models; a DAG's parallel branches add little each and pull the mean down, so its
growth to come is undercounted, never over.
"""

from __future__ import annotations

from collections import OrderedDict

from hetflow.core.monitor.recent import MAX_AGENTS


class ContextGrowth:
    def __init__(self) -> None:
        self._added_tokens_and_calls: OrderedDict[str, tuple[int, int]] = OrderedDict()
        """Workflow -> (prompt tokens added over the calls seen, calls seen); the ``MAX_AGENTS`` most recently
        heard from."""

    def record(self, workflow: str, previous_prompt_tokens: int, prompt_tokens: int, calls: int = 1) -> None:
        """A call of ``workflow`` with ``prompt_tokens``, ``calls`` stages after its program's call of
        ``previous_prompt_tokens`` (more than 1 when the stages between were not seen here)."""
        table = self._added_tokens_and_calls
        added, seen = table.get(workflow, (0, 0))
        table[workflow] = (added + max(0, prompt_tokens - previous_prompt_tokens), seen + calls)
        table.move_to_end(workflow)
        while len(table) > MAX_AGENTS:
            table.popitem(last=False)

    def tokens_per_call(self, workflow: str) -> float:
        """The workflow's mean growth per call; 0 before any program of it made a second call."""
        added, calls = self._added_tokens_and_calls.get(workflow, (0, 0))
        return added / calls if calls else 0.0

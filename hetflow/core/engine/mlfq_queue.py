"""The engine's waiting queue under MLFQ: priority by attained service, with demotion.

Chimera 4.2's MLFQ baseline ("extends vLLM with multiple priority queues and applies promotion and
demotion based on service time"), with the quanta of FastServe's multi-level feedback queue: a request
enters the top level (0) and is demoted one level each time its attained service, the decode
iterations it has run, uses up its level's quantum; quanta double per level, so level ``i`` ends after
``first_quantum_tokens * (2**(i + 1) - 1)`` output tokens. Lower levels are served first, FIFO
within a level. Short jobs finish in the top levels without any length prediction; long ones sink.

The level is the key's priority, so the balancer's priority is ignored here. Chimera 3.7's aging
still bounds starvation (a request waiting S iterations is promoted), so the bottom level is not
starved by a stream of new arrivals. Running requests are not paused for a higher level: demotion
orders admission and picks the victim of a memory preemption (the worst key: the most demoted).
"""

from __future__ import annotations

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.request import EngineRequest
from hetflow.core.plugins import plugin


def mlfq_level(attained_tokens: int, first_quantum_tokens: int, levels: int) -> int:
    """The level a request sits in after ``attained_tokens`` of service (quanta double per level)."""
    level, level_end = 0, first_quantum_tokens
    while attained_tokens >= level_end and level < levels - 1:
        level += 1
        level_end += first_quantum_tokens * 2**level
    return level


@plugin("engine-queue", "mlfq")
class MlfqQueue(AgingPriorityQueue):
    def __init__(self, starvation_threshold: int = 100, running_quantum: int = 50, first_quantum_tokens: int = 32,
                 levels: int = 8) -> None:
        super().__init__(starvation_threshold, running_quantum)
        if first_quantum_tokens < 1 or levels < 1:
            raise ValueError("MLFQ first_quantum_tokens and levels must be >= 1")
        self.first_quantum_tokens, self.levels = first_quantum_tokens, levels

    def push(self, req: EngineRequest, iteration: int) -> None:
        req.priority = float(mlfq_level(req.output_tokens, self.first_quantum_tokens, self.levels))
        super().push(req, iteration)

    def note_running_iteration(self, req: EngineRequest) -> None:
        """Aging's demotion of a promoted request, then MLFQ's demotion by attained service."""
        super().note_running_iteration(req)
        req.priority = float(mlfq_level(req.output_tokens + 1, self.first_quantum_tokens, self.levels))

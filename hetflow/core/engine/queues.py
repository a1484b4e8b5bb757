"""The engine queue a config names: ``priority`` (the balancer's priority with Chimera 3.7 aging) or
``mlfq`` (attained service with demotion, aging kept)."""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.mlfq_queue import MlfqQueue


@dataclass(frozen=True)
class QueueConfig:
    """The engine queue's ordering (hetflow.core.engine.queues) and Chimera 3.7 aging."""

    discipline: str = "priority"
    """``priority``: the balancer's priority; ``mlfq``: attained service with demotion (FastServe)."""
    starvation_threshold: int = 100
    """S: consecutive scheduling iterations a request may wait before it is promoted."""
    running_quantum: int = 50
    """Q: iterations a promoted request runs before it is demoted."""
    mlfq_first_quantum_tokens: int = 32
    """mlfq: output tokens of the top level's quantum; each lower level's quantum doubles."""
    mlfq_levels: int = 8


DISCIPLINES = ("priority", "mlfq")


def make_queue(cfg: QueueConfig) -> AgingPriorityQueue:
    if cfg.discipline == "priority":
        return AgingPriorityQueue(cfg.starvation_threshold, cfg.running_quantum)
    if cfg.discipline == "mlfq":
        return MlfqQueue(cfg.starvation_threshold, cfg.running_quantum, cfg.mlfq_first_quantum_tokens, cfg.mlfq_levels)
    raise ValueError(f"queue.discipline must be one of {DISCIPLINES}, got {cfg.discipline!r}")

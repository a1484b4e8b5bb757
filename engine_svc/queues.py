"""The engine queue a config names: ``priority`` (the balancer's priority with Chimera 3.7 aging) or
``mlfq`` (attained service with demotion, aging kept)."""

from __future__ import annotations

from engine_svc.config import QueueConfig
from engine_svc.mlfq_queue import MlfqQueue
from engine_svc.priority_queue import AgingPriorityQueue

DISCIPLINES = ("priority", "mlfq")


def make_queue(cfg: QueueConfig) -> AgingPriorityQueue:
    if cfg.discipline == "priority":
        return AgingPriorityQueue(cfg.starvation_threshold, cfg.running_quantum)
    if cfg.discipline == "mlfq":
        return MlfqQueue(cfg.starvation_threshold, cfg.running_quantum, cfg.mlfq_first_quantum_tokens, cfg.mlfq_levels)
    raise ValueError(f"queue.discipline must be one of {DISCIPLINES}, got {cfg.discipline!r}")

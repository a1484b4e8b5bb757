"""The engine queue a config names, built by the plugin registry: ``priority`` (the balancer's priority
with Chimera 3.7 aging) or ``mlfq`` (attained service with demotion, aging kept). Each queue's
defaults are its constructor's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.core import plugins
from hetflow.core.engine.aging_queue import AgingPriorityQueue


@dataclass(frozen=True)
class QueueConfig:
    """An engine's queue: a discipline (an ``engine-queue`` plugin) and its parameters. In YAML the
    parameters sit beside the discipline: ``queue: {discipline: mlfq, starvation_threshold: 200}``."""

    discipline: str = "priority"
    params: Mapping[str, Any] = field(default_factory=dict)
    """Set in configuration; every other parameter is the queue's default."""

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> QueueConfig:
        params = dict(raw)
        return cls(str(params.pop("discipline", cls.discipline)), params)


def make_queue(cfg: QueueConfig) -> AgingPriorityQueue:
    return plugins.build("engine-queue", cfg.discipline, cfg.params)


def _register_builtins() -> None:
    from hetflow.core.engine import aging_queue, mlfq_queue  # noqa: F401  registers the built-in queues


_register_builtins()

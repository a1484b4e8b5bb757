"""monitor_svc configuration: the stack YAML's ``monitor`` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.core.monitor.state import MonitorLimits
from hetflow.runtime.config import service_config, stack_defaults
from hetflow.runtime.server import ServeConfig


@dataclass(frozen=True)
class MonitorConfig:
    limits: MonitorLimits = field(default_factory=MonitorLimits)
    sweep_interval_s: float = 1.0
    """How often silent engines are failed and idle programs forgotten."""
    agent_priority_interval_s: float = 10.0
    """How often Kairos's agent priorities are recomputed, in the background (5.1)."""
    watch_interval_s: float = 0.02
    """How often, at most, a watching balancer is sent the engines whose load changed (``WatchEngines``):
    what its view may lag behind releases, reports and other balancers' admits (its own it counts at
    once, and a conditional admit checks the room it takes), against calls that last seconds. Each look
    builds every engine's view, so its CPU is per interval, whatever the decision rate."""
    serve: ServeConfig = field(default_factory=ServeConfig)


def from_stack(raw: Mapping[str, Any]) -> MonitorConfig:
    section = dict(raw.get("monitor", {}))
    limits = {k: section.pop(k) for k in list(section) if k in MonitorLimits.__dataclass_fields__}
    if limits:
        section["limits"] = limits
    return service_config(MonitorConfig, section, "monitor",
                          stack_defaults(raw, "monitor"))

"""A finished call's span (Kairos 4.1): its system identifiers and execution timestamps.

The message id is hetflow's program id; the upstream agent is the one whose output triggered the call.
The monitor keeps the spans of finished calls and derives each agent's latency distributions from
them (``agent_latency``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallSpan:
    message_id: str
    agent: str
    upstream: str
    """The agent whose output triggered this call; "" for the workflow's entry."""
    start_s: float
    end_s: float

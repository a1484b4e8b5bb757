"""Kairos's automated workflow analysis (4.1-4.2): the call graph rebuilt from system identifiers.

Every finished call leaves a span: its message id (hetflow's program id), agent name, upstream agent
and execution timestamps. Upstream names give the edges; for an agent with several downstream
calls, a sweep line over their time spans tells parallel calls (spans that overlap) from sequential
ones (a span that starts after every earlier one has ended), which upstream names alone cannot
(Kairos figure 11 (a) against (c)).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

CallGroups = tuple[tuple[str, ...], ...]
"""An agent's downstream calls in one run: groups run one after another; a group's calls in parallel."""


@dataclass(frozen=True)
class CallSpan:
    message_id: str
    agent: str
    upstream: str
    """The agent whose output triggered this call; "" for the workflow's entry."""
    start_s: float
    end_s: float


def sweep_groups(children: Sequence[CallSpan]) -> CallGroups:
    """Sweep line over the downstream spans of one call, by start time: a span that starts before the
    current group's latest end runs in parallel with it; otherwise it opens the next group."""
    groups: list[list[str]] = []
    group_end = float("-inf")
    for span in sorted(children, key=lambda s: (s.start_s, s.agent)):
        if groups and span.start_s < group_end:
            groups[-1].append(span.agent)
            group_end = max(group_end, span.end_s)
        else:
            groups.append([span.agent])
            group_end = span.end_s
    return tuple(tuple(sorted(g)) for g in groups)


def reconstruct_run(spans: Sequence[CallSpan]) -> dict[str, CallGroups]:
    """One workflow run's graph: agent -> its downstream calls, grouped by the sweep line."""
    children: dict[str, list[CallSpan]] = defaultdict(list)
    for span in spans:
        if span.upstream:
            children[span.upstream].append(span)
    return {agent: sweep_groups(kids) for agent, kids in children.items()}


@dataclass(frozen=True)
class WorkflowGraph:
    """The call patterns seen across runs: per agent, each pattern with how many runs showed it."""

    patterns: dict[str, Counter]

    def most_common(self, agent: str) -> CallGroups:
        return self.patterns[agent].most_common(1)[0][0] if agent in self.patterns else ()

    def edges(self) -> set[tuple[str, str]]:
        return {(a, b) for a, seen in self.patterns.items() for groups in seen for g in groups for b in g}


def reconstruct(spans: Iterable[CallSpan]) -> WorkflowGraph:
    """Group spans by message id, rebuild each run, and count the patterns per agent."""
    runs: dict[str, list[CallSpan]] = defaultdict(list)
    for span in spans:
        runs[span.message_id].append(span)
    patterns: dict[str, Counter] = defaultdict(Counter)
    for run in runs.values():
        for agent, groups in reconstruct_run(run).items():
            patterns[agent][groups] += 1
    return WorkflowGraph(dict(patterns))

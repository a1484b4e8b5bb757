"""Kairos's automated workflow analysis (4.2): a run's stages rebuilt from upstream names and execution
timestamps, and what finished runs teach about the runs still going.

Restored from commit 4b88201 (``monitor_svc/workflow_graph.py``, removed as unused in the core move)
and put to use online (issue 36). Every finished call leaves a span: its message id (hetflow's program
id), agent, upstream agent and execution timestamps (``spans.CallSpan``). Upstream names alone cannot
tell an agent that calls B, C and D at once from one that calls them one after another (Kairos figure
11 (a) against (c)); a sweep line over the spans by start time can: a call that starts before the
current stage's latest end, downstream of the same agent as a call in it, runs in parallel with that
stage; any other call opens the next stage.

A call that arrives with no stage position or count (``WorkflowInfo.stage_index`` and ``stage_count``
both 0: a client that names only its session) gets them here: its position from its own run so far,
its count from the finished runs of its workflow (``StageInference``).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from hetflow.core.call import MAX_STAGES, StageInference
from hetflow.core.monitor.recent import MAX_AGENTS, recent_entry
from hetflow.core.monitor.spans import CallSpan
from hetflow.core.stats import percentile

MAX_RUNS_PER_WORKFLOW = 512
"""Finished runs each workflow's statistics keep (the newest)."""
MAX_SAMPLES_PER_AGENT = 512
MAX_WORKFLOWS = 1024
RUN_WINDOW_CALLS = 512
"""A run's finished calls a position is swept over (``RunSoFar``)."""


def run_stages(spans: Sequence[CallSpan]) -> list[list[CallSpan]]:
    """One run's sequential stages, in order: a sweep line over its calls by start time (Kairos 4.2). A call
    joins the current stage when it starts before the stage's latest end and shares an upstream agent with
    a call in it (parallel downstream calls, figure 11 (a)); otherwise it opens the next stage (sequential
    ones, figure 11 (c)). A call still running ends at ``inf``."""
    stages: list[list[CallSpan]] = []
    stage_end_s, upstreams = float("-inf"), set[str]()
    for span in sorted(spans, key=lambda s: (s.start_s, s.agent)):
        if stages and span.start_s < stage_end_s and span.upstream in upstreams:
            stages[-1].append(span)
            stage_end_s = max(stage_end_s, span.end_s)
        else:
            stages.append([span])
            stage_end_s, upstreams = span.end_s, set[str]()
        upstreams.add(span.upstream)
    return stages


def position_in_run(run_so_far: Sequence[CallSpan], agent: str, upstream: str, now_s: float) -> int:
    """The 1-based stage of a call of ``agent`` downstream of ``upstream`` starting at ``now_s``, given the
    run's calls so far (finished ones, and running ones ending at ``inf``)."""
    call = CallSpan("", agent, upstream, now_s, float("inf"))
    stages = run_stages([*run_so_far, call])
    return next(i for i, stage in enumerate(stages, start=1) if any(s is call for s in stage))


class RunSoFar:
    """A program's finished calls. Past ``RUN_WINDOW_CALLS`` the stages before the last are counted, not
    kept (a long session's calls start after them), so a position costs a sweep over the window only."""

    def __init__(self) -> None:
        self.spans: list[CallSpan] = []
        self.stages_before = 0
        """Stages of the run that fell out of the window, before ``spans``."""
        self.calls = 0

    def add(self, span: CallSpan) -> None:
        self.spans.append(span)
        self.calls += 1
        if len(self.spans) > RUN_WINDOW_CALLS:
            stages = run_stages(self.spans)
            self.stages_before += len(stages) - 1
            self.spans = stages[-1]

    def position_of(self, running: Sequence[CallSpan], agent: str, upstream: str, now_s: float) -> int:
        """The stage of a call starting now, among this run's finished calls and its ``running`` ones."""
        return min(MAX_STAGES, self.stages_before + position_in_run([*self.spans, *running], agent, upstream, now_s))


@dataclass(frozen=True)
class LearnedRun:
    """What one run taught (``WorkflowStages.record_run``), to be forgotten if the run comes back."""

    stage_count: int
    stages_after: tuple[tuple[str, int], ...]
    """(agent, stages after its call) of each call in the run's window."""


def _median(values: Iterable[int]) -> int:
    """The median, halves rounded up."""
    return math.floor(percentile(list(values), 0.5) + 0.5)


class WorkflowStages:
    """What finished runs teach, per workflow: how many stages a run has, and how many stages follow a
    call of each agent (its run's count less its position: tool loops that repeat an agent count each
    call). Medians are kept current as runs are recorded, so inferring costs a lookup. The newest
    ``MAX_RUNS_PER_WORKFLOW`` runs and ``MAX_SAMPLES_PER_AGENT`` samples count; the least recently taught
    workflows and agents past ``MAX_WORKFLOWS`` and ``MAX_AGENTS`` are forgotten."""

    def __init__(self) -> None:
        self.stage_counts: OrderedDict[str, deque[int]] = OrderedDict()
        self.stages_after: OrderedDict[tuple[str, str], deque[int]] = OrderedDict()
        self._median_count: dict[str, int] = {}
        self._median_after: dict[tuple[str, str], int] = {}

    def record_run(self, workflow: str, run: RunSoFar) -> LearnedRun:
        stages = run_stages(run.spans)
        learned = LearnedRun(run.stages_before + len(stages), tuple(
            (span.agent, len(stages) - position) for position, stage in enumerate(stages, start=1) for span in stage))
        self._teach(workflow, learned, add=True)
        return learned

    def forget(self, workflow: str, learned: LearnedRun) -> None:
        """Take back what ``record_run`` taught (one sample of each value: equal samples are alike)."""
        self._teach(workflow, learned, add=False)

    def _teach(self, workflow: str, learned: LearnedRun, add: bool) -> None:
        counts = _samples(self.stage_counts, workflow, MAX_RUNS_PER_WORKFLOW, MAX_WORKFLOWS, self._median_count)
        _change(counts, learned.stage_count, add)
        _set_median(self._median_count, workflow, counts)
        for agent in {a for a, _ in learned.stages_after}:
            key = (workflow, agent)
            after = _samples(self.stages_after, key, MAX_SAMPLES_PER_AGENT, MAX_AGENTS, self._median_after)
            for _, value in (x for x in learned.stages_after if x[0] == agent):
                _change(after, value, add)
            _set_median(self._median_after, key, after)

    def infer(self, workflow: str, agent: str, position: int) -> StageInference:
        """The count for a call at ``position``: its position plus the median number of stages that followed
        its agent's calls, or, for an agent not seen yet, the median run's count (at least ``position``)."""
        if workflow not in self._median_count:
            return StageInference(position, 0, 0)
        after = self._median_after.get((workflow, agent))
        count = position + after if after is not None else max(position, self._median_count[workflow])
        return StageInference(position, min(count, MAX_STAGES), len(self.stage_counts[workflow]))


def _samples(table: OrderedDict[Any, deque[int]], key: Any, max_samples: int, max_keys: int,
             medians: dict[Any, int]) -> deque[int]:
    return recent_entry(table, key, lambda: deque(maxlen=max_samples), max_keys, lambda gone: medians.pop(gone, None))


def _change(samples: deque[int], value: int, add: bool) -> None:
    if add:
        samples.append(value)
    elif value in samples:
        samples.remove(value)


def _set_median(medians: dict[Any, int], key: Any, samples: deque[int]) -> None:
    if samples:
        medians[key] = _median(samples)
    else:
        medians.pop(key, None)

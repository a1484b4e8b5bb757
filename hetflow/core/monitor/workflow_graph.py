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

from collections import defaultdict, deque
from typing import Sequence

from hetflow.core.call import StageInference
from hetflow.core.monitor.spans import CallSpan
from hetflow.core.stats import percentile

MAX_RUNS_PER_WORKFLOW = 512
"""Finished runs each workflow's statistics keep (the newest)."""
MAX_SAMPLES_PER_AGENT = 512


def run_stages(spans: Sequence[CallSpan]) -> list[list[CallSpan]]:
    """One run's sequential stages, in order: a sweep line over its calls by start time (Kairos 4.2). A call
    joins the current stage when it starts before the stage's latest end and shares an upstream agent with
    a call in it (parallel downstream calls, figure 11 (a)); otherwise it opens the next stage (sequential
    ones, figure 11 (c)). A call still running ends at ``inf``."""
    stages: list[list[CallSpan]] = []
    stage_end_s = float("-inf")
    for span in sorted(spans, key=lambda s: (s.start_s, s.agent)):
        if stages and span.start_s < stage_end_s and any(s.upstream == span.upstream for s in stages[-1]):
            stages[-1].append(span)
            stage_end_s = max(stage_end_s, span.end_s)
        else:
            stages.append([span])
            stage_end_s = span.end_s
    return stages


def position_in_run(run_so_far: Sequence[CallSpan], agent: str, upstream: str, now_s: float) -> int:
    """The 1-based stage of a call of ``agent`` downstream of ``upstream`` starting at ``now_s``, given the
    run's calls so far (finished ones, and running ones ending at ``inf``)."""
    call = CallSpan("", agent, upstream, now_s, float("inf"))
    stages = run_stages([*run_so_far, call])
    return next(i for i, stage in enumerate(stages, start=1) if any(s is call for s in stage))


class WorkflowStages:
    """What finished runs teach, per workflow: how many stages a run has, and how many stages follow a
    call of each agent (its run's count less its position: tool loops that repeat an agent count each
    call). Medians are kept current as runs are recorded, so inferring costs a lookup."""

    def __init__(self) -> None:
        self.stage_counts: dict[str, deque[int]] = defaultdict(lambda: deque(maxlen=MAX_RUNS_PER_WORKFLOW))
        self.stages_after: dict[tuple[str, str], deque[int]] = defaultdict(
            lambda: deque(maxlen=MAX_SAMPLES_PER_AGENT))
        self._median_count: dict[str, int] = {}
        self._median_after: dict[tuple[str, str], int] = {}

    def record_run(self, workflow: str, spans: Sequence[CallSpan]) -> None:
        stages = run_stages(spans)
        if not stages:
            return
        counts = self.stage_counts[workflow]
        counts.append(len(stages))
        self._median_count[workflow] = round(percentile(counts, 0.5))
        for position, stage in enumerate(stages, start=1):
            for span in stage:
                self.stages_after[(workflow, span.agent)].append(len(stages) - position)
        for key in {(workflow, span.agent) for stage in stages for span in stage}:
            self._median_after[key] = round(percentile(self.stages_after[key], 0.5))

    def infer(self, workflow: str, agent: str, position: int) -> StageInference:
        """The count for a call at ``position``: its position plus the median number of stages that followed
        its agent's calls, or, for an agent not seen yet, the median run's count (at least ``position``)."""
        if workflow not in self._median_count:
            return StageInference(position, 0, 0)
        after = self._median_after.get((workflow, agent))
        count = position + after if after is not None else max(position, self._median_count[workflow])
        return StageInference(position, count, len(self.stage_counts[workflow]))

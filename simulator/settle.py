"""Stop a capacity probe once its SLO verdict is settled (issue 32: the probes far above capacity are the
costliest, most of all under a policy that holds calls for room and decides every held call again each
round, as vLLM's router's preset does).

A workflow misses the SLO when it finishes later than ``slo_scale`` times its exclusive latency after its
arrival; one still unfinished past that instant will miss it whatever happens next. Once more than
``1 - attainment`` of the trace's workflows have missed (``SloRule``: 95% must meet it), no later event can
make the run pass, so the run can stop there: its verdict is the one the whole run would give. What the
run would have reported past that instant (latency percentiles, queueing, stability) is not known; a
stopped probe says so (``SettledMisses.summary``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Mapping

from simulator.clock import EventLoop


@dataclass(frozen=True)
class StopBelowSlo:
    """The SLO rule a probe is stopped by: ``slo_scale`` (X) and ``attainment`` as in ``SloRule``."""

    slo_scale: float
    attainment: float
    check_interval_s: float = 1.0
    """How often, in virtual seconds, the settled misses are counted: only how soon a run stops."""

    def settled(self, late: int, programs: int) -> bool:
        """``late`` certain misses of ``programs`` leave fewer than ``attainment`` able to meet the SLO."""
        return bool(programs) and (programs - late) / programs < self.attainment


def stopped_summary(stopped_s: float, late: int, programs: int) -> dict[str, float | int]:
    """What a run stopped at ``stopped_s`` knows for certain: its settled misses of its programs."""
    return {"stopped_at_s": stopped_s, "late_programs": late, "programs": programs,
            "within_slo_share_at_most": (programs - late) / programs}


def certainly_missed(arrival_s: float, allowed_s: float, finished_s: float, now_s: float) -> bool:
    """A workflow that arrived at ``arrival_s`` with ``allowed_s`` to finish in has missed the SLO for
    certain at ``now_s``: its instant has passed and it is unfinished (``finished_s`` 0) or finished late."""
    return arrival_s + allowed_s < now_s and (not finished_s or finished_s - arrival_s > allowed_s)


class SettledMisses:
    """Counts the workflows whose SLO miss is certain and stops ``loop`` once they settle a failure."""

    def __init__(self, rule: StopBelowSlo, arrivals_s: Mapping[str, float], isolated_s: Mapping[str, float],
                 loop: EventLoop) -> None:
        self.rule, self.loop = rule, loop
        self._arrivals_s, self._isolated_s = arrivals_s, isolated_s
        self._due = [(arrivals_s[p] + rule.slo_scale * isolated_s[p], p) for p in arrivals_s]
        heapq.heapify(self._due)
        self.programs = len(arrivals_s)
        self.late = 0
        self.stopped_s: float | None = None

    def check(self, finished_s: Callable[[str], float]) -> None:
        """Count every workflow whose SLO instant has passed and that is unfinished or finished late
        (``finished_s``: 0 while unfinished); stop the loop once the share within it is below the rule's."""
        now = self.loop.now
        while self._due and self._due[0][0] < now:
            _, program_id = heapq.heappop(self._due)
            allowed_s = self.rule.slo_scale * self._isolated_s[program_id]
            self.late += certainly_missed(self._arrivals_s[program_id], allowed_s, finished_s(program_id), now)
        if self.rule.settled(self.late, self.programs):
            self.stopped_s = now
            self.loop.stop()

    def summary(self) -> dict[str, float | int] | None:
        """What a stopped run knows for certain; None when the run was not stopped."""
        if self.stopped_s is None:
            return None
        return stopped_summary(self.stopped_s, self.late, self.programs)

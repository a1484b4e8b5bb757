"""Chimera's code workflow run many times: one workflow's failure leaves the others to finish."""

from __future__ import annotations

import asyncio
import itertools

from hetflow.client import CallResult
from hetflow.workflows import code


class FakeProgram:
    def __init__(self, program_id: str, fails: bool) -> None:
        self.program_id, self.fails = program_id, fails

    async def complete(self, agent, messages, max_tokens, timeout_s=None) -> CallResult:
        await asyncio.sleep(0)
        if self.fails:
            raise RuntimeError(f"{self.program_id} refused")
        return CallResult(f"{self.program_id}/{agent}", "ok", "stop", 1, 1, "m", "e0", 0.0)


class FakeClient:
    """Every third program's calls fail."""

    made: list[FakeClient] = []

    def __init__(self, *args, **kwargs) -> None:
        self.ids = itertools.count()
        self.deadlines_unix_s: list[float] = []
        FakeClient.made.append(self)

    async def __aenter__(self) -> FakeClient:
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    def program(self, workflow, stage_count, want_receipt=False, deadline_unix_s=0.0) -> FakeProgram:
        n = next(self.ids)
        self.deadlines_unix_s.append(deadline_unix_s)
        return FakeProgram(f"p{n}", fails=n % 3 == 0)


def test_a_failed_workflow_leaves_the_others_to_finish(monkeypatch):
    monkeypatch.setattr(code, "HetflowClient", FakeClient)
    runs, failures = asyncio.run(code.run_many("unused:1", count=6, rate_per_s=1e6, variant="plan-code"))
    assert sorted(r.program_id for r in runs) == ["p1", "p2", "p4", "p5"]
    assert all(len(r.calls) == 2 for r in runs)
    assert sorted(str(e) for e in failures) == ["p0 refused", "p3 refused"]


def test_each_workflow_runs_to_a_deadline_its_timeout_from_its_start(monkeypatch):
    import time

    monkeypatch.setattr(code, "HetflowClient", FakeClient)
    FakeClient.made.clear()
    before = time.time()
    asyncio.run(code.run_many("unused:1", count=2, rate_per_s=1e6, variant="plan-code", workflow_timeout_s=30.0))
    assert all(before + 30.0 <= d <= time.time() + 30.0 for d in FakeClient.made[0].deadlines_unix_s)
    asyncio.run(code.run_many("unused:1", count=2, rate_per_s=1e6, variant="plan-code"))
    assert FakeClient.made[1].deadlines_unix_s == [0.0, 0.0]

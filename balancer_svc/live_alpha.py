"""HexGen-Flow's alpha tuning (4.3) on the live balancer, off the request path.

Each finished call is noted (O(1)); a workflow ends when a call of its last level finishes, and its
end-to-end latency (from the monitor's program start) goes to the ``AlphaTuner``'s 100 s windows. When a
window's latencies regress (eq. 9, p < 0.01), the programs that started in that window are replayed in
the simulator for every alpha on the grid, in a worker process, and the best alpha (eq. 10) is set in
the pipeline's policy store. One re-tuning runs at a time; requests never wait for it.

The replay rebuilds each program from what the balancer saw: calls in the order they were sent, each
waiting for the calls of its program that had finished when it was sent (the sweep line of Kairos 4.2),
with the prompt and output tokens it really had, on the engines' own timing profiles.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import BrokenExecutor, Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from prometheus_client import Gauge

from hetflow.core.alpha import AlphaTuner
from hetflow.core.call import LlmCall
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.policies.contracts import PolicyStore
from hetflow.core.policy_config import PolicyConfig
from hetflow.core.snapshot import EngineView
from hetflow.core.trace import StageRecord
from hetflow.runtime.logs import get_logger

log = get_logger(__name__)
AlphaReplay = Callable[[Sequence[EngineSpec], PolicyConfig, Sequence[StageRecord], Mapping[str, float]],
                      tuple[float, dict[float, float]]]
"""Eq. 10 by replay: (engines, policy, trace, deadlines) -> (best alpha, P95 per alpha). The simulator's
``replay_best_alpha``, handed in by the composition root (hetflow.serve); picklable, as it runs in a
worker process."""
ALPHA = Gauge("hetflow_balancer_alpha", "HexGen-Flow's alpha of the workload-balanced engine choice (eq. 4)")


@dataclass(frozen=True)
class SeenCall:
    agent: str
    upstream_agent: str
    prompt_tokens: int
    output_tokens: int
    sent_unix_s: float
    finished_unix_s: float


@dataclass
class SeenProgram:
    workflow: str
    tenant: str
    start_unix_s: float
    deadline_unix_s: float
    calls: list[SeenCall] = field(default_factory=list)
    finished_unix_s: float = 0.0


def replay_trace(programs: Mapping[str, SeenProgram], window_start_unix_s: float, models: Sequence[str]
                 ) -> tuple[list[StageRecord], dict[str, float]]:
    """The finished programs that started in the window, as a trace starting at 0, and their deadlines
    in trace time. Every model gets the tokens the call really had: the replay varies the engine choice."""
    records: list[StageRecord] = []
    deadlines_s: dict[str, float] = {}
    for program_id, program in programs.items():
        if not program.finished_unix_s or program.start_unix_s < window_start_unix_s:
            continue
        arrival_s = program.start_unix_s - window_start_unix_s
        calls = sorted(program.calls, key=lambda c: c.sent_unix_s)
        for index, call in enumerate(calls, 1):
            waits_for = [i for i, c in enumerate(calls[:index - 1], 1) if c.finished_unix_s <= call.sent_unix_s]
            records.append(StageRecord(
                program_id=program_id, workflow=program.workflow, variant="replay", stage_index=index,
                stage_count=len(calls), agent=call.agent, upstream_agent=call.upstream_agent, depends_on=waits_for,
                system_prompt="", user_prompt="", input_tokens=dict.fromkeys(models, call.prompt_tokens),
                output_tokens=dict.fromkeys(models, call.output_tokens), correct={}, arrival_s=arrival_s,
                tenant=program.tenant))
        if program.deadline_unix_s:
            deadlines_s[program_id] = program.deadline_unix_s - window_start_unix_s
    return records, deadlines_s


class LiveAlphaTuning:
    def __init__(self, store: PolicyStore, policy: PolicyConfig, window_s: float, replay: AlphaReplay,
                 executor: Executor | None = None) -> None:
        if store.alpha is None:
            raise ValueError("alpha tuning needs an engine stage with an alpha (workload-balanced, or "
                             "memory-packer with then: workload-balanced)")
        self._store, self.policy = store, policy
        self.tuner = AlphaTuner(window_s=window_s, alpha=store.alpha)
        self._replay, self._executor = replay, executor
        self._programs: dict[str, SeenProgram] = {}
        """Programs by first call seen, kept for two windows."""
        self._engines: dict[str, EngineSpec] = {}
        self.retuning: asyncio.Future[tuple[float, dict[float, float]]] | None = None
        self.changes: list[tuple[float, float, dict[float, float]]] = []
        """(unix time, new alpha, replayed P95 per alpha) for each re-tuning."""
        ALPHA.set(store.alpha)

    def call_finished(self, call: LlmCall, engine: EngineView, program_start_unix_s: float | None, prompt_tokens: int,
                      output_tokens: int, sent_unix_s: float, now_unix_s: float) -> None:
        """Note a completed call; at its workflow's end, feed the window and re-tune on a regression."""
        if engine.profile is not None:
            self._engines[engine.engine_id] = EngineSpec(engine.engine_id, engine.model, engine.profile)
        wf = call.workflow
        program = self._programs.get(wf.program_id)
        if program is None:
            start_unix_s = sent_unix_s if program_start_unix_s is None else program_start_unix_s
            program = self._programs[wf.program_id] = SeenProgram(
                wf.workflow, wf.tenant or "default", start_unix_s, wf.deadline_unix_s)
        program.calls.append(SeenCall(wf.agent, wf.upstream_agent, prompt_tokens, output_tokens, sent_unix_s,
                                      now_unix_s))
        self._forget_before(now_unix_s - 2 * self.tuner.window_s)
        if not wf.stage_count or wf.stage_index < wf.stage_count or program.finished_unix_s:
            return
        program.finished_unix_s = now_unix_s
        test = self.tuner.observe(now_unix_s, now_unix_s - program.start_unix_s)
        if test is not None and test.regressed and self.retuning is None:
            log.info("alpha_regression", p95_ref_s=test.p95_ref_s, p95_new_s=test.p95_new_s, p_value=test.p_value)
            self._retune(now_unix_s)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _retune(self, now_unix_s: float) -> None:
        models = sorted({e.model for e in self._engines.values()})
        records, deadlines_s = replay_trace(self._programs, now_unix_s - self.tuner.window_s, models)
        if not records or not models:  # nothing finished in the window, or no engine profile to replay on
            return
        if self._executor is None:  # spawned, not forked: the balancer's process runs gRPC threads
            self._executor = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        loop = asyncio.get_running_loop()
        try:
            self.retuning = loop.run_in_executor(self._executor, self._replay, list(self._engines.values()),
                                                 self.policy, records, deadlines_s)
        except BrokenExecutor as exc:  # its worker died (a replay out of memory): a fresh pool next time, and
            # the call whose end asked for the re-tuning is not failed for it
            log.warning("alpha_retune_failed", error=repr(exc))
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
            return
        self.retuning.add_done_callback(lambda done: self._apply(done, now_unix_s))

    def _apply(self, done: asyncio.Future[tuple[float, dict[float, float]]], started_unix_s: float) -> None:
        self.retuning = None
        if done.cancelled() or done.exception() is not None:
            log.warning("alpha_retune_failed", error=repr(done.exception()) if not done.cancelled() else "cancelled")
            return
        alpha, p95_by_alpha = done.result()
        self._store.alpha = self.tuner.alpha = alpha
        ALPHA.set(alpha)
        self.changes.append((started_unix_s, alpha, p95_by_alpha))
        log.info("alpha_retuned", alpha=alpha, p95_by_alpha_s={f"{a:g}": v for a, v in p95_by_alpha.items()})

    def _forget_before(self, horizon_unix_s: float) -> None:
        while self._programs:
            program_id, program = next(iter(self._programs.items()))
            if program.start_unix_s >= horizon_unix_s:
                return
            del self._programs[program_id]

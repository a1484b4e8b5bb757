"""HexGen-Flow's alpha tuning (4.3) inside a simulation: the run plays the live system, and each
re-tuning replays the last window's programs in fresh simulations, one per alpha on the grid.

Attach to a ``Simulation`` whose engine picker has an ``alpha`` (workload-balanced dispatch).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from balancer_svc.alpha_tuning import AlphaTuner, best_alpha
from hetflow.bench.common import percentile
from hetflow.workloads.trace import StageRecord
from simulator.run import ProgramResult, Simulation


class SimulatedAlphaTuning:
    def __init__(self, sim: Simulation, make_sim: Callable[[float], Simulation], tuner: AlphaTuner | None = None) -> None:
        if not hasattr(sim.pipeline.engine_picker, "alpha"):
            raise ValueError(f"engine picker {sim.pipeline.engine_picker.type_name!r} has no alpha to tune")
        self.sim, self.make_sim = sim, make_sim
        self.tuner = tuner or AlphaTuner(alpha=sim.pipeline.engine_picker.alpha)
        self.changes: list[tuple[float, float, dict[float, float]]] = []
        """(virtual time, new alpha, replayed P95 per alpha) for each re-tuning."""
        sim.on_program_finished.append(self._finished)

    def _finished(self, result: ProgramResult) -> None:
        test = self.tuner.observe(self.sim.loop.now, result.latency_s)
        if test is not None and test.regressed:
            self._retune()

    def _retune(self) -> None:
        now, window = self.sim.loop.now, self.tuner.window_s
        recent = [records for records in self.sim._programs.values() if now - window <= records[0].arrival_s <= now]
        if not recent:
            return
        start = min(r[0].arrival_s for r in recent)
        trace: list[StageRecord] = [replace(rec, arrival_s=rec.arrival_s - start) for r in recent for rec in r]

        def p95(alpha: float) -> float:
            return percentile([r.latency_s for r in self.make_sim(alpha).run(trace)], 0.95)

        alpha, by_alpha = best_alpha(p95)
        self.sim.pipeline.engine_picker.alpha = self.tuner.alpha = alpha
        self.changes.append((now, alpha, by_alpha))

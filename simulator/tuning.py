"""HexGen-Flow's alpha tuning (4.3) by replay: each re-tuning replays the last window's programs in
fresh simulations, one per alpha on the grid, and keeps the alpha of lowest P95 (eq. 10).

``replay_best_alpha`` is what the live balancer runs in a worker process (balancer_svc.live_alpha);
``SimulatedAlphaTuning`` attaches the same loop to a ``Simulation`` that plays the live system.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Sequence

from hetflow.core.alpha import AlphaTuner, best_alpha
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.policy_config import PolicyConfig
from hetflow.core.stats import percentile
from hetflow.core.trace import StageRecord
from simulator.run import ProgramResult, Simulation
from simulator.signals import Signals


def with_alpha(policy: PolicyConfig, alpha: float) -> PolicyConfig:
    """The policy with its engine stage's alpha set, its other parameters kept."""
    return policy.with_params("engine", alpha=alpha)


def replay_best_alpha(engines: Sequence[EngineSpec], policy: PolicyConfig, records: Sequence[StageRecord],
                      deadlines_s: Mapping[str, float] | None = None) -> tuple[float, dict[float, float]]:
    """Eq. 10 over the grid: replay ``records`` on ``engines`` under ``policy`` at each alpha. The replay
    knows each call's real output (the predictor is the oracle) and has no router (prior confidence):
    the same for every alpha, so only the engine choice differs between replays."""

    def p95(alpha: float) -> float:
        sim = Simulation(engines, with_alpha(policy, alpha), Signals("prior", "oracle"))
        return percentile([r.latency_s for r in sim.run(records, deadlines_s)], 0.95)

    return best_alpha(p95)


class SimulatedAlphaTuning:
    def __init__(self, sim: Simulation, make_sim: Callable[[float], Simulation],
                 tuner: AlphaTuner | None = None) -> None:
        store = sim.pipeline.store
        if store.alpha is None:
            raise ValueError(f"engine picker {sim.pipeline.engine_picker.type_name!r} has no alpha to tune")
        self.sim, self.make_sim, self._store = sim, make_sim, store
        self.tuner = tuner or AlphaTuner(alpha=store.alpha)
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
        self._store.alpha = self.tuner.alpha = alpha
        self.changes.append((now, alpha, by_alpha))

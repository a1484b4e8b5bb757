"""Typed, immutable views of the cluster that policies read (built by ``hetflow.core.monitor.snapshot``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TypeVar

from hetflow.core.call import StageInference
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.kv_retention import LogNormalFit


@dataclass(frozen=True)
class InFlightCall:
    """One call in flight at an engine as the monitor accounts it: what the load-balancer paper's RL router
    reads for its per-instance prompt and decode rows (4.3)."""

    prompt_tokens: int
    predicted_tokens: float
    """The prediction the call was admitted with (Chimera I[m]'s entry)."""
    admitted_s: float


@dataclass(frozen=True)
class EngineView:
    engine_id: str
    model: str
    address: str
    healthy: bool
    in_flight_tokens: float
    """Sum of predicted tokens of the engine's in-flight requests (Chimera I[m])."""
    in_flight_requests: int
    waiting: int
    running: int
    kv_cache_usage: float
    decode_ms_per_token: float
    max_batch_size: int
    kv_capacity_tokens: int
    in_flight_cost_s: float = 0.0
    """Sum of the in-flight requests' predicted execution cost: HexGen-Flow's t_queue (eq. 3)."""
    profile: EngineProfile | None = None
    """The engine's timing profile, for execution-cost estimates (HexGen-Flow eq. 2)."""
    kv_ledger_tokens: Sequence[float] = ()
    """Expected KV tokens in use in each coming slot, the current one first (Kairos 6, eq. 3)."""
    suspended: bool = False
    """The engine reported preemptions: no new dispatches until it recovers (Kairos 6)."""
    dispatched_since_report: int = 0
    """Calls dispatched to the engine since its last report, which ``waiting`` does not show yet."""
    pending_prefill_tokens: int = 0
    """Prompt tokens on the engine not yet prefilled: its last report's plus those dispatched since."""
    prefix_match_blocks: int = 0
    """Leading blocks of the call's prompt among those recently sent to the engine: the prefix its
    cache likely holds (``hetflow.core.monitor.prefix_index``); 0 for a call without blocks."""
    prefix_index_blocks: int = 0
    """Blocks recently sent to the engine that its index remembers (SGLang's tree size)."""
    resident_tokens: int = 0
    """Context tokens of the active programs whose last call went to the engine: the KV their next
    calls will ask it to hold again (``MonitorState.resident``)."""
    resident_growth_tokens: int = 0
    """What those contexts will still grow by over their programs' stages to come: each program's calls
    still to come times its growth per call (``MonitorState.resident``); 0 for programs of unknown stages."""
    resident_programs: int = 0
    """How many active programs those are."""
    in_flight_calls: tuple[InFlightCall, ...] = ()
    """The engine's in-flight calls, oldest admit first."""


def view_with(view: EngineView, **changes: object) -> EngineView:
    """``dataclasses.replace`` for a view whose other fields are already set: the copy skips ``__init__``
    (a decision copies every engine's view to add its prefix match; replace costs 20 us a copy, this 2)."""
    return _copied_with(view, changes)


def snapshot_with(snapshot: ClusterSnapshot, **changes: object) -> ClusterSnapshot:
    """``view_with`` for a snapshot (a decision narrows it to its candidate models, or adds its own admits)."""
    return _copied_with(snapshot, changes)


_T = TypeVar("_T")


def _copied_with(instance: _T, changes: dict[str, object]) -> _T:
    unknown = changes.keys() - instance.__dict__.keys()
    if unknown:
        raise TypeError(f"{type(instance).__name__} has no field {sorted(unknown)}")
    copied = object.__new__(type(instance))
    copied.__dict__.update(instance.__dict__)
    copied.__dict__.update(changes)
    return copied


@dataclass(frozen=True)
class ClusterSnapshot:
    taken_unix_s: float
    engines: tuple[EngineView, ...]
    program_model: str = ""
    """A[p] of the call's program, "" when unassigned."""
    program_start_s: float | None = None
    """When the call's program started (its first call reached the monitor): Kairos 5.2's order; None when
    the monitor has not seen the program."""
    agent_anchor_distance_s: float | None = None
    """The call's agent's distance to the zero-latency anchor (Kairos 5.1); None while unknown."""
    anchor_distance_median_s: float | None = None
    """The median of the known agents' distances: where an agent without statistics yet is placed;
    None while no agent has any."""
    agent_expected_s: float | None = None
    """The most likely execution time of the call's agent (Kairos 6, eq. 2); None while unknown."""
    program_service_s: float = 0.0
    """Execution time of the program's completed calls (Autellix's PLAS, eq. 1)."""
    program_critical_service_s: float = 0.0
    """The program's longest chain of execution time so far (Autellix's ATLAS, eq. 2)."""
    program_dispatches: tuple[tuple[str, int], ...] = ()
    """(engine, prompt tokens) of each of the program's calls so far, in dispatch order."""
    remaining_stage_costs_s: tuple[float, ...] = ()
    """Mean t-bar_comp (HexGen-Flow eq. 6) of each stage after the call's, from earlier runs of its
    workflow; 0 for a stage not seen yet."""
    agent_tool_gap: LogNormalFit | None = None
    """The call's agent's tool gaps so far (``ln`` seconds, log-normal; issue 35); None before the first."""
    inferred_stages: StageInference | None = None
    """The call's stage position and count, inferred for a call of a program that came without them
    (Kairos 4.2); None when the call named them or has no program."""

    def healthy_engines(self, model: str | None = None) -> list[EngineView]:
        return [e for e in self.engines if e.healthy and (model is None or e.model == model)]

    def models(self) -> list[str]:
        """Models with at least one engine, healthy or not, sorted."""
        return sorted({e.model for e in self.engines})

    def healthy_models(self) -> list[str]:
        return sorted({e.model for e in self.engines if e.healthy})

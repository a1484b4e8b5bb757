"""The one function that turns the monitor's state into the cluster snapshot a balancer decides on.

monitor_svc answers ``Snapshot`` with it and the simulator calls it before every decision, so the two
see the cluster the same way: each engine as it last reported itself, with the monitor's own
accounting of what was dispatched to it (Chimera 3.5's in-flight tokens, HexGen-Flow's t_queue,
Kairos's memory ledger) and the program's and agent's statistics.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from hetflow.core.call import check_stages
from hetflow.core.monitor.state import EngineRecord, MonitorState, Resident
from hetflow.core.snapshot import ClusterSnapshot, EngineView, InFlightCall, view_with
from hetflow.core.stats import percentile


def _median(values: Iterable[float]) -> float | None:
    ordered = sorted(values)
    return percentile(ordered, 0.5) if ordered else None


def _in_flight_calls(state: MonitorState, record: EngineRecord) -> tuple[InFlightCall, ...]:
    """The engine's entries, oldest admit first: read through its own map (in admit order), so all engines'
    lists together cost O(entries); the sort only fixes the order after a wall-clock step back."""
    entries = sorted((state.entries[request_id] for request_id in record.in_flight), key=lambda e: e.admitted_s)
    return tuple(InFlightCall(e.prompt_tokens, e.predicted_tokens, e.admitted_s) for e in entries)


def engine_view(record: EngineRecord, healthy: bool, kv_ledger_tokens: tuple[float, ...],
                resident: Resident) -> EngineView:
    """One engine's report joined with the monitor's accounting of it."""
    status, profile, index = record.status, record.status.profile, record.prefix_index
    return EngineView(
        engine_id=status.engine_id, model=status.model, address=status.address, healthy=healthy,
        in_flight_tokens=record.in_flight_tokens, in_flight_requests=len(record.in_flight),
        waiting=status.waiting, running=status.running, kv_cache_usage=status.kv_cache_usage,
        decode_ms_per_token=profile.decode_ms_per_token if profile else 0.0,
        max_batch_size=max(1, profile.max_num_seqs) if profile else 1,
        kv_capacity_tokens=profile.kv_capacity_tokens if profile else 0,
        in_flight_cost_s=record.in_flight_cost_s, profile=profile, kv_ledger_tokens=kv_ledger_tokens,
        suspended=record.suspended, dispatched_since_report=record.dispatched_since_report,
        pending_prefill_tokens=status.pending_prefill_tokens + record.dispatched_prompt_tokens_since_report,
        prefix_index_blocks=len(index) if index is not None else 0, resident_tokens=resident.tokens,
        resident_growth_tokens=resident.growth_tokens, resident_programs=resident.programs)


NO_RESIDENT = Resident(0, 0, 0)
"""The active programs of a view whose reader asked for none (``EnginePicker.reads_resident``)."""


def _engine_view_at(state: MonitorState, record: EngineRecord, now_s: float, horizon: int,
                    resident: bool) -> EngineView:
    return engine_view(record, state.is_healthy(record, now_s),
                       tuple(record.ledger.occupied_window(now_s, horizon).tolist()),
                       state.resident(record, now_s) if resident else NO_RESIDENT)


def engine_views(state: MonitorState, now_s: float, in_flight_calls: bool = False,
                 resident: bool = True) -> tuple[EngineView, ...]:
    """Every engine's view at ``now_s``, with its in-flight calls if asked and its active programs unless
    told not to (they cost a pass over each engine's programs); the same views again while nothing changed
    (a simulator's round of held calls decides many calls at one instant)."""
    key = (state.version, now_s, in_flight_calls, resident)
    cached = state.views_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    horizon = state.limits.ledger_horizon_slots
    views = tuple(_engine_view_at(state, record, now_s, horizon, resident) for record in state.engines.values())
    if in_flight_calls:
        views = tuple(view_with(view, in_flight_calls=_in_flight_calls(state, state.engines[view.engine_id]))
                      for view in views)
    state.views_cache = (key, views)
    return views


def _prefix_match(record: EngineRecord, prefix_blocks: Sequence[int]) -> int:
    """Leading blocks of the prompt the engine was recently sent (0 for an engine without an index)."""
    return record.prefix_index.matched_blocks(prefix_blocks) if record.prefix_index is not None else 0


def _with_prefix_match(view: EngineView, record: EngineRecord, prefix_blocks: Sequence[int]) -> EngineView:
    return view_with(view, prefix_match_blocks=_prefix_match(record, prefix_blocks)) \
        if record.prefix_index is not None else view


def prefix_matches(state: MonitorState, prefix_blocks: Sequence[int]) -> dict[str, int]:
    """Each engine's match of a prompt's ``prefix_blocks`` (engines matching none left out): the call's
    part of the engines' views, for a balancer that watches the rest (``with_engines=False``)."""
    matches = {engine_id: _prefix_match(record, prefix_blocks) for engine_id, record in state.engines.items()}
    return {engine_id: blocks for engine_id, blocks in matches.items() if blocks}


def cluster_snapshot(state: MonitorState, now_s: float, program_id: str = "", agent: str = "", workflow: str = "",
                     stage_index: int = 0, stage_count: int = 0, prefix_blocks: Sequence[int] = (),
                     in_flight_calls: bool = False, upstream_agent: str = "",
                     with_engines: bool = True, resident: bool = True) -> ClusterSnapshot:
    """The cluster at ``now_s`` for a call of ``program_id`` by ``agent`` (downstream of ``upstream_agent``)
    at stage ``stage_index`` of ``stage_count`` of ``workflow``, whose prompt has ``prefix_blocks``; each
    engine's in-flight calls only when ``in_flight_calls`` (a policy that reads them asked: the others do
    not pay for the list), and its active programs unless ``resident`` is False (a policy that reads none of
    them, ``EnginePicker.reads_resident``). Each engine's memory ledger is carried up to its last occupied
    slot (nothing for engines no packing decision has used). A call of a program that names neither stage field gets
    them inferred (``MonitorState.infer_stages``), and the later stages' costs follow them. Without
    ``with_engines``, only the call's own part (no engines: a balancer watching them asked)."""
    check_stages(stage_index, stage_count, "snapshot")
    inferred = state.infer_stages(program_id, agent, upstream_agent, workflow, now_s) \
        if program_id and not stage_index and not stage_count else None
    if inferred is not None:
        stage_index, stage_count = inferred.stage_index, inferred.stage_count
    engines = engine_views(state, now_s, in_flight_calls, resident) if with_engines else ()
    if prefix_blocks and with_engines:
        engines = tuple(_with_prefix_match(view, state.engines[view.engine_id], prefix_blocks) for view in engines)
    stats, program = state.agent_stats, state.programs.get(program_id)
    return ClusterSnapshot(taken_unix_s=now_s, engines=engines, program_model=state.program_model(program_id),
                           program_start_s=state.program_start_s(program_id),
                           program_service_s=program.service_s if program else 0.0,
                           program_critical_service_s=program.critical_service_s if program else 0.0,
                           program_dispatches=tuple(program.dispatches) if program else (),
                           agent_anchor_distance_s=stats.anchor_distance_s.get(agent),
                           anchor_distance_median_s=_median(stats.anchor_distance_s.values()),
                           agent_expected_s=stats.expected_s.get(agent),
                           remaining_stage_costs_s=state.stage_costs.later_stages_s(workflow, stage_index, stage_count),
                           agent_tool_gap=state.tool_gaps.fit(workflow, agent), inferred_stages=inferred)

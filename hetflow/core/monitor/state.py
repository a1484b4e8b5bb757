"""Chimera's activity monitor (3.5): the program table A and the in-flight map I.

One entry ``I[engine][request_id] = predicted tokens`` per request in the system, with its predicted
execution cost t_comp (HexGen-Flow eq. 2), whose per-engine sum is t_queue (eq. 3); added on admit
and removed on completion, cancellation, engine failure, or when the engine's own report shows the
request is gone (orphan reconciliation). Per-engine sums are kept incrementally, so a snapshot is
O(engines). Pure state: every method takes the time it is called at.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

from hetflow.core.call import StageInference, check_stages
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.errors import Aborted
from hetflow.core.monitor.agent_latency import AgentStats
from hetflow.core.monitor.context_growth import ContextGrowth
from hetflow.core.monitor.memory_ledger import MemoryLedger, MemoryPlan
from hetflow.core.monitor.prefix_index import PrefixIndex
from hetflow.core.monitor.spans import CallSpan
from hetflow.core.monitor.stage_costs import StageCosts
from hetflow.core.monitor.tool_gaps import ToolGaps
from hetflow.core.monitor.workflow_graph import LearnedRun, RunSoFar, WorkflowStages
from hetflow.core.room import WorkingSetRoom
from hetflow.core.snapshot import EngineView


@dataclass
class InFlightEntry:
    request_id: str
    program_id: str
    model: str
    engine_id: str
    predicted_tokens: float
    admitted_s: float
    predicted_cost_s: float = 0.0
    agent: str = ""
    upstream_agent: str = ""
    inherited_service_s: float = 0.0
    """The program's critical-path service when the call was admitted (Autellix's ATLAS, eq. 2)."""
    final_stage: bool = False
    """The call is of its program's last stage (``stage_index == stage_count``): once it and its siblings
    finish, the program has no next call to bring its context back."""
    prompt_tokens: int = 0
    retain_kv_s: float | None = None
    """The KV hold the balancer chose for the call (issue 35); None when no stage decides holds."""
    via_gateway: bool = False
    """Sent by a gateway to the model server past the engine service (the endpoint picker): the engine's
    reports never list it, so orphan reconciliation leaves it to its balancer's release."""
    missing_since_s: float | None = None
    """The first of the engine's reports, since the last that listed the call, that did not: a call the
    engine finished drops from its reports before its release arrives, which the orphan grace waits for."""


@dataclass
class ProgramRecord:
    program_id: str
    model: str
    """A[p]: the model assigned to the program (Chimera Algorithm 1, line 23)."""
    workflow: str = ""
    deadline_unix_s: float = 0.0
    in_flight: set[str] = field(default_factory=set)
    completed: int = 0
    output_tokens: int = 0
    first_seen_s: float = 0.0
    last_seen_s: float = 0.0
    service_s: float = 0.0
    """Execution time of its completed calls, summed (Autellix's PLAS, eq. 1)."""
    critical_service_s: float = 0.0
    """The longest chain of execution time leading to its calls so far (Autellix's ATLAS, eq. 2): each
    completed call's inherited value plus its own execution time, the largest."""
    dispatches: list[tuple[str, int]] = field(default_factory=list)
    """(engine, prompt tokens) of its calls in dispatch order (Autellix's locality rule): its first
    ``MAX_DISPATCHES_KEPT`` - 1 and its last."""
    dispatch_count: int = 0
    """Its calls dispatched so far (``dispatches`` keeps some)."""
    context_tokens: int = 0
    """Its last call's prompt tokens plus the output tokens released since: the context its next call
    brings back (an agent's next prompt repeats it)."""
    ended: bool = False
    """Its last stage finished: no next call will bring its context back."""
    stage_count: int = 0
    """Its stage count as its client told it (0: unknown or inferred); less its calls so far, the calls
    still to come."""
    last_finished_agent: str = ""
    """The agent of its last call to finish, whose tool gap its next call ends."""
    held_until_s: float | None = None
    """When the KV hold its last finished call was given ends (issue 35); None: no hold was decided."""
    run: RunSoFar = field(default_factory=RunSoFar)
    """Its finished calls (Kairos 4.1): its run so far (``workflow_graph``)."""
    learned: LearnedRun | None = None
    """What its run taught its workflow's stage counts (``WorkflowStages``), when it ended or went idle;
    forgotten if it comes back, to be learned again whole."""
    one_call: bool = False
    """A call that named no program: a run of one call by construction, never learned from."""
    first_stage: tuple[int, int] = (0, 0)
    """(stage index, prompt tokens) of its first call that told its stage index; (0, 0) before one."""
    reached_stage: tuple[int, int] = (0, 0)
    """(stage index, largest prompt tokens) of the highest stage it has dispatched a call of: its calls
    so far are counted by stage, not by dispatch, so a retried stage, a cascade's escalation or its
    judge, or a call told again to a restarted monitor counts once."""


@dataclass(frozen=True)
class EngineStatus:
    """What an engine reports about itself every report interval (engine -> monitor)."""

    engine_id: str
    model: str = ""
    address: str = ""
    """host:port clients dial."""
    backend: str = ""
    serving: bool = True
    waiting: int = 0
    """Requests in hetflow's queue and the backend's own."""
    running: int = 0
    kv_cache_usage: float = 0.0
    """Fraction of KV blocks in use, 0..1."""
    preemptions_total: int = 0
    pending_prefill_tokens: int = 0
    """Prompt tokens of its requests not yet prefilled (waiting, or in a chunked prefill)."""
    profile: EngineProfile | None = None
    active_request_ids: tuple[str, ...] = ()
    """For the monitor's orphan reconciliation."""
    serving_endpoint: str = ""
    """ip:port of the engine's model server's own HTTP API (the endpoint picker's destinations)."""
    incarnation: str = ""
    """New each time the engine, or the model server behind it, starts ("": not told)."""


@dataclass
class EngineRecord:
    status: EngineStatus
    received_s: float
    dispatched_since_report: int = 0
    """Admits to the engine since its last report, which that report cannot show yet."""
    dispatched_prompt_tokens_since_report: int = 0
    """Their prompt tokens, all still to prefill as far as the monitor knows."""
    in_flight: dict[str, float] = field(default_factory=dict)
    in_flight_tokens: float = 0.0
    in_flight_cost_s: float = 0.0
    """Sum of the in-flight requests' predicted t_comp: HexGen-Flow's t_queue (eq. 3)."""
    ledger: MemoryLedger = field(default_factory=MemoryLedger)
    """Expected KV tokens per coming slot (Kairos 6)."""
    suspended: bool = False
    """Preemptions since the last report: no new dispatches until a report without (Kairos 6)."""
    prefix_index: PrefixIndex | None = None
    """The blocks recently sent to the engine (its likely prefix cache); made at its first report."""
    resident_programs: set[str] = field(default_factory=set)
    """Programs whose last call went to this engine, until they go idle (``MonitorState.resident``)."""
    unreachable: str = ""
    """Why a balancer last failed to reach it; unhealthy until its next report ("" = none)."""


MAX_TOKENS = 100_000_000
"""No call's or workflow's token count is larger (a 1M-token prompt is 100 times smaller)."""
MAX_CALL_S = 86_400.0
"""No call's expected or predicted time is longer than a day."""
MAX_DISPATCHES_KEPT = 256
"""Dispatches a program keeps, its first ones and its last: a session that never goes idle would grow its
list with every call, and every snapshot of its calls copies it."""
MAX_DECODE_TOKENS_PER_S = 1_000_000.0


def _within(name: str, value: float, high: float) -> None:
    """``value`` in [0, high]: what the monitor's sums, ledgers and policies can be trusted with."""
    if not 0.0 <= value <= high:
        raise ValueError(f"{name} must be in [0, {high:g}], got {value!r}")


def check_admit(predicted_tokens: float, prompt_tokens: int, predicted_cost_s: float, mean_cost_s: float,
                memory_plan: MemoryPlan | None) -> None:
    _within("predicted_tokens", predicted_tokens, MAX_TOKENS)
    _within("prompt_tokens", prompt_tokens, MAX_TOKENS)
    _within("predicted_cost_s", predicted_cost_s, MAX_CALL_S)
    _within("mean_cost_s", mean_cost_s, MAX_CALL_S)
    if memory_plan is not None:
        _within("expected_s", memory_plan.expected_s, MAX_CALL_S)
        _within("decode_tokens_per_s", memory_plan.decode_tokens_per_s, MAX_DECODE_TOKENS_PER_S)


def check_status(status: EngineStatus) -> None:
    if not status.engine_id.strip() or not status.model.strip():
        raise ValueError("an engine report must name its engine_id and the model it serves")
    _within("kv_cache_usage", status.kv_cache_usage, 1.0)
    _within("pending_prefill_tokens", status.pending_prefill_tokens, MAX_TOKENS)
    p = status.profile
    if p is not None:
        for name in ("prefill_ms_per_token", "decode_base_ms", "decode_ms_per_seq", "decode_ms_per_batch_token"):
            _within(f"profile.{name}", getattr(p, name), MAX_CALL_S * 1e3)
        _within("profile.kv_capacity_tokens", p.kv_capacity_tokens, MAX_TOKENS)
        _within("profile.max_model_len", p.max_model_len, MAX_TOKENS)
        if not 1 <= p.block_size <= 4096 or not 1 <= p.max_num_seqs <= 65536:
            raise ValueError(f"profile.block_size must be in 1..4096 and max_batch_size in 1..65536, got "
                             f"{p.block_size} and {p.max_num_seqs}")


@dataclass(frozen=True)
class MonitorLimits:
    engine_stale_after_s: float = 2.0
    """An engine not heard from for this long is unhealthy (no new dispatches)."""
    engine_failed_after_s: float = 10.0
    """...and for this long, failed: forgotten once none of its calls is in flight (a call's balancer
    releases it when its stream ends, the engine's death included)."""
    lost_entries_after_s: float = 600.0
    """An engine silent this long loses its entries as well: their balancers are gone too, since a live
    one releases a call as its stream ends."""
    orphan_grace_s: float = 10.0
    """An entry older than this that its engine no longer reports is removed."""
    gateway_entry_max_s: float = 3600.0
    """A call admitted for a gateway that sends it to the model server itself (``via_gateway``, which its
    engine's reports cannot list) and not released this long after its admit is removed: the balancer
    that would release it as its response ends is gone."""
    program_ttl_s: float = 900.0
    """A program with nothing in flight is forgotten this long after it was last seen."""
    program_idle_after_s: float = 30.0
    """A program with nothing in flight stops counting in its engine's resident tokens this long after
    it was last seen (longer than an agent's tool call: the agent family's are at most 30 s)."""
    ledger_horizon_slots: int = 240
    """Slots of each engine's memory ledger a snapshot carries (240 x 0.5 s = 2 min)."""
    prefix_index_blocks: int = 31250
    """Blocks each engine's prefix index remembers when its profile does not say how many KV blocks
    it has (the Gateway API Inference Extension's default ``lruCapacityPerServer``)."""


class Resident(NamedTuple):
    """An engine's active programs (``MonitorState.resident``)."""

    tokens: int
    """Their contexts now."""
    growth_tokens: int
    """What their contexts will still grow by over their stages to come (``ContextGrowth``)."""
    programs: int
    """How many active programs those are."""


class MonitorState:
    def __init__(self, limits: MonitorLimits) -> None:
        self.limits = limits
        self.entries: dict[str, InFlightEntry] = {}
        self.programs: dict[str, ProgramRecord] = {}
        self.engines: dict[str, EngineRecord] = {}
        self.agent_stats = AgentStats()
        """Kairos's spans, latency distributions and agent priorities, learned from finished calls."""
        self.stage_costs = StageCosts()
        """Each workflow stage's mean cost (HexGen-Flow eq. 5-6), learned from the calls admitted to it."""
        self.tool_gaps = ToolGaps()
        """Each agent's tool gaps, for the retention rule (issue 35)."""
        self.context_growth = ContextGrowth()
        """Each workflow's context growth per call, for the working-set gate (issue 35)."""
        self.workflow_stages = WorkflowStages()
        """Each workflow's stage counts, learned from finished runs (Kairos 4.2): what a call that comes
        without its stage position and count is given."""
        self.version = 0
        """Bumped by every change to what an engine view shows (admit, release, report, sweep)."""
        self.on_change: list[Callable[[], None]] = []
        """Called after each such change (the monitor service wakes its engine watchers: nothing polls)."""
        self.views_cache: tuple[tuple[int, float, bool, bool], tuple[EngineView, ...]] | None = None
        """The engine views last built, with the (version, time, with in-flight calls) they were built at."""
        self.admit_seq = 0
        """Admits applied so far; the n-th admit is included in every snapshot with admit_seq >= n."""
        self.epoch = uuid.uuid4().hex
        """This state's identity: a balancer that sees a new one re-registers its running calls."""

    def _changed(self) -> None:
        self.version += 1
        for listener in self.on_change:
            listener()

    # -- requests ------------------------------------------------------------------------
    def admit(self, request_id: str, program_id: str, model: str, engine_id: str, predicted_tokens: float,
              now_s: float, workflow: str = "", deadline_unix_s: float = 0.0,
              predicted_cost_s: float = 0.0, agent: str = "", upstream_agent: str = "",
              memory_plan: MemoryPlan | None = None, stage_index: int = 0, mean_cost_s: float = 0.0,
              prefix_blocks: Sequence[int] = (), prompt_tokens: int = 0, reregister: bool = False,
              stage_count: int = 0, retain_kv_s: float | None = None, via_gateway: bool = False,
              stages_inferred: bool = False, one_call: bool = False, within_kv: bool = False,
              working_set_room: WorkingSetRoom | None = None) -> ProgramRecord:
        """Add the call's entry. ``reregister``: a running call told again after this monitor restarted
        (its balancer saw a new ``epoch``); one already known is left as it is. ``retain_kv_s``: the KV
        hold the balancer chose for it (issue 35), None when none was decided. ``stages_inferred``: its
        stages were inferred (an inferred last stage does not end its program); ``one_call``: it named no
        program (its run is not learned from). ``within_kv``: admitted only while its memory plan still
        fits the engine's ledger (the packer's test on what every balancer has admitted), and
        ``working_set_room`` only while the engine's active programs leave that room, else ``Aborted``:
        several balancers deciding on their own snapshots never over-admit an engine (``hetflow.core.room``)."""
        if not request_id:
            raise ValueError("request_id is required")
        if request_id in self.entries:
            if reregister:
                return self.programs.get(self.entries[request_id].program_id) or ProgramRecord("", model)
            raise ValueError(f"request_id {request_id!r} is already in flight")
        if engine_id not in self.engines:
            raise KeyError(f"engine {engine_id!r} has never reported to the monitor")
        check_admit(predicted_tokens, prompt_tokens, predicted_cost_s, mean_cost_s, memory_plan)
        check_stages(stage_index, stage_count)
        if retain_kv_s is not None:
            _within("retain_kv_s", retain_kv_s, MAX_CALL_S)
        profile = self.engines[engine_id].status.profile
        if profile is not None and profile.kv_capacity_tokens and prompt_tokens > profile.kv_capacity_tokens:
            raise ValueError(f"prompt_tokens {prompt_tokens} exceed engine {engine_id!r}'s KV capacity "
                             f"{profile.kv_capacity_tokens}")
        if within_kv and not reregister and memory_plan is not None and \
                not self._kv_room_for(engine_id, memory_plan, now_s):
            raise Aborted(f"engine {engine_id!r} has no KV room left for the call's plan: admits since the "
                          "balancer's snapshot took it; decide again")
        if working_set_room is not None and not reregister:
            resident = self.resident(self.engines[engine_id], now_s)
            if not working_set_room.fits(resident.tokens, resident.growth_tokens):
                raise Aborted(f"engine {engine_id!r}'s working sets ({resident.tokens} tokens of {resident.programs} "
                              f"programs) leave no room for a new program's {working_set_room.need_tokens:.0f}: "
                              "admits since the balancer's snapshot took it; decide again")
        program = self.programs.get(program_id) if program_id else None
        if program is None:
            program = ProgramRecord(program_id, model, workflow, deadline_unix_s, first_seen_s=now_s,
                                    one_call=one_call)
            if program_id:
                self.programs[program_id] = program
        if not program.in_flight and program.last_finished_agent:  # the program comes back from a tool call
            self.tool_gaps.record(program.workflow, program.last_finished_agent, now_s - program.last_seen_s)
            program.last_finished_agent = ""
        program.last_seen_s, program.ended = now_s, False
        program.stage_count = 0 if stages_inferred else stage_count or program.stage_count
        if program.learned is not None:  # it came back after it was learned from: learn it again when it ends
            self.workflow_stages.forget(program.workflow, program.learned)
            program.learned = None
        program.in_flight.add(request_id)
        if program_id:
            self._move_resident(program, engine_id)
        self._count_stage(program, stage_index, prompt_tokens)
        program.dispatch_count += 1
        if len(program.dispatches) < MAX_DISPATCHES_KEPT:
            program.dispatches.append((engine_id, prompt_tokens))
        else:   # a long session's: its last takes the place of the one before, the first ones stay
            program.dispatches[-1] = (engine_id, prompt_tokens)
        program.context_tokens = prompt_tokens
        entry = InFlightEntry(request_id, program_id, model, engine_id, predicted_tokens, now_s, predicted_cost_s,
                              agent, upstream_agent, program.critical_service_s,
                              final_stage=not stages_inferred and 0 < stage_count == stage_index,
                              prompt_tokens=prompt_tokens,
                              retain_kv_s=retain_kv_s, via_gateway=via_gateway)
        self.entries[request_id] = entry
        engine = self.engines[engine_id]
        engine.in_flight[request_id] = predicted_tokens
        engine.in_flight_tokens += predicted_tokens
        engine.in_flight_cost_s += predicted_cost_s
        engine.dispatched_since_report += 1
        engine.dispatched_prompt_tokens_since_report += prompt_tokens
        if memory_plan is not None:
            engine.ledger.add(request_id, memory_plan, now_s)
        if prefix_blocks and engine.prefix_index is not None:
            engine.prefix_index.record(prefix_blocks)
        self.stage_costs.record(workflow, stage_index, mean_cost_s)
        self.admit_seq += 1
        self._changed()
        return program

    def _kv_room_for(self, engine_id: str, plan: MemoryPlan, now_s: float) -> bool:
        """Whether the engine's ledger has room for ``plan`` now (an engine of unknown size: yes)."""
        profile = self.engines[engine_id].status.profile
        if profile is None or not profile.kv_capacity_tokens:
            return True
        return self.engines[engine_id].ledger.fits(plan, now_s, profile.kv_capacity_tokens)

    def release(self, request_id: str, now_s: float, output_tokens: int = 0, completed: bool = True,
                started_s: float = 0.0) -> bool:
        """Remove the call's entry. ``started_s``: when the engine first scheduled it, the start of its
        execution latency (Kairos 4.1); 0 when unknown, and the admit time stands in."""
        entry = self.entries.pop(request_id, None)
        if entry is None:
            return False
        self._changed()
        engine = self.engines.get(entry.engine_id)
        if engine is not None and engine.in_flight.pop(request_id, None) is not None:
            engine.in_flight_tokens -= entry.predicted_tokens
            engine.in_flight_cost_s -= entry.predicted_cost_s
            engine.ledger.remove(request_id, now_s)  # an early finish frees its remaining slots
            if not engine.in_flight:
                engine.in_flight_tokens = engine.in_flight_cost_s = 0.0  # no float drift once empty
        # a caller's start (the engine's, or a Hold's caller's) bounded to the longest call that can have
        # run until now: one in the future would give the program negative service, and the first place
        start_s = min(max(started_s, now_s - MAX_CALL_S), now_s) if started_s > 0.0 else entry.admitted_s
        span = CallSpan(entry.program_id, entry.agent, entry.upstream_agent, start_s, now_s)
        if completed and entry.program_id and entry.agent:
            self.agent_stats.record(span)
        program = self.programs.get(entry.program_id)
        if program is not None:
            if completed:
                program.run.add(span)
                program.service_s += now_s - start_s
                program.critical_service_s = max(program.critical_service_s,
                                                 entry.inherited_service_s + now_s - start_s)
            program.in_flight.discard(request_id)
            program.last_seen_s = now_s
            program.output_tokens += output_tokens
            program.context_tokens += output_tokens
            program.completed += int(completed)
            # a last stage that failed is tried again, as a rule: the program ends with a completed one
            program.ended = entry.final_stage and completed and not program.in_flight
            if program.ended:
                self._learn_run(program)
            program.last_finished_agent = entry.agent if completed and not program.ended else ""
            program.held_until_s = None if entry.retain_kv_s is None else now_s + entry.retain_kv_s
        return True

    def _count_stage(self, program: ProgramRecord, stage_index: int, prompt_tokens: int) -> None:
        """Learn the workflow's growth from a call that starts a new, higher stage, prompt to prompt
        against the highest stage before it; a call of a stage already reached (a retry, an escalation, a
        judge) only raises that stage's prompt. A call that tells no stage index is counted per dispatch,
        as before stages were told."""
        if stage_index <= 0:
            if program.dispatches:
                self.context_growth.record(program.workflow, program.dispatches[-1][1], prompt_tokens)
            return
        reached, reached_prompt_tokens = program.reached_stage
        if stage_index == reached:
            program.reached_stage = (reached, max(reached_prompt_tokens, prompt_tokens))
        elif stage_index > reached:
            if reached:
                self.context_growth.record(program.workflow, reached_prompt_tokens, prompt_tokens,
                                           calls=stage_index - reached)
            else:
                program.first_stage = (stage_index, prompt_tokens)
            program.reached_stage = (stage_index, prompt_tokens)

    def _move_resident(self, program: ProgramRecord, engine_id: str) -> None:
        if program.dispatches:
            previous = self.engines.get(program.dispatches[-1][0])
            if previous is not None:
                previous.resident_programs.discard(program.program_id)
        self.engines[engine_id].resident_programs.add(program.program_id)

    def resident(self, record: EngineRecord, now_s: float) -> Resident:
        """The active programs whose last call went to the engine: what their next calls will ask it to
        hold again. A program is active while it has a call in flight and, after its last one (its tool
        gap), for ``program_idle_after_s``; with stages it did not tell, only until the KV hold the balancer
        gave that call ends (issue 35), if one was decided; never after a call of its last stage. Idle and
        ended ones are dropped here."""
        tokens, growth, idle = 0, 0.0, []
        programs, idle_after_s, growth_to_come = self.programs, self.limits.program_idle_after_s, self._growth_to_come
        for program_id in record.resident_programs:   # every engine at every dispatch: the loop kept flat
            program = programs.get(program_id)
            if program is None:
                idle.append(program_id)
                continue
            if not program.in_flight:
                # active until idle; a program that told its stages comes back while it has stages left,
                # held or not; one that did not, for its hold when it was given one
                held_until_s, idle_at_s = program.held_until_s, program.last_seen_s + idle_after_s
                active_until_s = idle_at_s if held_until_s is None else \
                    (max(held_until_s, idle_at_s) if program.stage_count else held_until_s)
                if program.ended or now_s > active_until_s:
                    idle.append(program_id)
                    continue
            tokens += program.context_tokens
            if program.stage_count > program.reached_stage[0]:   # else no stage to come: growth 0
                growth += growth_to_come(program)
        record.resident_programs.difference_update(idle)
        return Resident(tokens, int(growth), len(record.resident_programs))

    def _growth_to_come(self, program: ProgramRecord) -> float:
        """The tokens its context will still grow by: its stages still to come (its stage count less the
        highest stage it reached) times its own growth per stage so far (its context now, outputs released
        since its last call included, over its first stage's prompt), or its workflow's before its second
        stage. Programs that tell no stage index count their dispatches as stages."""
        (first, first_prompt_tokens), (reached, _) = program.first_stage, program.reached_stage
        if not reached:
            first, first_prompt_tokens = 1, program.dispatches[0][1] if program.dispatches else 0
            reached = program.dispatch_count
        to_come = program.stage_count - reached
        if to_come <= 0:
            return 0.0
        if reached > first:
            return to_come * max(0, program.context_tokens - first_prompt_tokens) / (reached - first)
        return to_come * self.context_growth.tokens_per_call(program.workflow)

    # -- engines -------------------------------------------------------------------------
    def report(self, status: EngineStatus, now_s: float) -> int:
        """Record an engine's status; returns how many orphaned entries it cleared."""
        if not status.engine_id:
            raise ValueError("engine_id is required")
        check_status(status)
        self._changed()
        record = self.engines.get(status.engine_id)
        if record is None:
            record = self.engines[status.engine_id] = EngineRecord(status, now_s,
                                                                   prefix_index=self._prefix_index_for(status))
        elif status.incarnation != record.status.incarnation and record.status.incarnation:
            # restarted: its KV cache is empty, whatever was sent to the old one
            record.prefix_index, record.resident_programs = self._prefix_index_for(status), set()
        record.suspended = status.preemptions_total > record.status.preemptions_total
        record.unreachable = ""
        record.status, record.received_s, record.dispatched_since_report = status, now_s, 0
        record.dispatched_prompt_tokens_since_report = 0
        active = set(status.active_request_ids)
        orphans = []
        for rid in record.in_flight:
            entry = self.entries[rid]
            if rid in active:
                entry.missing_since_s = None
                continue
            if entry.missing_since_s is None:
                entry.missing_since_s = max(now_s, entry.admitted_s)
            # a gateway's call never shows: its bound runs from its admit; another's from its leaving the reports
            since_s = entry.admitted_s if entry.via_gateway else entry.missing_since_s
            if now_s - since_s > (self.limits.gateway_entry_max_s if entry.via_gateway else self.limits.orphan_grace_s):
                orphans.append(rid)
        for rid in orphans:
            self.release(rid, now_s, completed=False)
        return len(orphans)

    def _prefix_index_for(self, status: EngineStatus) -> PrefixIndex:
        """As many blocks as the engine's KV holds (the default's where its size is not known yet, 0)."""
        blocks = status.profile.num_kv_blocks if status.profile is not None else 0
        return PrefixIndex(blocks or self.limits.prefix_index_blocks)

    def engine_unreachable(self, engine_id: str, reason: str) -> bool:
        """A balancer could not reach the engine: no dispatches to it until it reports again, so every
        balancer stops sending there at once rather than after ``engine_stale_after_s``."""
        record = self.engines.get(engine_id)
        if record is None:
            return False
        record.unreachable = reason or "unreachable"
        self._changed()
        return True

    def is_healthy(self, record: EngineRecord, now_s: float) -> bool:
        return (record.status.serving and not record.unreachable
                and now_s - record.received_s <= self.limits.engine_stale_after_s)

    def sweep(self, now_s: float) -> dict[str, int]:
        """Forget failed engines that hold no call, drop the entries of engines silent past
        ``lost_entries_after_s``, and forget idle programs. A call still running is never dropped
        while its balancer may still release it."""
        self._changed()
        dropped = 0
        for engine_id, record in list(self.engines.items()):
            silent_s = now_s - record.received_s
            if silent_s > self.limits.lost_entries_after_s:
                for rid in list(record.in_flight):
                    self.release(rid, now_s, completed=False)
                    dropped += 1
            if silent_s > self.limits.engine_failed_after_s and not record.in_flight:
                del self.engines[engine_id]
        idle = []
        for pid, program in self.programs.items():
            idle_s = now_s - program.last_seen_s
            if program.in_flight:
                continue
            if idle_s > self.limits.program_idle_after_s:
                self._learn_run(program)
            if idle_s > self.limits.program_ttl_s:
                idle.append(pid)
        for pid in idle:
            del self.programs[pid]
        return {"entries_dropped": dropped, "programs_forgotten": len(idle)}

    def _learn_run(self, program: ProgramRecord) -> None:
        """Its run, ended or idle past ``program_idle_after_s``, taught to its workflow's stage counts (once
        until it comes back)."""
        if program.learned is None and not program.one_call and program.run.calls:
            program.learned = self.workflow_stages.record_run(program.workflow, program.run)

    def infer_stages(self, program_id: str, agent: str, upstream_agent: str, workflow: str,
                     now_s: float) -> StageInference:
        """The stage position and count of a call that came without them (Kairos 4.2): its position in its
        program's run so far (finished calls, and running ones as still going), its count from the
        finished runs of its workflow."""
        program = self.programs.get(program_id)
        if program is None:
            return self.workflow_stages.infer(workflow, agent, 1)
        running = [CallSpan(program_id, e.agent, e.upstream_agent, e.admitted_s, float("inf"))
                   for rid in program.in_flight if (e := self.entries.get(rid)) is not None]
        position = program.run.position_of(running, agent, upstream_agent, now_s)
        return self.workflow_stages.infer(workflow or program.workflow, agent, position)

    def refresh_anchor_distances(self) -> dict[str, float]:
        """Kairos 5.1, recomputed in the background: runs with calls in flight are left out."""
        return self.agent_stats.refresh(pid for pid, p in self.programs.items() if p.in_flight)

    def program_start_s(self, program_id: str) -> float | None:
        """The program's application-level start: when its first call arrived (Kairos 5.2); None if unseen."""
        program = self.programs.get(program_id)
        return program.first_seen_s if program else None

    def program_model(self, program_id: str) -> str:
        program = self.programs.get(program_id)
        return program.model if program else ""

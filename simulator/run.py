"""Replay a trace on a simulated cluster under a balancer policy, in virtual time.

Each program arrives at its ``arrival_s``; a call is dispatched when every stage it depends on has
finished; the decision is balancer_svc's ``Pipeline`` over a snapshot of the monitor's accounting
(monitor_svc's ``MonitorState``) and the engines; the engine is engine_svc's ``BatchScheduler``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from hetflow.core.call import LlmCall, SamplingSpec, WorkflowInfo, with_stages
from hetflow.core.cascade.verdict import ESCALATED, verdict
from hetflow.core.decision_loop import DecisionLoop, Gathered, HoldLimits
from hetflow.core.engine.profile import EngineProfile, EngineSpec
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.engine.request import EngineRequest
from hetflow.core.errors import ResourceExhausted
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import MonitorLimits, MonitorState
from hetflow.core.pipeline import Pipeline, serving
from hetflow.core.policies.contracts import FinishedCall, Prediction, WaitForCapacity
from hetflow.core.policy_config import PolicyConfig
from hetflow.core.prefix import BlockHasher, PromptPart, leading_matches
from hetflow.core.presets import Preset
from hetflow.core.snapshot import ClusterSnapshot
from hetflow.core.stats import union_length_s
from hetflow.core.trace import StageRecord, agent_calls_again, ancestors, programs, prompt_parts
from simulator.cascade import SimCascade
from simulator.clock import EventLoop
from simulator.engine import VirtualEngine
from simulator.settle import SettledMisses, StopBelowSlo
from simulator.signals import Signals, signals_for

ENGINE_REPORT_INTERVAL_S = 0.5
"""How often simulated engines report their status to the monitor, as live engines do."""
MONITOR_SWEEP_INTERVAL_S = 1.0
"""monitor_svc's default ``sweep_interval_s``."""
IDENTITIES = ("full", "session")
"""What calls tell of their place in their workflow (``Simulation``'s ``identity``)."""
PREFIX_BLOCK_TOKENS = 16
"""Tokens per block of a call's prefix hashes as the balancer matches them (vLLM's default KV block
size); an engine with other blocks gets the prompt hashed at its own size."""


@dataclass
class SimulatedCall:
    """One call of a simulated (or replayed) program: where it ran and when."""

    stage_index: int
    engine_id: str
    dispatched_s: float
    first_scheduled_s: float
    finished_s: float
    output_tokens: int
    preemptions: int
    queued_intervals_s: list[tuple[float, float]] = field(default_factory=list)
    """Each wait as (from, to): held in the balancer for KV room, in the engine's queue, and after every
    preemption."""
    first_token_s: float = 0.0
    """When the answering engine produced its first token (TTFT's end)."""
    prompt_tokens: int = 0
    prefix_hit_tokens: int = 0
    """Prompt tokens its engine found in its prefix cache, over every admission (a preempted call's
    re-admissions included); 0 where the engine does not say."""
    held_intervals_s: list[tuple[float, float]] = field(default_factory=list)
    """The part of ``queued_intervals_s`` it spent held in the balancer for KV room (the working-set
    gate), before any engine had it."""

    @property
    def queued_s(self) -> float:
        return sum(end - start for start, end in self.queued_intervals_s)


@dataclass
class ProgramResult:
    program_id: str
    workflow: str
    arrival_s: float
    model: str = ""
    """The model of the final stage, which produced the answer (one model throughout under affinity)."""
    finished_s: float = 0.0
    correct: bool | None = None
    """Whether the final answer is right per the trace's labels; None when the trace has none."""
    isolated_s: float = 0.0
    """The program's exclusive latency: alone on the cluster, its critical path of isolated calls averaged
    over the engines (``reference_latency_s``), the same whatever the policy. ``latency_s / isolated_s``
    is the SLO scale it meets (HexGen-Flow 5.1: "execution time in an exclusive environment")."""
    calls: dict[int, SimulatedCall] = field(default_factory=dict)
    deadline_s: float = 0.0
    """Arrival + SLO scale x reference latency; 0 when the program's tenant has no SLO."""
    tenant: str = "default"
    solve_probability: float | None = None
    """The probability the answer's model solves the program's item (the workload's item-response model,
    ``StageRecord.solve_probability``): ``correct``'s expectation, free of the outcome's sampling noise;
    None when the trace has none."""

    @property
    def latency_s(self) -> float:
        return self.finished_s - self.arrival_s

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.calls.values())

    @property
    def queued_s(self) -> float:
        """Time during which at least one of the program's calls was waiting: the union of their waits,
        so that parallel calls waiting together count once and the share never passes 100%."""
        return union_length_s(interval for c in self.calls.values() for interval in c.queued_intervals_s)


class Simulation:
    @classmethod
    def from_preset(cls, engines: Sequence[EngineSpec], preset: Preset, signals: Signals,
                    **options: Any) -> Simulation:
        """The simulator running ``preset`` as its name says: its policy, its engines' queue discipline and
        the signals it reads (``signals_for``); ``options`` as the constructor takes them."""
        return cls(engines, preset.policy, signals_for(preset, signals),
                   QueueConfig(discipline=preset.queue_discipline), **options)

    def __init__(self, engines: Sequence[EngineSpec], policy: PolicyConfig, signals: Signals,
                 queue: QueueConfig | None = None, slo_scales: Mapping[str, float] | None = None,
                 agent_priority_interval_s: float = 10.0, cascade: SimCascade | None = None,
                 reference_engines: Sequence[EngineSpec] | None = None, decode_runs: bool = True,
                 identity: str = "full", pins_retained_kv: bool = False) -> None:
        """``decode_runs``: engines take runs of pure decode iterations as one event
        (``simulator.decode_jump``), the default; False steps every iteration, the reference mode they
        are tested against (tests/simulator/test_decode_jump.py, the agent sweep's probes in
        docs/simulator-speed.md). ``identity``: what each call tells of its place: ``full`` (the trace's
        program, agent, upstream agent and stages, as hetflow's own fields say them) or ``session`` (its
        program and agent only, as a framework's session header and instructions do: the monitor infers
        its stages, Kairos 4.2; the predictor must then be ``input-length``, which reads no stage).
        ``pins_retained_kv``: the engines pin a retained program's KV (hetflow's own engine), or, as vLLM
        engines, only keep it free of admissions (``hetflow.core.engine.scheduler``)."""
        if identity not in IDENTITIES:
            raise ValueError(f"identity must be one of {IDENTITIES}, got {identity!r}")
        if identity == "session" and signals.prediction != "input-length":
            raise ValueError("identity 'session' needs the input-length predictor: the oracle's and the learned "
                             "predictions are keyed by the trace's stages, which a session does not tell")
        self.identity = identity
        self.loop = EventLoop()
        self.cascade = cascade
        """Serve every call through a threshold cascade (Cascadia 3.3), as balancer_svc's cascade does."""
        self.reference_engines = list(reference_engines) if reference_engines else None
        """The engines a program's exclusive latency is measured on (default: the cluster's); systems on
        different clusters compare SLO scales against the same base."""
        self._cascade_stage: dict[str, int] = {}
        """Per call (program/stage): the cascade stage it is at, 1-based."""
        self._requests: dict[str, tuple[str, int, str]] = {}
        """Engine request id -> (program, stage, "answer" or "judge")."""
        self.cascade_stages: list[tuple[str, str, float | None, str]] = []
        """Each graded or last cascade stage: (call, model, grade, outcome)."""
        self.slo_scales = dict(slo_scales or {})
        """Tenant -> SLO scale ("*" for any other): a program's deadline is its arrival plus the scale
        times its reference latency (HexGen-Flow 5.1); tenants without a scale have no deadline."""
        self._deadlines: dict[str, float] = {}
        self.agent_priority_interval_s = agent_priority_interval_s
        """How often the monitor's Kairos agent priorities are recomputed, in virtual time."""
        self.pipeline = Pipeline(policy, tells_completions=True)
        self.decisions = DecisionLoop(self.pipeline, HoldLimits())
        """The balancer's decision loop (``hetflow.core.decision_loop``), holding calls for KV room (Kairos 6)
        without its live limits: a held call waits for room however long it takes, its hold counted as
        queueing, and is never dispatched twice."""
        self.signals = signals
        self.monitor = MonitorState(MonitorLimits(engine_stale_after_s=float("inf"), engine_failed_after_s=float("inf"),
                                                  orphan_grace_s=float("inf"), program_ttl_s=float("inf")))
        self.engines = {e.engine_id: VirtualEngine(e.engine_id, e.model, e.profile, queue or QueueConfig(), self.loop,
                                                   self._finished, decode_runs, pins_retained_kv)
                        for e in engines}
        self._report_engines()
        self._programs: dict[str, list[StageRecord]] = {}
        self.results: dict[str, ProgramResult] = {}
        self.rejected: list[tuple[str, str]] = []
        self._packs = self.pipeline.engine_picker.plans_memory
        self.held = 0
        """Decisions deferred because no engine had KV room (Kairos 6)."""
        self._held_records: dict[str, tuple[str, StageRecord]] = {}
        self._prompts: dict[str, tuple[int, BlockHasher, list[PromptPart]]] = {}
        """Prompt length and blocks of each call being decided (kept while it is held)."""
        self._in_tool: set[str] = set()
        """Calls whose dependencies finished and whose program is still in a tool (``tool_s``)."""
        self._round_pending = False
        self.on_program_finished: list[Callable[[ProgramResult], None]] = []
        """Observers of finished programs (the alpha tuner, simulator.tuning)."""
        self.decision_ms: list[float] = []
        """Wall time of each balancer decision (Pipeline.decide): the scheduler's overhead per call."""
        self.router_asked = 0
        """Decisions whose model stage read the router's confidences."""
        self.router_changed = 0
        """Of those, decisions whose model differs from the one the fixed priors would have given."""
        self._settled: SettledMisses | None = None

    def run(self, records: Sequence[StageRecord], deadlines_s: Mapping[str, float] | None = None,
            isolated_s: Mapping[str, float] | None = None, stop_below_slo: StopBelowSlo | None = None
            ) -> list[ProgramResult]:
        """Play the trace to the end, or with ``stop_below_slo`` until the SLO verdict is settled as a failure
        (``simulator.settle``; ``self.settled`` then says when and why). ``deadlines_s`` (program -> deadline
        in trace time) overrides the tenants' SLO scales: the live tuner replays the deadlines its programs
        carried. ``isolated_s``:
        each program's exclusive latency on these engines, computed once for a trace replayed at many
        rates (``reference_latencies`` on ``reference_engines`` when set; it does not depend on arrivals)."""
        self._programs = programs(records)
        if isolated_s is None:
            specs = self.reference_engines or [EngineSpec(eid, e.model, e.profile) for eid, e in self.engines.items()]
            isolated_s = reference_latencies(self._programs.values(), specs)
        for pid, program in self._programs.items():
            self.results[pid] = ProgramResult(pid, program[0].workflow, program[0].arrival_s, tenant=program[0].tenant)
            result = self.results[pid]
            result.isolated_s = isolated_s[pid]
            scale = self.slo_scales.get(program[0].tenant, self.slo_scales.get("*"))
            if deadlines_s is not None and deadlines_s.get(pid):
                self._deadlines[pid] = result.deadline_s = deadlines_s[pid]
            elif scale:
                self._deadlines[pid] = result.deadline_s = program[0].arrival_s + scale * result.isolated_s
            self.loop.at(program[0].arrival_s, self._start, pid)
        if self.pipeline.priority_rule.needs_agent_stats or self._packs:
            self.loop.every(self.agent_priority_interval_s, self.monitor.refresh_anchor_distances)
        self.loop.every(ENGINE_REPORT_INTERVAL_S, self._report_engines)
        if self.identity == "session":  # runs of unknown length are learned when idle, as the monitor's sweep does
            self.loop.every(MONITOR_SWEEP_INTERVAL_S, lambda: self.monitor.sweep(self.loop.now))
        if stop_below_slo is not None:
            settled = self._settled = SettledMisses(stop_below_slo, {p: r.arrival_s for p, r in self.results.items()},
                                                    {p: r.isolated_s for p, r in self.results.items()}, self.loop)
            self.loop.every(stop_below_slo.check_interval_s,
                            lambda: settled.check(lambda program_id: self.results[program_id].finished_s))
        self.loop.run()
        return [r for r in self.results.values() if r.finished_s]

    @property
    def settled(self) -> dict[str, float | int] | None:
        """Where a run stopped by ``stop_below_slo`` stopped, and what it knew then; None for a whole run."""
        return self._settled.summary() if self._settled is not None else None

    def _count_router_change(self, call: LlmCall, snapshot: ClusterSnapshot, candidates: list[str],
                             predictions: Mapping[str, tuple[Prediction, str]], model: str) -> None:
        """Whether the router changed this decision: the model stage again on the fixed priors."""
        priors = {m: float(self.signals.priors.get(m, 0.5)) for m in candidates}
        self.router_asked += 1
        prior_model = self.pipeline.model_picker.pick(call, serving(snapshot, candidates), priors,
                                                      {m: p for m, (p, _) in predictions.items()},
                                                      self.pipeline.store).chosen
        self.router_changed += prior_model != model

    @property
    def router_asked_share(self) -> float | None:
        """Share of decisions whose model stage read the router's confidences: the decisions that need
        the router's encoder, live (issue 63: its own CPU budget); None before any decision."""
        return self.router_asked / len(self.decision_ms) if self.decision_ms else None

    @property
    def router_changed_share(self) -> float | None:
        """Share of router-read decisions whose model the router changed against the fixed priors
        (issue 12: does the router earn its place); None when no decision read it."""
        return self.router_changed / self.router_asked if self.router_asked else None

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens found in the engines' prefix caches over those looked up, at every admission
        (vLLM's ``prefix_cache_hits / prefix_cache_queries``); 0 before any admission."""
        queried = sum(e.scheduler.prefix_query_tokens for e in self.engines.values())
        return sum(e.scheduler.prefix_hit_tokens for e in self.engines.values()) / queried if queried else 0.0

    def _report_engines(self) -> None:
        """The engines' periodic status reports, as live engines send them: the snapshot's queue and KV
        figures, and the preemption counts the monitor suspends engines by (Kairos 6), are as of the
        last report."""
        for engine in self.engines.values():
            self.monitor.report(engine.status(), self.loop.now)

    def _release_round(self) -> None:
        """Kairos 6's next scheduling round: every held call, in the hold queue's order, is decided
        again; each that fits is dispatched, the others stay for the round after."""
        self._round_pending = False
        for held in self.decisions.round():
            program_id, record = self._held_records[held.request_id]
            self._dispatch(program_id, record)

    def _leave_hold(self, request_id: str) -> float | None:
        """The call left the hold queue (dispatched or rejected); returns when it was first held, None
        if it never was."""
        self._held_records.pop(request_id, None)
        return self.decisions.leave(request_id)

    def _start(self, program_id: str) -> None:
        for record in self._programs[program_id]:
            if not record.depends_on:
                self._dispatch(program_id, record)

    def _prompt(self, program_id: str, record: StageRecord) -> tuple[int, BlockHasher | None, list[PromptPart]]:
        """The call's prompt length, its blocks and its parts, its ancestors' outputs as the models
        that served them wrote them (fixed once they finished, so a held call keeps them); (0, None, [])
        for a record without prompt parts (its length depends on the model)."""
        key = f"{program_id}/{record.stage_index}"
        if key not in self._prompts:
            if not record.prompt_parts:
                return 0, None, []
            producers = {s: self.engines[c.engine_id].model for s, c in self.results[program_id].calls.items()}
            parts = prompt_parts(self._programs[program_id], record, producers)
            self._prompts[key] = (sum(p.tokens for p in parts),
                                         BlockHasher(PREFIX_BLOCK_TOKENS).extend(parts), parts)
        return self._prompts[key]

    def _dispatch(self, program_id: str, record: StageRecord) -> None:
        program, now = self._programs[program_id], self.loop.now
        key = f"{program_id}/{record.stage_index}"
        held_since_s = self.decisions.held.held_since_s(key)
        prompt_tokens, hasher, parts = self._prompt(program_id, record)
        blocks = tuple(hasher.hashes) if hasher else ()
        cascade_stage = self._cascade_stage.setdefault(key, 1) if self.cascade else 0
        full = self.identity == "full"
        call = LlmCall(request_id=f"{key}/c{cascade_stage}" if self.cascade else key, prompt=record.user_prompt,
                       messages=(), sampling=SamplingSpec(max_tokens=max(record.output_tokens.values())),
                       workflow=WorkflowInfo(program_id, record.workflow, record.agent,
                                             record.stage_index if full else 0, record.stage_count if full else 0,
                                             record.upstream_agent if full else "", record.tenant,
                                             self._deadlines.get(program_id, 0.0)),
                       received_unix_s=now if held_since_s is None else held_since_s,
                       known_input_tokens=prompt_tokens or max(record.input_tokens.values()),
                       prefix_blocks=blocks,
                       model_pin=self.cascade.config.models[cascade_stage - 1] if self.cascade else "")
        wf = call.workflow
        snapshot = cluster_snapshot(self.monitor, now, program_id, wf.agent, wf.workflow, wf.stage_index,
                                    wf.stage_count, blocks if self.pipeline.engine_picker.reads_prefix else (),
                                    self.pipeline.engine_picker.reads_in_flight_calls, wf.upstream_agent,
                                    resident=self.pipeline.engine_picker.reads_resident)
        if snapshot.inferred_stages is not None and snapshot.inferred_stages.stage_index:
            call = with_stages(call, snapshot.inferred_stages.stage_index, snapshot.inferred_stages.stage_count)
        candidates, router_asked = self.decisions.candidates(call, snapshot)
        confidence = self.signals.confidence_for(record, candidates) if router_asked else {}
        target = self.pipeline.priority_rule.prediction_target
        predictions = {m: (self.signals.prediction_for(program, record, m, target), "") for m in candidates}
        started = time.perf_counter()
        try:
            outcome = self.decisions.decide(Gathered(call, snapshot, candidates, router_asked, confidence,
                                                     predictions), held_as=key)
            if router_asked:
                self._count_router_change(call, snapshot, candidates, predictions, outcome.model)
        except ResourceExhausted as exc:  # no engine could ever hold it: the live balancer's RESOURCE_EXHAUSTED
            self.rejected.append((call.request_id, str(exc)))
            self._leave_hold(key)
            return
        except WaitForCapacity as wait:  # held in the balancer's hold queue until its turn and room (Kairos 6)
            self.held += 1
            self.decisions.hold(call, wait, now, held_as=key)
            self._held_records[key] = (program_id, record)
            if not self._round_pending:
                self._round_pending = True
                self.loop.at(now + wait.retry_after_s, self._release_round)
            return
        finally:
            self.decision_ms.append((time.perf_counter() - started) * 1e3)
        engine_block = self.engines[outcome.engine_id].profile.block_size
        req = EngineRequest(request_id=call.request_id,
                            prompt_tokens=prompt_tokens or record.input_tokens[outcome.model],
                            max_tokens=record.output_tokens[outcome.model], priority=outcome.priority.key,
                            priority_tiebreak=outcome.priority.tiebreak, arrival_s=now, program_id=program_id,
                            target_output_tokens=record.output_tokens[outcome.model],
                            block_hashes=_sequence_blocks(_at_block_size(hasher, parts, engine_block),
                                                          record, outcome.model),
                            retain_kv_s=outcome.retain_kv_s or 0.0,
                            reserve_output_tokens=outcome.reserve_output_tokens)
        try:
            self.engines[outcome.engine_id].submit(req)
        except (ValueError, MemoryError) as exc:  # the live engine answers INVALID_ARGUMENT / RESOURCE_EXHAUSTED
            self.rejected.append((call.request_id, str(exc)))
            self._leave_hold(key)
            return
        self._requests[call.request_id] = (program_id, record.stage_index, "answer")
        self._prompts.pop(key, None)
        self.monitor.admit(call.request_id, program_id, outcome.model, outcome.engine_id,
                           outcome.prediction.median_tokens, now, workflow=record.workflow,
                           predicted_cost_s=outcome.predicted_cost_s, agent=wf.agent,
                           upstream_agent=wf.upstream_agent, memory_plan=outcome.memory_plan,
                           stage_index=call.workflow.stage_index, stage_count=call.workflow.stage_count,
                           stages_inferred=call.workflow.stages_inferred,
                           mean_cost_s=outcome.mean_cost_s, prefix_blocks=blocks, prompt_tokens=req.prompt_tokens,
                           retain_kv_s=outcome.retain_kv_s)
        result = self.results[program_id]
        if record.stage_index == record.stage_count:  # the final answer's model decides correctness
            result.model = outcome.model
        held_since = self._leave_hold(key)  # a call held for room was dispatched when first held
        if held_since is None:
            held_since = now
        held = [(held_since, now)] if now > held_since else []
        escalated = result.calls.get(record.stage_index)
        if escalated is not None:  # a cascade's next stage: the call's timeline goes on
            escalated.engine_id = outcome.engine_id
            escalated.queued_intervals_s += held
            escalated.held_intervals_s += held
            return
        result.calls[record.stage_index] = SimulatedCall(record.stage_index, outcome.engine_id, held_since, 0.0, 0.0,
                                                         0, 0, queued_intervals_s=list(held),
                                                         held_intervals_s=list(held))

    def _after_tool(self, program_id: str, record: StageRecord) -> None:
        self._in_tool.discard(f"{program_id}/{record.stage_index}")
        self._dispatch(program_id, record)

    def _finished(self, req: EngineRequest) -> None:
        now = self.loop.now
        program_id, stage, kind = self._requests.pop(req.request_id)
        self.monitor.release(req.request_id, now, req.output_tokens, started_s=req.first_scheduled_s or 0.0)
        call = self.results[program_id].calls[stage]
        call.queued_intervals_s += req.queued_intervals_s  # after any time held in the balancer for KV room
        call.preemptions += req.preemptions
        record = self._record(program_id, stage)
        if self.pipeline.engine_picker.follows_completions and kind == "answer":
            self._tell_finished(record, call.engine_id, req)
        if kind == "judge" and self.cascade is not None:
            model = self._answering_model(record)
            self._graded(program_id, record, model, self.cascade.judge_grade(record, model))
            return
        call.first_scheduled_s = call.first_scheduled_s or req.first_scheduled_s or now
        call.first_token_s = req.first_token_s or now
        call.output_tokens = req.output_tokens
        call.prompt_tokens, call.prefix_hit_tokens = req.prompt_tokens, req.prefix_hit_tokens
        if self.cascade is None or self._cascade_stage[f"{program_id}/{stage}"] == len(self.cascade.config.models):
            self._graded(program_id, record, self._answering_model(record), None)
        elif self.cascade.config.judge.kind == "learned":
            self._graded(program_id, record, self._answering_model(record),
                         self.cascade.learned_grade(record, self._answering_model(record), req.output_tokens))
        elif self.cascade.outside_judge_s is not None:
            model = self._answering_model(record)
            self.loop.at(now + self.cascade.outside_judge_s, self._graded, program_id, record, model,
                         self.cascade.judge_grade(record, model))
        else:
            self._dispatch_judge(program_id, record, req.prompt_tokens + req.output_tokens)

    def _tell_finished(self, record: StageRecord, engine_id: str, req: EngineRequest) -> None:
        """What a router in front of the engines sees of a finished call: its usage, and whether its agent
        comes back later in the workflow (the ``expected_resume`` the live harness sends vLLM's router)."""
        resumes = agent_calls_again(self._programs[record.program_id], record)
        workflow = WorkflowInfo(record.program_id, record.workflow, record.agent, record.stage_index,
                                record.stage_count, record.upstream_agent, record.tenant)
        decode_s = self.loop.now - req.first_token_s if req.first_token_s is not None else None
        self.pipeline.finished(FinishedCall(workflow, engine_id, self.loop.now, req.prompt_tokens,
                                            req.output_tokens, req.prefix_hit_tokens, resumes, decode_s))

    def _record(self, program_id: str, stage: int) -> StageRecord:
        return next(r for r in self._programs[program_id] if r.stage_index == stage)

    def _answering_model(self, record: StageRecord) -> str:
        call = self.results[record.program_id].calls[record.stage_index]
        return self.engines[call.engine_id].model

    def _dispatch_judge(self, program_id: str, record: StageRecord, question_answer_tokens: int) -> None:
        """The LLM judge's call (Cascadia footnote 4: 1-2 output tokens) on an engine of the judge's model,
        decided by the same pipeline; a judge that cannot be placed grades nothing (the call is forwarded)."""
        assert self.cascade is not None
        now, spec = self.loop.now, self.cascade.config.judge
        key = f"{program_id}/{record.stage_index}"
        request_id = f"{key}/j{self._cascade_stage[key]}"
        prompt_tokens = question_answer_tokens + self.cascade.judge_prompt_tokens
        call = LlmCall(request_id=request_id, prompt="", messages=(), sampling=SamplingSpec(max_tokens=spec.max_tokens),
                       workflow=WorkflowInfo(program_id, record.workflow, "cascade-judge", record.stage_index,
                                             record.stage_count, record.agent, record.tenant,
                                             self._deadlines.get(program_id, 0.0)),
                       received_unix_s=now, known_input_tokens=prompt_tokens, model_pin=spec.model)
        snapshot = cluster_snapshot(self.monitor, now, program_id, "cascade-judge", record.workflow,
                                    record.stage_index, record.stage_count, ())
        predictions = {spec.model: (Prediction(float(spec.max_tokens)), "")}
        try:
            outcome = self.pipeline.decide(call, snapshot, self.pipeline.candidate_models(call, snapshot), {},
                                           predictions, False)
        except WaitForCapacity as wait:
            self.loop.at(now + wait.retry_after_s, self._dispatch_judge, program_id, record, question_answer_tokens)
            return
        except ResourceExhausted:
            self._graded(program_id, record, self._answering_model(record), None)
            return
        req = EngineRequest(request_id=request_id, prompt_tokens=prompt_tokens, max_tokens=spec.max_tokens,
                            priority=outcome.priority.key, priority_tiebreak=outcome.priority.tiebreak, arrival_s=now,
                            program_id=program_id, target_output_tokens=spec.max_tokens)
        try:
            self.engines[outcome.engine_id].submit(req)
        except (ValueError, MemoryError):  # the question and the answer overflow the judge's context
            self._graded(program_id, record, self._answering_model(record), None)
            return
        self._requests[request_id] = (program_id, record.stage_index, "judge")
        self.monitor.admit(request_id, program_id, outcome.model, outcome.engine_id, float(spec.max_tokens), now,
                           workflow=record.workflow, predicted_cost_s=outcome.predicted_cost_s,
                           agent="cascade-judge", upstream_agent=record.agent, memory_plan=outcome.memory_plan,
                           stage_index=record.stage_index, stage_count=record.stage_count,
                           mean_cost_s=outcome.mean_cost_s, prompt_tokens=prompt_tokens)

    def _graded(self, program_id: str, record: StageRecord, model: str, grade: float | None) -> None:
        """The call's answer is final (no cascade, the last model type, or a grade at or above h_i) or is
        forwarded to the next model type (Cascadia 3.3, figure 4; ``hetflow.core.cascade.verdict``)."""
        key = f"{program_id}/{record.stage_index}"
        if self.cascade is not None:
            stage = self._cascade_stage[key]
            decided = verdict(stage, grade, self.cascade.config.thresholds, "judge not placed")
            self.cascade_stages.append((key, model, grade, decided.outcome))
            if decided.outcome == ESCALATED:
                self._cascade_stage[key] = stage + 1
                self._dispatch(program_id, record)
                return
        self._call_done(program_id, record.stage_index)

    def _call_done(self, program_id: str, stage: int) -> None:
        now = self.loop.now
        result = self.results[program_id]
        result.calls[stage].finished_s = now
        program = self._programs[program_id]
        done = {s for s, c in result.calls.items() if c.finished_s}
        for record in program:
            key = f"{program_id}/{record.stage_index}"
            if (record.stage_index not in result.calls and set(record.depends_on) <= done
                    and key not in self.decisions.held and key not in self._in_tool):
                if record.tool_s > 0:  # the agent's tool runs first, with nothing of the program in flight
                    self._in_tool.add(key)
                    self.loop.at(now + record.tool_s, self._after_tool, program_id, record)
                else:
                    self._dispatch(program_id, record)
        if len(done) == len(program):
            result.finished_s = now
            result.correct = program[0].correct.get(result.model)
            result.solve_probability = program[0].solve_probability.get(result.model)
            for observer in self.on_program_finished:
                observer(result)


def _at_block_size(hasher: BlockHasher | None, parts: list[PromptPart], block_size: int) -> BlockHasher | None:
    """The prompt's blocks at an engine's KV block size (the balancer's are 16 tokens)."""
    if hasher is None or hasher.block_size == block_size:
        return hasher
    return BlockHasher(block_size).extend(parts)


def _sequence_blocks(prompt: BlockHasher | None, record: StageRecord, model: str) -> tuple[int, ...]:
    """The blocks of the call's whole sequence, prompt then output, as vLLM caches them while it decodes:
    a later call whose prompt holds this output reuses them."""
    if prompt is None:
        return ()
    own = PromptPart(f"{record.program_id}/{record.stage_index}/{model}", record.output_tokens[model])
    return tuple(prompt.copy().extend([own]).hashes)


def reference_latencies(programs_: Iterable[list[StageRecord]], engines: Sequence[EngineSpec]) -> dict[str, float]:
    """``reference_latency_s`` of every program, by program id."""
    return {program[0].program_id: reference_latency_s(program, engines) for program in programs_}


def reference_latency_s(program: list[StageRecord], engines: Sequence[EngineSpec]) -> float:
    """The program alone on the cluster, averaged over the engines (as HexGen-Flow eq. 6 averages a
    call's cost): per engine, the critical path of its model's isolated call latencies, each after its
    tool time, each prompt's prefix computed by its ancestors taken from the prefix cache, as it would
    be alone. The base an SLO scale multiplies to set a deadline at arrival. Engines of one model and
    profile share one path."""
    alone: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
    paths: dict[tuple[str, EngineProfile], float] = {}
    for engine in engines:
        kind = (engine.model, engine.profile)
        if kind in paths:
            continue
        blocks = (engine.model, engine.profile.block_size)
        if blocks not in alone:
            alone[blocks] = prompts_alone(program, engine.model, engine.profile.block_size)
        done_at: dict[int, float] = {}
        for record in program:
            start = max((done_at[d] for d in record.depends_on), default=0.0) + record.tool_s
            prompt, cached = alone[blocks][record.stage_index]
            done_at[record.stage_index] = start + engine.profile.isolated_request_s(
                prompt, record.output_tokens[engine.model], cached)
        paths[kind] = max(done_at.values())
    return sum(paths[(e.model, e.profile)] for e in engines) / len(engines)


def prompts_alone(program: list[StageRecord], model: str, block_size: int) -> dict[int, tuple[int, int]]:
    """Per stage, its prompt length and the tokens of it its ancestors left in the cache, every call
    served by ``model`` on an engine of ``block_size``-token KV blocks."""
    producers = {r.stage_index: model for r in program}
    closure = ancestors([r.depends_on for r in program])
    computed: dict[int, set[int]] = {}
    out = {}
    for record in program:
        if not record.prompt_parts:
            computed[record.stage_index] = set()
            out[record.stage_index] = (record.input_tokens[model], 0)
            continue
        parts = prompt_parts(program, record, producers)
        hasher = BlockHasher(block_size).extend(parts)
        prompt = sum(p.tokens for p in parts)
        known = set().union(*(computed[a] for a in closure[record.stage_index - 1]))
        out[record.stage_index] = (prompt, min(leading_matches(hasher.hashes, known) * block_size, prompt - 1))
        computed[record.stage_index] = set(_sequence_blocks(hasher, record, model))
    return out

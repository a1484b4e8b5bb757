"""Engine choice: vLLM's router's Program scheduling (vllm-project/router, ``vllm-router`` 0.1.17,
``docs/program_scheduling.md``; a rival), for sweeps at scale beside the live runs of the binary itself.

A program is one agent of a workflow (``<program_id>:<agent>``, the identity the live harness sends the
router). Its first request binds it to a home rank by consistent hashing and waits there until the rank
admits it: vLLM has no waiting request, fewer than 64 programs are active, and its private tokens (its
context plus a 100-token decode buffer) fit the rank's KV capacity with the growth reserve the active
programs need. Once active, its requests go to its rank past every gate; after each response it keeps its
KV for an acting TTL fitted to the rank's tool gaps (Progress-TTL, after Continuum), then pauses and frees
it; a paused program may resume on another rank with more headroom (``global_queue: true``, the documented
recommendation). The state is the router's own (``program_ledger.py``, in the ``PolicyStore`` under this
plugin's name), learned from the calls it places and the responses it sees (``finished``), with the usage
vLLM reports per rank scraped once a metrics interval.

Differences from the binary, each named in docs/rivals.md: waiting programs are decided again every
``recheck_s`` in the balancer's hold-queue order (the router re-decides on every arrival, completion and
tick, most recently finished first); the segment-round yield, the shared-prefix credit, the queue timeout
and the release of programs paused for 30 minutes are left out; the home rank comes from a stand-in hash
(the router hashes the whole first request), or with ``session_header`` from the workflow, as the router
hashes a session header (with its own hash: another draw of the ranks' split).
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.engine.router_cost_models import calibrate
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import (
    Choice,
    EnginePicker,
    FinishedCall,
    PolicyStore,
    Prediction,
    WaitForCapacity,
    healthy_or_unavailable,
)
from hetflow.core.policies.program_ledger import ProgramLedger, SchedulingConfig
from hetflow.core.snapshot import ClusterSnapshot

BINDING_STRATEGIES = ("consistent_hash", "program_round_robin", "least_program_count", "reasoning_token_balance")


def program_key(program_id: str, agent: str) -> str:
    """vLLM's program: one agent of hetflow's workflow (docs/vllm-sim.md, the identity mapping)."""
    return f"{program_id}:{agent}"


def ledgers_of(store: PolicyStore) -> dict[str, ProgramLedger]:
    """The router's state per model pool ("" for one pool of every engine), kept under this plugin's name."""
    ledgers: dict[str, ProgramLedger] = store.state_of("program-admission", dict)
    return ledgers


@plugin("engine-picker", "program-admission")
class ProgramAdmission(EnginePicker):
    follows_completions = True

    def __init__(self, global_queue: bool = True, max_active_programs: int = 64, waiting_threshold: int = 1,
                 decode_buffer_tokens: int = 100, max_acting_ttl_s: float = 10.0, stats_window_size: int = 100,
                 force_resume_timeout_s: float = 300.0, metrics_interval_s: float = 1.0,
                 cross_rank_headroom_ratio: float = 1.2, recheck_s: float = 0.2, session_header: bool = False,
                 binding_strategy: str = "consistent_hash", servers_report_cached_tokens: bool = False,
                 force_resume_floor_s: float = 30.0) -> None:
        """``session_header``: each request carries its workflow as a session header (``x-session-id``, as
        agent frameworks send theirs), which the router hashes for a new program's home rank, so a workflow's
        agents share one (the live harness sends each program's id so); without it the router hashes the whole
        first request.
        ``binding_strategy``: how a new program is bound to its home rank (``SchedulingConfig``); the router's
        ``cache_aware`` binding is left out (it needs the router's prefix tree of committed dispatches).
        ``servers_report_cached_tokens``: the engines' responses carry ``usage.prompt_tokens_details.
        cached_tokens`` (vLLM's ``--enable-prompt-tokens-details``, off by default, and off on the live pool's
        servers). The router reads a call's cached tokens there alone (``routers/http/program_adapter.rs``);
        without them it takes its rank's mean of those it saw (``scheduler_lifecycle.rs`` ``complete``), 0
        when it saw none, so no call after a program's first counts as cache-continuous: its rounds since
        activation stay low and the growth reserve with them. ``force_resume_floor_s``: the floor of a paused
        program's force-resume timeout, 30 s of the router's clock (the twin of a pool run at time scale k:
        30 / k)."""
        if binding_strategy not in BINDING_STRATEGIES:
            raise ValueError(f"program-admission's binding_strategy is one of {BINDING_STRATEGIES}, "
                             f"got {binding_strategy!r}")
        if min(max_active_programs, stats_window_size) < 1 or min(metrics_interval_s, recheck_s) <= 0:
            raise ValueError("program-admission needs max_active_programs and stats_window_size >= 1 and "
                             "metrics_interval_s, recheck_s > 0")
        if cross_rank_headroom_ratio < 1 or min(force_resume_timeout_s, force_resume_floor_s) <= 0 or \
                max_acting_ttl_s < 0:
            raise ValueError("program-admission needs cross_rank_headroom_ratio >= 1 (as the router), "
                             "force_resume_timeout_s, force_resume_floor_s > 0 and max_acting_ttl_s >= 0")
        self.config = SchedulingConfig(bool(global_queue), int(max_active_programs), int(waiting_threshold),
                                       int(decode_buffer_tokens), max_acting_ttl_s, int(stats_window_size),
                                       force_resume_timeout_s, metrics_interval_s, cross_rank_headroom_ratio,
                                       binding_strategy, force_resume_floor_s=force_resume_floor_s)
        self.recheck_s = recheck_s
        self.session_header = bool(session_header)
        self.servers_report_cached_tokens = bool(servers_report_cached_tokens)

    def _ledger(self, store: PolicyStore, snapshot: ClusterSnapshot, model: str) -> ProgramLedger:
        """The router's state over ``model``'s pool ("" for one pool of every engine), made at the pool's
        first decision with the cost models fitted to its profile (the router takes one for all ranks). With
        one pool per model (the router's ``--enable-igw`` worker registry) each pool has its own scheduler."""
        ledgers = ledgers_of(store)
        if model not in ledgers:
            profile = next((e.profile for e in snapshot.engines if e.profile is not None
                            and (not model or e.model == model)), None)
            if profile is None:
                raise ValueError("program-admission needs the engines' profiles for the router's cost models")
            calibration = calibrate(profile)
            ledgers[model] = ProgramLedger(self.config, calibration.cache_miss_impact_s,
                                           calibration.decode_tokens_per_s)
        return ledgers[model]

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        now_s = snapshot.taken_unix_s
        engines = {e.engine_id: e for e in healthy_or_unavailable(snapshot, model)}
        ledger = self._ledger(store, snapshot, model)
        ledger.tick(engines, {k: e.kv_capacity_tokens for k, e in engines.items()}, now_s)
        program = ledger.arrive(program_key(call.workflow.program_id, call.workflow.agent), call.request_id,
                                call.input_tokens, now_s, call.workflow.program_id if self.session_header else "")
        params = {"context_tokens": float(program.context_tokens)}
        if program.active and program.last_engine in engines:
            ledger.dispatch_active(program)
            return Choice(program.last_engine, "vllm-router:active-program", params=params)
        if program.last_engine not in engines:
            raise WaitForCapacity(f"program {program.key} waits for rank {program.last_engine}: not healthy",
                                  self.recheck_s)
        admission = ledger.admit(program, now_s)
        if admission is None:  # the receipt names the gate that refused (docs/results.md counts them)
            raise WaitForCapacity(f"program {program.key} waits for rank {ledger.refusal}", self.recheck_s)
        return Choice(admission.engine_id, f"vllm-router:{admission.rule}",
                      loads={admission.engine_id: admission.used_tokens},
                      params={**params, "required_tokens": admission.required_tokens,
                              "reserve_tokens": admission.reserve_tokens})

    def finished(self, call: FinishedCall, store: PolicyStore) -> None:
        key = program_key(call.workflow.program_id, call.workflow.agent)
        for ledger in ledgers_of(store).values():   # the pool that placed the program
            if key in ledger.programs:
                cached_tokens = call.cached_prompt_tokens if self.servers_report_cached_tokens else 0
                ledger.finish(key, call.engine_id, call.prompt_tokens, call.output_tokens, cached_tokens,
                              call.agent_resumes, call.finished_s, call.decode_s)

"""vLLM's router's own state under Program scheduling (vllm-project/router, the version ``vllm-router``
0.1.17 ships; a rival): its programs, its per-rank usage estimate and its rolling statistics, kept as the
router keeps them, for the ``vllm-router-program`` preset (``program_admission.py``).

Sources, read not copied (commits of the indexed files; the installed binary is newer than every one):
``src/program_scheduling/scheduler.rs`` @ 3881953 (usage from observations), ``scheduler_lifecycle.rs``
@ 3881953 (completion, acting TTL, pause, capacity repair), ``scheduler_admission.rs`` and
``scheduler_fairness.rs`` @ e0c942d (admission gates, force-resume deadline), ``factors.rs`` @ e0c942d
(rolling windows), ``policy.rs`` @ 1aa3500 (the Progress-TTL formulas), ``binding/mod.rs`` @ 1aa3500
(consistent-hash ring), and ``docs/program_scheduling.md``.

A program is one agent of a workflow (``<program_id>:<agent>``, as the live harness names it to the
router, docs/vllm-sim.md). It is *active* on a rank while it has a placement there: *reasoning* (a call in
flight) or *acting* (idle in a tool call, its KV kept for its acting TTL), or *paused* (no placement, its
tokens freed). Times are the simulator's seconds, passed in.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import sys
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from hetflow.core.kv_retention import LogNormalFit, best_hold_s
from hetflow.core.snapshot import EngineView

HASH_VIRTUAL_NODES = 160
"""Points per rank on the binding ring (the router's ``hash_virtual_nodes`` default)."""


def fitted_acting_ttl_s(intervals_s: list[float], miss_impact_s: float, max_ttl_s: float) -> float:
    """The acting TTL that maximises ``P(T < d) C - E[T; T < d] - d P(T >= d)`` for the tool-gap T
    fitted log-normal over the rank's intervals, C the cache-miss impact, over 0, 50 ms and 32 log-spaced
    candidates up to ``min(max_ttl_s, C)``; 0 when the best utility is negative (policy.rs
    ``fitted_acting_ttl``, Continuum's TTL; ``hetflow.core.kv_retention`` with a holding cost of 1)."""
    fit = LogNormalFit.of(intervals_s)
    cap_s = min(max_ttl_s, miss_impact_s)
    if fit is None or cap_s <= 0:
        return 0.0
    return best_hold_s(fit, miss_impact_s, cap_s)[0]


class HashRing:
    """Consistent hashing of programs to ranks, ``virtual_nodes`` points per rank (binding/mod.rs). The
    router hashes a session header or, without one, the whole first request (its ``fbi_hash``); the live
    harness sends no session header, so a program's home is as good as random: here blake2b of the program's
    key and generation stands in."""

    def __init__(self, engine_ids: list[str], virtual_nodes: int) -> None:
        points = sorted((_hash(f"{engine_id}:{v}"), engine_id) for engine_id in sorted(engine_ids)
                        for v in range(virtual_nodes))
        self.engine_ids = tuple(sorted(engine_ids))
        self._hashes = [h for h, _ in points]
        self._owners = [e for _, e in points]

    def home(self, key: str) -> str:
        i = bisect_left(self._hashes, _hash(key))
        return self._owners[i % len(self._owners)]


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


CONTEXT_SHRINK_CONFIRMATIONS = 2
"""Smaller observed prompts in a row before the router lowers a program's context (scheduler_state.rs)."""


def observe_completed_context(program: RouterProgram, prompt_tokens: int) -> None:
    """scheduler_state.rs ``observe_completed_context``: a finished call's observed prompt raises the
    program's context at once and lowers it only after ``CONTEXT_SHRINK_CONFIRMATIONS`` in a row."""
    if prompt_tokens >= program.context_tokens:
        program.context_tokens, program.context_shrinks = prompt_tokens, 0
        return
    program.context_shrinks += 1
    if program.context_shrinks >= CONTEXT_SHRINK_CONFIRMATIONS:
        program.context_tokens, program.context_shrinks = prompt_tokens, 0


@dataclass
class RouterProgram:
    key: str
    generation: int
    last_engine: str
    """``last_target``: its home rank until it is first admitted, then where it last ran."""
    active: bool = False
    in_flight: int = 0
    context_tokens: int = 0
    """The router's estimate of its context (``estimated_context_tokens``): raised by each request's prompt,
    set from a finished call's observed prompt, lowered only after two smaller ones in a row
    (scheduler_state.rs ``observe_completed_context``); its output is not counted until the next prompt
    carries it."""
    context_shrinks: int = 0
    """Finished calls in a row whose prompt was below ``context_tokens``."""
    ttl_deadline_s: float = math.inf
    """While acting: when its kept KV is released (paused)."""
    was_paused: bool = False
    """Paused before (by TTL, repair): only such a program may resume on another rank."""
    pause_when_idle: bool = False
    """Capacity repair marked it: it pauses at its next completion instead of acting."""
    last_finished_s: float | None = None
    last_prompt_tokens: int = 0
    last_miss_impact_s: float = 0.0
    """The cost of a miss of its last finished prompt (``last_cache_miss_impact_seconds``), 0 before one."""
    rounds_since_activation: int = 0
    rounds_since_ttl_pause: int = 0
    pending_request: str = ""
    """The request it is deciding (its arrival is counted once however often it is decided again)."""
    activated_s: float = 0.0


@dataclass
class RankWindows:
    """One rank's rolling windows of ``size`` samples (factors.rs): completed requests (finish time, rounds
    since the program's last TTL pause, context growth, output, decode time) and tool-gap intervals (for the
    TTL)."""

    size: int
    finished_s: deque = field(init=False)
    rounds: deque = field(init=False)
    growth_tokens: deque = field(init=False)
    output_tokens: deque = field(init=False)
    intervals_s: deque = field(init=False)
    decode_s: deque = field(init=False)
    """From the response's first streamed chunk to its end, None where it had none (program_adapter.rs)."""

    def __post_init__(self) -> None:
        for name in ("finished_s", "rounds", "growth_tokens", "output_tokens", "intervals_s", "decode_s"):
            setattr(self, name, deque(maxlen=self.size))

    def add(self, finished_s: float, rounds: int, growth_tokens: int | None, output_tokens: int,
            decode_s: float | None = None) -> None:
        self.finished_s.append(finished_s)
        self.rounds.append(rounds)
        self.growth_tokens.append(growth_tokens)
        self.output_tokens.append(output_tokens)
        self.decode_s.append(decode_s)

    @property
    def mature(self) -> bool:
        return len(self.finished_s) >= self.size

    def target_rounds(self, max_segment_rounds: int) -> float:
        """``clamp(ceil(2 x mean rounds since TTL pause), 1, max)``, 0 while immature (policy.rs)."""
        if not self.mature:
            return 0.0
        return float(min(max(math.ceil(2 * sum(self.rounds) / len(self.rounds)), 1), max_segment_rounds))

    def mean_growth_tokens(self) -> float:
        grown = [g for g in self.growth_tokens if g is not None]
        return sum(grown) / len(grown) if grown else 0.0

    def mean_decode_s(self) -> float | None:
        """``average_decode_seconds``: over the samples that have one, None where none has."""
        timed = [d for d in self.decode_s if d is not None and d >= 0]
        return sum(timed) / len(timed) if timed else None

    def mean_output_tokens(self) -> float:
        return sum(self.output_tokens) / len(self.output_tokens) if self.output_tokens else 0.0

    def requests_per_s(self) -> float:
        if len(self.finished_s) < 2 or self.finished_s[-1] <= self.finished_s[0]:
            return 0.0
        return (len(self.finished_s) - 1) / (self.finished_s[-1] - self.finished_s[0])


@dataclass(frozen=True)
class SchedulingConfig:
    """The router's ``--program-scheduling-config-json`` as the live harness sets it (the documented
    recommended configuration), in the simulator's seconds."""

    global_queue: bool
    max_active_programs: int
    waiting_threshold: int
    """``admission_waiting_request_threshold``: a rank whose vLLM has this many waiting takes no new program."""
    decode_buffer_tokens: int
    max_acting_ttl_s: float
    stats_window_size: int
    force_resume_timeout_s: float
    metrics_interval_s: float
    cross_rank_headroom_ratio: float
    binding_strategy: str = "consistent_hash"
    """How a new program generation is bound to its home rank (binding/mod.rs): ``consistent_hash`` (the
    default), ``program_round_robin``, ``least_program_count`` or ``reasoning_token_balance``."""
    max_segment_rounds: int = 14
    """The router's default, which the preset does not vary (its defaults live in ``ProgramAdmission``)."""
    watermark_ratio: float = 1.0
    """``low_watermark_ratio`` = ``high_watermark_ratio``, both 1.0 by default and not varied here."""
    force_resume_floor_s: float = 30.0
    """The force-resume timeout's floor, 30 s of the router's clock (scheduler_fairness.rs, not configurable):
    on a pool run at time scale k, 30 / k s of the simulator's."""
    batch_gain_admission: bool = True
    """``enable_batch_gain_admission`` (on by default): a program whose tokens fit now but not with the
    growth reserve is admitted when the decode it adds to the batch gains more than it costs
    (``ProgramLedger.batch_gain_admits``)."""


@dataclass(frozen=True)
class Admission:
    engine_id: str
    rule: str
    used_tokens: float
    required_tokens: float
    reserve_tokens: float


@dataclass
class RankObservation:
    """A rank's last scrape of vLLM's ``/metrics`` with the router's checkpoint of its own programs at that
    moment, and the router's own changes to its usage since (scheduler.rs ``apply_observations``)."""

    taken_s: float = -math.inf
    estimated_active_tokens: float = 0.0
    waiting: int = 0
    delta_tokens: float = 0.0


class ProgramLedger:
    """The router's programs, per-rank usage estimates and windows; every method takes the time."""

    def __init__(self, config: SchedulingConfig, miss_impact_s: Callable[[int], float],
                 decode_tokens_per_s: Callable[[int, int], float]) -> None:
        self.config = config
        self.miss_impact_s = miss_impact_s
        """Uncached prompt tokens -> seconds: the calibrated cold prefill (``Calibration.cache_miss_impact_s``)."""
        self.decode_tokens_per_s = decode_tokens_per_s
        """(running requests, their context tokens) -> the calibrated decode throughput
        (``Calibration.decode_tokens_per_s``)."""
        self.programs: dict[str, RouterProgram] = {}
        self.active: dict[str, set[str]] = {}
        """Rank -> keys of the programs active on it."""
        self.queued: dict[str, float] = {}
        """Key -> when it was queued, for the programs waiting for admission."""
        self.force_deadline_s: dict[str, float] = {}
        self.windows: dict[str, RankWindows] = {}
        self.observations: dict[str, RankObservation] = {}
        self.capacity_tokens: dict[str, int] = {}
        self.generations: dict[str, int] = {}
        self._ttl_heap: list[tuple[float, str]] = []
        self.bindings = 0
        """New program generations bound so far (``program_round_robin``'s counter)."""
        self.ring: HashRing | None = None
        self.refusal = ""
        """Why the last ``admit`` refused on the program's own rank: the gate, in words ("" if admitted)."""
        self.holds: list[tuple[float, float]] = []
        """(admitted at, held for) in seconds, for each paused program: how long it held its rank's room,
        from its admission to its pause (the router logs both, ``program_admit`` and ``program_pause``; not
        a release), what the live harness compares with the binary's."""

    # -- state --------------------------------------------------------------------------------------------
    def window(self, engine_id: str) -> RankWindows:
        if engine_id not in self.windows:
            self.windows[engine_id] = RankWindows(self.config.stats_window_size)
        return self.windows[engine_id]

    def on_rank(self, engine_id: str) -> list[RouterProgram]:
        return [self.programs[k] for k in self.active.get(engine_id, ())]

    def private_tokens(self, program: RouterProgram) -> int:
        """Its context plus the decode buffer (the harness sends no ``expected_output_length``); no shared
        prefix is subtracted (scheduler_state.rs ``private_tokens``)."""
        return program.context_tokens + self.config.decode_buffer_tokens

    def used_tokens(self, engine_id: str) -> float:
        observation = self.observations[engine_id]
        return max(0.0, observation.estimated_active_tokens + observation.delta_tokens)

    def adjust(self, engine_id: str, tokens: float) -> None:
        self.observations.setdefault(engine_id, RankObservation()).delta_tokens += tokens

    # -- scrape and periodic decisions ---------------------------------------------------------------------
    def tick(self, engines: dict[str, EngineView], capacity_tokens: dict[str, int], now_s: float) -> None:
        """What the router does on a tick, an arrival or a completion: scrape each rank whose last scrape
        is a metrics interval old, release expired acting TTLs, repair capacity."""
        if self.ring is None or self.ring.engine_ids != tuple(sorted(engines)):
            self.ring = HashRing(list(engines), HASH_VIRTUAL_NODES)
        self.capacity_tokens = capacity_tokens
        for engine_id, engine in engines.items():
            if now_s - self.observations.get(engine_id, RankObservation()).taken_s >= self.config.metrics_interval_s:
                self._observe(engine, now_s)
        self._expire_ttls(now_s)
        for engine_id in engines:
            self._repair(engine_id, now_s)

    def _observe(self, engine: EngineView, now_s: float) -> None:
        """vLLM's KV usage times the capacity, scaled up when the router counts more reasoning programs than
        vLLM runs, plus the acting programs' private tokens (vLLM does not count them)."""
        programs = self.on_rank(engine.engine_id)
        reasoning = [p for p in programs if p.in_flight]
        native = engine.kv_cache_usage * self.capacity_tokens[engine.engine_id]
        if engine.running > 0:
            reasoning_tokens = native * max(len(reasoning), engine.running) / engine.running
        elif reasoning:
            reasoning_tokens = float(sum(self.private_tokens(p) for p in reasoning))
        else:
            reasoning_tokens = native
        acting_tokens = sum(self.private_tokens(p) for p in programs if not p.in_flight)
        self.observations[engine.engine_id] = RankObservation(now_s, reasoning_tokens + acting_tokens, engine.waiting)

    def _expire_ttls(self, now_s: float) -> None:
        while self._ttl_heap and self._ttl_heap[0][0] <= now_s:
            deadline_s, key = heapq.heappop(self._ttl_heap)
            program = self.programs.get(key)
            if (program is not None and program.active and not program.in_flight
                    and program.ttl_deadline_s == deadline_s):
                self.pause(program, deadline_s)

    def _repair(self, engine_id: str, now_s: float) -> None:
        """Capacity repair (scheduler_lifecycle.rs ``repair_capacity``): above the high watermark, pause idle
        acting programs, longest active first, and mark reasoning ones to pause when idle, down to the low;
        the programs already marked count as freed (``future_private_relief``). The router orders them by
        time in their segment weighted by a small context's share, here by time alone."""
        capacity = self.capacity_tokens[engine_id] * self.config.watermark_ratio
        programs = self.on_rank(engine_id)
        window = self.window(engine_id)
        completion = math.ceil(window.mean_output_tokens())
        reasoning = [p for p in programs if p.in_flight and not p.pause_when_idle]
        relief = sum(self.private_tokens(p) for p in programs if p.in_flight and p.pause_when_idle)
        projected = (self.used_tokens(engine_id) + completion * len(reasoning) - relief
                     if engine_id in self.observations else 0.0)
        if projected <= capacity:
            return
        for program in sorted(programs, key=lambda p: (p.activated_s, -self.private_tokens(p), p.key)):
            if projected <= capacity:
                break
            if program.in_flight:
                if not program.pause_when_idle:
                    program.pause_when_idle = True
                    projected -= self.private_tokens(program) + completion
            else:
                projected -= self.private_tokens(program)
                self.pause(program, now_s)

    def pause(self, program: RouterProgram, now_s: float) -> None:
        """Paused: no placement, its tokens freed; it may later resume on another rank."""
        self.holds.append((program.activated_s, now_s - program.activated_s))
        self.adjust(program.last_engine, -self.private_tokens(program))
        self.active[program.last_engine].discard(program.key)
        program.active, program.was_paused, program.pause_when_idle = False, True, False
        program.ttl_deadline_s = math.inf
        program.rounds_since_activation = program.rounds_since_ttl_pause = 0

    # -- arrivals -----------------------------------------------------------------------------------------
    def arrive(self, key: str, request_id: str, prompt_tokens: int, now_s: float,
               session_id: str = "") -> RouterProgram:
        """A request of program ``key``: a new program is bound to its home rank; a returning one gives its
        rank a tool-gap sample and, when active, grows its context there. Counted once per request. The home
        is hashed from ``session_id`` when the request carries a session header (every program of the session
        and every generation then has the same home: identity.rs ``consistent_hash_request_key``), from a
        stand-in for the whole first request otherwise."""
        program = self.programs.get(key)
        if program is None:
            if self.ring is None:
                raise RuntimeError("the router binds programs to ranks only after its first tick")
            generation = self.generations.get(key, 0)
            home = self._bind(f"header:{session_id}" if session_id else f"{key}#{generation}")
            program = self.programs[key] = RouterProgram(key, generation, home)
        if program.pending_request == request_id:
            return program
        program.pending_request = request_id
        if not program.in_flight and program.last_finished_s is not None:
            self.window(program.last_engine).intervals_s.append(now_s - program.last_finished_s)
        if prompt_tokens > program.context_tokens:
            if program.active and not program.pause_when_idle:
                self.adjust(program.last_engine, prompt_tokens - program.context_tokens)
            program.context_tokens = prompt_tokens
        return program

    def _bind(self, hash_key: str) -> str:
        """A new generation's home rank by the binding strategy (binding/mod.rs, ranks sorted by id): the
        ring; the next rank in turn; the fewest accounted programs; the most capacity left over the accounted
        programs' private tokens. Accounted on a rank (scheduler.rs): its active programs and the waiting
        ones last bound there; ties to the first rank by id."""
        assert self.ring is not None
        ranks = list(self.ring.engine_ids)
        strategy = self.config.binding_strategy
        self.bindings += 1
        if strategy == "consistent_hash":
            return self.ring.home(hash_key)
        if strategy == "program_round_robin":
            return ranks[(self.bindings - 1) % len(ranks)]
        accounted = {rank: [*self.on_rank(rank), *(self.programs[k] for k in self.queued
                                                   if self.programs[k].last_engine == rank)] for rank in ranks}
        if strategy == "least_program_count":
            return min(ranks, key=lambda r: len(accounted[r]))
        return max(ranks, key=lambda r: (self.capacity_tokens.get(r, 0)
                                         - sum(self.private_tokens(p) for p in accounted[r]), -ranks.index(r)))

    def dispatch_active(self, program: RouterProgram) -> None:
        """An active program's request goes to its rank at once, past every gate."""
        program.in_flight += 1
        program.ttl_deadline_s = math.inf

    def admit(self, program: RouterProgram, now_s: float) -> Admission | None:
        """The rank a waiting program is admitted to now, or None: its last rank (its home when new), then,
        with the global queue and only for a program paused before, another rank past the cross-rank gates."""
        self.queued.setdefault(program.key, now_s)
        if program.key not in self.force_deadline_s:
            self.force_deadline_s[program.key] = now_s + self._force_timeout_s(program)
        forced = now_s >= self.force_deadline_s[program.key]
        planned = self._plan(program, program.last_engine, forced)
        plan = planned if isinstance(planned, Admission) else None
        self.refusal = "" if plan else f"{program.last_engine}: {planned}"
        if plan is None and self.config.global_queue and program.was_paused:
            plan = self._cross_rank(program, now_s)
        if plan is not None:
            self._commit(program, plan.engine_id, now_s)
        return plan

    def _plan(self, program: RouterProgram, engine_id: str, forced: bool) -> Admission | str:
        """scheduler_admission.rs ``rank_admission_plan``: vLLM's waiting queue (even when forced), the
        active-program count, the tokens now and with the growth reserve; forced skips all but the first.
        A refusal is the gate that refused, in words."""
        observation = self.observations.get(engine_id)
        if observation is None:
            return "no metrics scraped yet"
        if self.config.waiting_threshold and observation.waiting >= self.config.waiting_threshold:
            return "vLLM has waiting requests"
        programs = self.on_rank(engine_id)
        limit = self.capacity_tokens[engine_id] * self.config.watermark_ratio
        used, required = self.used_tokens(engine_id), float(self.private_tokens(program))
        window = self.window(engine_id)
        target = window.target_rounds(self.config.max_segment_rounds)
        growth = window.mean_growth_tokens()
        reserve = (growth * (target + sum(max(target - p.rounds_since_activation, 0) for p in programs))
                   if target > 0 and growth > 0 else 0.0)
        refusal = (f"{self.config.max_active_programs} active programs"
                   if len(programs) + 1 > self.config.max_active_programs
                   else "KV tokens" if used + required > limit
                   else "growth reserve" if used + required + reserve > limit else "")
        if forced or not refusal:
            return Admission(engine_id, "forced" if refusal else "admitted", used, required, reserve)
        if refusal == "growth reserve" and self.batch_gain_admits(program, engine_id, used, required):
            return Admission(engine_id, "batch-gain", used, required, reserve)
        return refusal

    def batch_gain_admits(self, program: RouterProgram, engine_id: str, used: float, required: float) -> bool:
        """policy.rs ``estimate_batch_gain``, where only the growth reserve refused: the candidate joins the
        rank's decode batch when the time it gains a request, ``decode s x (throughput with it / without - 1)``,
        is at least the cost of its own cold prefill plus the continuity the protected programs lose,
        ``(rounds before - rounds after) / rounds after x their mean miss cost``, the rounds being what the
        room left holds of the protected programs' remaining ones at the mean growth (infinite where the
        candidate leaves none); never while the rank's window is immature or nothing runs there."""
        window = self.window(engine_id)
        programs = self.on_rank(engine_id)
        running = [p for p in programs if p.in_flight]
        if not self.config.batch_gain_admission or not window.mature or not running:
            return False
        context_before = sum(p.context_tokens for p in running)
        before = self.decode_tokens_per_s(len(running), context_before)
        after = self.decode_tokens_per_s(len(running) + 1, context_before + program.context_tokens)
        if before <= 0:
            return False
        decode_s = window.mean_decode_s()
        if decode_s is None:
            decode_s = len(running) * window.mean_output_tokens() / before
        if not math.isfinite(decode_s) or decode_s <= 0:
            return False
        gain_s = decode_s * max(after / before - 1.0, 0.0)
        return gain_s >= self.miss_impact_s(program.context_tokens) + self._continuity_loss_s(
            programs, window, used, required, self.capacity_tokens[engine_id] * self.config.watermark_ratio)

    def _continuity_loss_s(self, programs: list[RouterProgram], window: RankWindows, used: float,
                           required: float, limit: float) -> float:
        """The batch gain's continuity loss (policy.rs ``estimate_batch_gain``) over the rank's protected
        programs: those with target rounds left since their activation, each with its last miss cost."""
        growth = window.mean_growth_tokens()
        if growth <= 0:
            return 0.0
        target = window.target_rounds(self.config.max_segment_rounds)
        protected = [(target - p.rounds_since_activation, p.last_miss_impact_s) for p in programs
                     if target - p.rounds_since_activation > 0]
        rounds = sum(r for r, _ in protected)
        room = max(limit - used, 0.0)
        before = min(rounds, room / growth)
        after = min(rounds, max(room - required - growth * target, 0.0) / growth)
        if before > 0 and after <= sys.float_info.epsilon:
            return math.inf
        if not protected or after <= sys.float_info.epsilon:
            return 0.0
        return (max(before - after, 0.0) / after) * (sum(c for _, c in protected) / len(protected))

    def _cross_rank(self, program: RouterProgram, now_s: float) -> Admission | None:
        """scheduler_global.rs ``select_cross_rank_admission``: a rank no other waiter is bound to, both
        ranks' windows mature, queued a metrics interval, the source under pressure, and headroom of the
        source's plus 1.2 x its context; the fewest waiting, then least pressure, then fewest active."""
        source = program.last_engine
        if now_s - self.queued[program.key] < self.config.metrics_interval_s or not self.window(source).mature:
            return None
        others = [k for k in self.queued if k != program.key]
        pressed = (self.observations[source].waiting >= self.config.waiting_threshold
                   or any(self.programs[k].last_engine == source
                          and now_s - self.queued[k] >= self.config.metrics_interval_s for k in others))
        if not pressed:
            return None
        bound = {self.programs[k].last_engine for k in others}
        limit = self.capacity_tokens[source] * self.config.watermark_ratio
        source_room = max(0.0, limit - self.used_tokens(source))
        best = None
        for engine_id in sorted(self.observations):
            if engine_id == source or engine_id in bound or not self.window(engine_id).mature:
                continue
            room = max(0.0, self.capacity_tokens[engine_id] * self.config.watermark_ratio - self.used_tokens(engine_id))
            if room < source_room + self.config.cross_rank_headroom_ratio * program.context_tokens:
                continue
            plan = self._plan(program, engine_id, False)
            if not isinstance(plan, Admission):
                continue
            rank = (self.observations[engine_id].waiting,
                    (plan.used_tokens + plan.required_tokens + plan.reserve_tokens) / self.capacity_tokens[engine_id],
                    len(self.active.get(engine_id, ())), engine_id)
            if best is None or rank < best[0]:
                best = (rank, Admission(engine_id, "cross-rank", plan.used_tokens, plan.required_tokens,
                                        plan.reserve_tokens))
        return best[1] if best else None

    def _commit(self, program: RouterProgram, engine_id: str, now_s: float) -> None:
        program.active, program.last_engine, program.activated_s = True, engine_id, now_s
        program.rounds_since_activation = 0
        program.in_flight += 1
        program.ttl_deadline_s = math.inf
        self.queued.pop(program.key, None)
        self.force_deadline_s.pop(program.key, None)
        self.active.setdefault(engine_id, set()).add(program.key)
        self.adjust(engine_id, self.private_tokens(program))

    def _force_timeout_s(self, program: RouterProgram) -> float:
        """scheduler_fairness.rs: ``clamp(3 (remaining active rounds + rounds ahead) / throughput, min(30 s,
        max), max)`` over the pool (global queue), the configured timeout until every rank's window is mature;
        the rounds ahead are those of the programs queued before it (the router's ``take_while``)."""
        longest_s = self.config.force_resume_timeout_s
        windows = [self.window(e) for e in self.observations]
        if not windows or not all(w.mature for w in windows):
            return longest_s
        throughput = sum(w.requests_per_s() for w in windows)
        rounds = {e: self.window(e).target_rounds(self.config.max_segment_rounds) for e in self.observations}
        if throughput <= 0 or min(rounds.values()) <= 0:
            return longest_s
        active = sum(max(rounds[p.last_engine] - p.rounds_since_activation, 1 if p.in_flight else 0)
                     for keys in self.active.values() for p in (self.programs[k] for k in keys))
        ahead = sum(max(rounds.get(self.programs[k].last_engine, 1.0), 1.0)
                    for k in itertools.takewhile(lambda k: k != program.key, self.queued))
        return min(max(3 * (active + ahead) / throughput, min(self.config.force_resume_floor_s, longest_s)),
                   longest_s)

    # -- completions --------------------------------------------------------------------------------------
    def finish(self, key: str, engine_id: str, prompt_tokens: int, output_tokens: int, cached_tokens: int,
               resumes: bool, now_s: float, decode_s: float | None = None) -> None:
        """scheduler_lifecycle.rs ``complete``: the acting TTL is fitted from the rank's tool gaps (before
        this sample) and the cost of a miss of the prompt; the rank's window takes the request; when idle,
        a program that will not resume is released, one marked by repair pauses, the rest act for the TTL."""
        program = self.programs.get(key)
        if program is None or program.last_engine != engine_id or not program.in_flight:
            return
        program.in_flight -= 1
        window = self.window(engine_id)
        impact_s = self.miss_impact_s(prompt_tokens)
        ttl_s = (fitted_acting_ttl_s(list(window.intervals_s), impact_s, self.config.max_acting_ttl_s)
                 if len(window.intervals_s) >= self.config.stats_window_size else 0.0)
        last = program.last_prompt_tokens
        continuous = last == 0 or cached_tokens >= 0.9 * last
        program.rounds_since_activation += continuous
        program.rounds_since_ttl_pause += continuous
        growth = prompt_tokens - last if 0 < prompt_tokens - last < last else None
        window.add(now_s, program.rounds_since_ttl_pause, growth, output_tokens, decode_s)
        program.last_miss_impact_s = impact_s
        before = self.private_tokens(program)
        observe_completed_context(program, prompt_tokens)
        if program.active:
            self.adjust(engine_id, self.private_tokens(program) - before)
        program.last_finished_s, program.last_prompt_tokens, program.pending_request = now_s, prompt_tokens, ""
        if program.in_flight:
            return
        if not resumes:
            self._release(program)
        elif program.pause_when_idle or ttl_s <= 0:
            self.pause(program, now_s)
        else:
            program.ttl_deadline_s = now_s + ttl_s
            heapq.heappush(self._ttl_heap, (program.ttl_deadline_s, key))

    def _release(self, program: RouterProgram) -> None:
        """``expected_resume: false``: the program is gone when idle; the same key later is a new generation."""
        if program.active:
            self.adjust(program.last_engine, -self.private_tokens(program))
            self.active[program.last_engine].discard(program.key)
        self.queued.pop(program.key, None)
        del self.programs[program.key]
        self.generations[program.key] = program.generation + 1

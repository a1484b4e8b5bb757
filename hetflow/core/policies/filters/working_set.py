"""Filter: a new program starts only on an engine whose active programs' contexts leave room for it.

An agent's calls come back with their whole context, so an engine's KV must hold, besides its running
calls, the contexts of the programs it is serving between calls (their tool gaps). When those working
sets outgrow the KV, vLLM's prefix cache evicts the contexts that are about to return, every later
call prefills its context again, and the extra work lengthens every program: the capacity cliff of
the agent family's sweeps (hit rate falling from about 80% to 60% within 3% of the rate).

A program's first call keeps the engines whose resident tokens (the monitor's ``resident_tokens``: the
active programs last sent there; one that told its stages until it ends or goes idle, one that did not
until its KV hold ends or, without one, for its idle time) plus the
call's prompt and predicted output fit in ``kv_fraction`` of their KV capacity (an engine no active
program holds always may take it, so a program larger than that fraction still starts); with none, it
waits in the balancer's hold queue for the next round (``WaitForCapacity``), so new programs queue
before the gate instead of thrashing the caches of the programs already running. This is admission
control at program level, the unit Autellix (4.2) and Kairos (6) schedule at, applied to KV memory as
Kairos's packer applies it to calls.

With ``growth_share`` (issue 35) an active program counts, besides its context now, that share of what
its context will still grow by over its stages to come (the monitor's ``resident_growth_tokens``: its
calls still to come times its growth per call). What only hetflow knows, a program's stages, lets the
gate admit a program for the working set it will have rather than the one it starts with: counted at
today's contexts, the programs admitted outgrow the KV a few stages later and thrash it. 0.5 counts
each program at its mean context over its remaining stages (its context grows by about as much each
call); 1 at its largest, which leaves KV idle early in every program's life.

A call that continues a program passes by default (its context is already counted, and prefix affinity
keeps it where the context is). With ``resume_where_fits`` (issue 35, program order) it keeps the engine
its program's last call went to, which holds its context, and any other engine only where its context
fits as a new program's would: a resumed program moved off a busy engine must not push the working sets
of the engine it lands on out of the KV.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.monitor.memory_ledger import SLOT_S
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineFilter, Prediction, WaitForCapacity
from hetflow.core.room import WorkingSetRoom
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-filter", "working-set")
class WorkingSet(EngineFilter):
    reads_resident = True

    def __init__(self, kv_fraction: float = 1.0, retry_after_s: float = SLOT_S,
                 resume_where_fits: bool = False, growth_share: float = 0.0) -> None:
        if kv_fraction <= 0 or retry_after_s <= 0 or not 0.0 <= growth_share <= 1.0:
            raise ValueError(f"working-set needs kv_fraction > 0, retry_after_s > 0 and growth_share in [0, 1], "
                             f"got {kv_fraction}, {retry_after_s}, {growth_share}")
        self.kv_fraction, self.retry_after_s = kv_fraction, retry_after_s
        self.resume_where_fits = bool(resume_where_fits)
        self.growth_share = growth_share

    def _room(self, engine: EngineView, need_tokens: float) -> WorkingSetRoom | None:
        """The room the call needs on ``engine``; None for an engine of unknown size (no gate)."""
        if not engine.kv_capacity_tokens:
            return None
        return WorkingSetRoom(need_tokens, self.kv_fraction * engine.kv_capacity_tokens, self.growth_share)

    def _fits(self, engine: EngineView, need_tokens: float) -> bool:
        room = self._room(engine, need_tokens)
        return room is None or room.fits(engine.resident_tokens, engine.resident_growth_tokens)

    def _gated(self, snapshot: ClusterSnapshot) -> tuple[bool, str | None]:
        """Whether the gate applies to the call, and its program's home engine (None for a new program)."""
        home = snapshot.program_dispatches[-1][0] if snapshot.program_dispatches else None
        return home is None or self.resume_where_fits, home

    def keep(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot,
             prediction: Prediction) -> list[EngineView]:
        gated, home = self._gated(snapshot)
        if not gated:
            return engines
        need = call.input_tokens + call_output_tokens(call, prediction)
        kept = [e for e in engines if e.engine_id == home or self._fits(e, need)]
        if not kept:
            who = "a new program" if home is None else f"a program resumed off {home}"
            raise WaitForCapacity(f"working sets fill every engine ({who} needs {need:.0f} tokens; "
                                  f"{self._closest(engines, need)})", self.retry_after_s)
        return kept

    def _closest(self, engines: list[EngineView], need_tokens: float) -> str:
        """The receipt of a hold: the engine nearest to room, its working sets against its limit."""
        rooms = [(room, e) for e in engines if (room := self._room(e, need_tokens)) is not None]
        if not rooms:
            return "no engine of known size"
        room, engine = min(rooms, key=lambda r: r[0].over_tokens(r[1].resident_tokens, r[1].resident_growth_tokens))
        over = room.over_tokens(engine.resident_tokens, engine.resident_growth_tokens)
        return (f"closest {engine.engine_id}: {engine.resident_tokens:.0f} resident + {room.growth_share:g} x "
                f"{engine.resident_growth_tokens:.0f} growth to come, {over:.0f} over its {room.limit_tokens:.0f}")

    def admit_room(self, call: LlmCall, engine: EngineView, snapshot: ClusterSnapshot,
                   prediction: Prediction) -> WorkingSetRoom | None:
        """The room the gate let the call in on ``engine`` for, which the monitor checks again at admit."""
        gated, home = self._gated(snapshot)
        if not gated or engine.engine_id == home:
            return None
        return self._room(engine, call.input_tokens + call_output_tokens(call, prediction))

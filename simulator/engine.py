"""One engine in virtual time: ``hetflow.core.engine.scheduler``'s BatchScheduler, with each iteration an event.

The real-time ``sim`` backend sleeps for ``plan.duration_s``; here the iteration's end is scheduled
``plan.duration_s`` later instead. Same scheduler, same queue, same profile. With ``decode_runs``, a run
of pure decode iterations that stepping could not change is one event (``simulator.decode_jump``). A
status report and a call submitted meanwhile see and leave the engine as stepping would without ending
the run; the scheduler's running requests themselves are brought up to date at the run's end, so read
the engine through ``status`` (the RL router's environment, which reads them, steps).
"""

from __future__ import annotations

from typing import Callable

from hetflow.core.engine.profile import EngineProfile
from hetflow.core.engine.queues import QueueConfig, make_queue
from hetflow.core.engine.request import EngineRequest
from hetflow.core.engine.scheduler import BatchScheduler, StepPlan
from hetflow.core.monitor.state import EngineStatus
from simulator import decode_jump
from simulator.clock import EventLoop


class VirtualEngine:
    def __init__(self, engine_id: str, model: str, profile: EngineProfile, queue: QueueConfig, loop: EventLoop,
                 on_finish: Callable[[EngineRequest], None], decode_runs: bool = False,
                 pins_retained_kv: bool = True) -> None:
        self.engine_id, self.model, self.profile = engine_id, model, profile
        self.reported_profile = profile.as_reported()
        """What it tells the monitor, as a live engine's report carries it (hetflow.wire)."""
        self.scheduler = BatchScheduler(profile, make_queue(queue), pins_retained_kv=pins_retained_kv)
        self._loop, self._on_finish = loop, on_finish
        self._busy = False
        self.busy_s = 0.0
        self.max_used_blocks = 0
        self.decode_runs = decode_runs
        self._run: decode_jump.DecodeRun | None = None
        self._run_id = 0
        """The decode run in progress, and its number: a run settled early leaves its end event stale."""
        self.iterations_in_runs = 0
        """Iterations taken inside decode runs rather than one by one."""

    def submit(self, req: EngineRequest) -> None:
        """Queue ``req`` (ValueError / MemoryError when it can never run here, as on the live engine). A
        decode run in progress goes on; it ends with the iteration in progress when the next would admit
        ``req``."""
        self._settle()
        run = self._run
        if run is not None:
            done = run.done_by(self._loop.now)
            if decode_jump.queue_during(self.scheduler, run, done, req) and done + 1 < run.iterations:
                run.iterations, self._run_id = done + 1, self._run_id + 1
                self._loop.at(run.end_s(run.iterations), self._end_run, self._run_id)
            return
        self.scheduler.add(req)
        if not self._busy:
            self._step()

    def _step(self) -> None:
        plan = self.scheduler.schedule(self._loop.now)
        self.max_used_blocks = max(self.max_used_blocks, self.scheduler.kv.used_blocks)
        if plan.is_empty:
            self._busy = False
            return
        self._busy = True
        run = decode_jump.start(self.scheduler, plan, self._loop.now) if self.decode_runs else None
        if run is None:
            self._schedule_end(plan)
            return
        self._run, self._run_id = run, self._run_id + 1
        self._loop.at(run.end_s(run.iterations), self._end_run, self._run_id)

    def _schedule_end(self, plan: StepPlan) -> None:
        self.busy_s += plan.duration_s
        self._loop.at(self._loop.now + plan.duration_s, self._end_step, plan)

    def _end_run(self, run_id: int) -> None:
        if run_id != self._run_id or self._run is None:
            return  # a stale end: the run was cut short, or ended at its last instant by ``_settle``
        run, self._run = self._run, None
        self.busy_s += run.end_s(run.iterations) - run.start_s
        decode_jump.advance(self.scheduler, run)
        self.iterations_in_runs += run.iterations
        self.max_used_blocks = max(self.max_used_blocks, self.scheduler.kv.used_blocks)  # the run's last
        for req in decode_jump.finish(self.scheduler, run, self._loop.now):
            self._finished(req)
        self._step()

    def _settle(self) -> None:
        """A decode run whose last iteration ended at this very instant, its end event still to come: end
        it now, so that what follows sees the engine as stepping would. After it, a run in progress has
        its last iteration still to end (``done_by(now) < iterations``)."""
        if self._run is not None and self._run.done_by(self._loop.now) >= self._run.iterations:
            self._end_run(self._run_id)

    def _end_step(self, plan: StepPlan) -> None:
        for event in self.scheduler.update_from_step(plan, self._loop.now):
            if event.finished:
                self._finished(event.request)
        self._step()

    def _finished(self, req: EngineRequest) -> None:
        if req.retain_kv_s > 0 and req.program_id:
            self._loop.at(self._loop.now + req.retain_kv_s, self._retention_due)
        self._on_finish(req)

    def _retention_due(self) -> None:
        """A program's retained KV may expire now: the scheduler lets it go at its next iteration, as when
        stepping. A decode run in progress ends with the iteration in progress (the freed room may admit a
        waiting request at the next); an idle engine takes an iteration to let it go."""
        self._settle()
        run = self._run
        if run is not None:
            done = run.done_by(self._loop.now)
            if done + 1 < run.iterations:
                run.iterations, self._run_id = done + 1, self._run_id + 1
                self._loop.at(run.end_s(run.iterations), self._end_run, self._run_id)
        elif not self._busy:
            self._step()

    def status(self) -> EngineStatus:
        """What the engine reports to the monitor, as a live engine does every report interval. A decode
        run in progress changes only the KV blocks held, which it reads without ending the run."""
        self._settle()
        s, run = self.scheduler, self._run
        used_blocks = run.used_blocks(run.done_by(self._loop.now), s.kv.block_size) if run else s.kv.used_blocks
        return EngineStatus(engine_id=self.engine_id, model=self.model, serving=True, waiting=s.num_waiting,
                            running=len(s.running), kv_cache_usage=used_blocks / s.kv.num_blocks,
                            pending_prefill_tokens=s.pending_prefill_tokens,
                            preemptions_total=s.preemptions_total, profile=self.reported_profile)

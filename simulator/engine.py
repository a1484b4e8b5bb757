"""One engine in virtual time: engine_svc.model's BatchScheduler, with each iteration an event.

The real-time ``sim`` backend sleeps for ``plan.duration_s``; here the iteration's end is scheduled
``plan.duration_s`` later instead. Same scheduler, same queue, same profile.
"""

from __future__ import annotations

from typing import Callable

from hetflow.core.engine.profile import EngineProfile
from hetflow.core.engine.queues import QueueConfig, make_queue
from hetflow.core.engine.request import EngineRequest
from hetflow.core.engine.scheduler import BatchScheduler, StepPlan
from hetflow.core.monitor.state import EngineStatus
from simulator.clock import EventLoop


class VirtualEngine:
    def __init__(self, engine_id: str, model: str, profile: EngineProfile, queue: QueueConfig, loop: EventLoop,
                 on_finish: Callable[[EngineRequest], None]) -> None:
        self.engine_id, self.model, self.profile = engine_id, model, profile
        self.scheduler = BatchScheduler(profile, make_queue(queue))
        self._loop, self._on_finish = loop, on_finish
        self._busy = False
        self.busy_s = 0.0
        self.max_used_blocks = 0

    def submit(self, req: EngineRequest) -> None:
        """Queue ``req`` (ValueError / MemoryError when it can never run here, as on the live engine)."""
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
        self.busy_s += plan.duration_s
        self._loop.at(self._loop.now + plan.duration_s, self._end_step, plan)

    def _end_step(self, plan: StepPlan) -> None:
        for event in self.scheduler.update_from_step(plan, self._loop.now):
            if event.finished:
                self._on_finish(event.request)
        self._step()

    def status(self) -> EngineStatus:
        """What the engine reports to the monitor, as a live engine does every report interval."""
        s = self.scheduler
        return EngineStatus(engine_id=self.engine_id, model=self.model, serving=True, waiting=s.num_waiting,
                            running=len(s.running), kv_cache_usage=s.kv.usage,
                            pending_prefill_tokens=s.pending_prefill_tokens,
                            preemptions_total=s.preemptions_total, profile=self.profile)

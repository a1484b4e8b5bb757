"""The balancer's front: every call goes through the configured cascade (``CascadeServing``) or straight
to the dispatcher, and the cascade can be switched while the balancer serves (SIGHUP, sent by the
supervisor when ``hetflow replan --apply`` changes it): calls already in a cascade finish in it, new calls
take the new one (Cascadia 4.4: "requests continue to be processed using the current deployment
configuration, so there is no service interruption")."""

from __future__ import annotations

from typing import AsyncIterator, Callable

from balancer_svc import judge_artifact
from balancer_svc.cascade import CascadeServing
from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Dispatcher
from balancer_svc.judges import Judge, LearnedJudge, LlmJudge
from balancer_svc.relay import Relay
from hetflow.core.call import LlmCall
from hetflow.core.cascade.config import CascadeConfig
from hetflow.runtime.logs import get_logger
from hetflow.v1 import balancer_pb2

log = get_logger(__name__)


class Front:
    def __init__(self, dispatcher: Dispatcher, cascade: CascadeConfig | None) -> None:
        self.dispatcher = dispatcher
        self.relay = Relay(dispatcher)
        self.cascade = self._cascade(cascade)

    def _cascade(self, cfg: CascadeConfig | None) -> CascadeServing | None:
        """The cascade serving ``cfg`` with its judge (a learned judge's artifact loaded and checked here)."""
        if cfg is None:
            return None
        judge: Judge = (LearnedJudge(judge_artifact.load(cfg.judge.artifact, cfg.models)) if cfg.judge.kind == "learned"
                        else LlmJudge(cfg.judge, self.relay.serve_admitted))
        return CascadeServing(self.relay, cfg, judge)

    def cascade_config(self) -> CascadeConfig | None:
        """The cascade new calls take (None: none): what ``Balancer.Workload`` tells the re-planner, so a
        rollout knows when a switch has reached the balancer."""
        return self.cascade.cfg if self.cascade is not None else None

    async def serve(self, call: LlmCall, time_remaining_s: float | None) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        cascade = self.cascade  # the one the call started with, whatever a reload does meanwhile
        stream = cascade.serve(call, time_remaining_s) if cascade else self.relay.serve(call, time_remaining_s)
        async for chunk in stream:
            yield chunk

    def reload(self, read: Callable[[], BalancerConfig]) -> None:
        """Take the cascade of the config ``read`` returns; a config that does not build leaves the current
        one serving, and the log says why."""
        try:
            cascade = read().cascade
            self.cascade = self._cascade(cascade)
        except Exception as exc:  # noqa: BLE001 - the top of a signal's handler: whatever the config breaks
            log.error("cascade_reload_refused", error=f"{type(exc).__name__}: {exc}")
            return
        log.info("cascade_reloaded", models=list(cascade.models) if cascade else [],
                 thresholds=list(cascade.thresholds) if cascade else [])

"""``hetflow loadtest <service>``: an open-loop gRPC load generator against one service alone.

Calls go out on a fixed schedule at ``rate`` per second whatever the replies do (open loop), until
``duration_s`` has passed or ``max_calls`` were sent; at most ``max_in_flight`` calls are outstanding
(beyond that a scheduled call is counted as shed, so a stalled service cannot grow the client without
bound); after the last send the calls still running get ``drain_s`` to finish and are then cancelled.
So a run always ends within duration + drain. Reports achieved rate, latency percentiles, errors by
status code, and the stability check on the two halves.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import grpc

from hetflow.core.stats import percentile, stability
from hetflow.runtime.security import DEVELOPMENT_TICKET_KEY
from hetflow.runtime.tickets import TicketIssuer
from hetflow.v1 import (
    balancer_pb2_grpc,
    common_pb2,
    engine_pb2,
    engine_pb2_grpc,
    monitor_pb2,
    monitor_pb2_grpc,
    predictor_pb2,
    predictor_pb2_grpc,
    router_pb2,
    router_pb2_grpc,
)

SERVICES = ("router", "predictor", "monitor", "balancer", "engine")


@dataclass
class LoadResult:
    sent: int = 0
    ok: int = 0
    shed: int = 0
    cancelled: int = 0
    errors: Counter = field(default_factory=Counter)
    latencies_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        lat = self.latencies_s
        return {"sent": self.sent, "ok": self.ok, "shed": self.shed, "cancelled": self.cancelled,
                "errors": dict(self.errors),
                "achieved_calls_per_s": self.ok / self.elapsed_s if self.elapsed_s else 0.0,
                "latency_ms": ({q: percentile(lat, p) * 1e3 for q, p in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
                               if lat else None),  # no successful call: no latency, never NaN
                "stability": stability(lat) if len(lat) >= 2 else None, "elapsed_s": self.elapsed_s}


def call_factory(service: str, channel: grpc.aio.Channel, max_tokens: int = 8) -> Callable[[int], Awaitable[Any]]:
    """One representative call per service; ``i`` makes request ids unique."""
    run_id = uuid.uuid4().hex[:8]
    if service == "router":
        stub = router_pb2_grpc.RouterStub(channel)
        return lambda i: stub.Score(
            router_pb2.ScoreRequest(prompts=[f"Write a function number {i} that sorts a list."]))
    if service == "predictor":
        stub = predictor_pb2_grpc.PredictorStub(channel)
        row = predictor_pb2.FeatureRow(model="qwen2.5-1.5b-instruct", workflow="code", agent="planner", stage_index=1,
                                       stage_count=4, system_prompt_tokens=20, user_prompt_tokens=60, input_tokens=80,
                                       user_prompt="Write a function that merges overlapping intervals.")
        return lambda i: stub.Predict(predictor_pb2.PredictRequest(rows=[row], quantiles=[0.1, 0.9]))
    if service == "monitor":
        stub = monitor_pb2_grpc.MonitorStub(channel)
        return lambda i: stub.Snapshot(monitor_pb2.SnapshotRequest(program_id=f"{run_id}-{i % 64}"))
    if service == "balancer":
        from hetflow.client import build_request

        stub = balancer_pb2_grpc.BalancerStub(channel)
        return lambda i: stub.Complete(build_request(prompt=f"Say hello {i}.", max_tokens=max_tokens, ignore_eos=True,
                                                     program_id=f"{run_id}-{i}", request_id=f"{run_id}-{i}"))
    if service == "engine":
        stub = engine_pb2_grpc.EngineStub(channel)
        tickets, engine_id = TicketIssuer(DEVELOPMENT_TICKET_KEY), list[str]()

        async def generate(i: int) -> None:
            """One call with its dispatch ticket, which an operator signs as a balancer would (the load
            test reaches engines without security, whose key is the development one)."""
            if not engine_id:
                engine_id.append((await stub.Status(engine_pb2.EngineStatusRequest())).engine_id)
            request = engine_pb2.EngineGenerateRequest(
                request_id=f"{run_id}-{i}", prompt=f"Say hello {i}.", priority=float(i),
                sampling=common_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
            request.ticket.CopyFrom(tickets.issue(request, "", engine_id[0], False, time.time()))
            async for _ in stub.Generate(request):
                pass
        return generate
    raise ValueError(f"service must be one of {SERVICES}, got {service!r}")


async def run_load(call: Callable[[int], Awaitable[Any]], rate: float, duration_s: float, max_calls: int | None = None,
                   max_in_flight: int = 1000, drain_s: float = 10.0, timeout_s: float = 30.0) -> LoadResult:
    if rate <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be > 0")
    result = LoadResult()
    in_flight: set[asyncio.Task[None]] = set()
    latencies: dict[int, float] = {}

    async def one(i: int) -> None:
        start = time.perf_counter()
        try:
            await asyncio.wait_for(call(i), timeout_s)
            latencies[i] = time.perf_counter() - start
            result.ok += 1
        except asyncio.CancelledError:
            result.cancelled += 1
        except TimeoutError:
            result.errors["DEADLINE_EXCEEDED"] += 1
        except grpc.aio.AioRpcError as exc:
            result.errors[exc.code().name] += 1

    start = time.perf_counter()
    limit = max_calls if max_calls is not None else int(rate * duration_s)
    i = 0
    while i < limit and time.perf_counter() - start < duration_s:
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        if len(in_flight) >= max_in_flight:
            result.shed += 1
        else:
            task = asyncio.create_task(one(i))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            result.sent += 1
        i += 1
    if in_flight:
        _, pending = await asyncio.wait(set(in_flight), timeout=drain_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    result.elapsed_s = time.perf_counter() - start
    result.latencies_s = [latencies[k] for k in sorted(latencies)]  # in send order, for the halves check
    return result


async def loadtest(service: str, address: str, rate: float, duration_s: float, **kwargs: Any) -> LoadResult:
    max_tokens = kwargs.pop("max_tokens", 8)
    async with grpc.aio.insecure_channel(address) as channel:
        return await run_load(call_factory(service, channel, max_tokens), rate, duration_s, **kwargs)

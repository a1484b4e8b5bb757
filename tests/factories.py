"""Shared builders for requests, profiles and snapshots (after vLLM's tests/v1/core/utils.py)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from pathlib import Path
from typing import Any, Awaitable, Callable

import grpc
import yaml

from hetflow.core.call import LlmCall, SamplingSpec, WorkflowInfo
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.engine.request import EngineRequest
from hetflow.core.policies.contracts import Prediction, PriorityContext
from hetflow.core.prefix import BlockHasher, PromptPart
from hetflow.core.snapshot import ClusterSnapshot, EngineView
from hetflow.core.trace import StageRecord
from hetflow.runtime.config import load_stack
from hetflow.runtime.ports import free_port

_ids = itertools.count()


def stack_on_free_ports(config: Path, out_dir: Path) -> tuple[Path, dict[str, Any]]:
    """``config`` written to ``out_dir`` with every service's and engine's ports chosen free now, and the
    stack it holds: the example's fixed ports (8000, 50100-50122, 9100-9122) may be taken on the host
    by anything else, another test run included."""
    raw = load_stack(config, environ={})
    for section in [raw[name] for name in ("monitor", "router", "predictor", "balancer", "gateway") if name in raw]:
        section.update({key: free_port() for key in ("port", "metrics_port") if key in section})
    for engine in raw["engines"]:
        engine.update({key: free_port() for key in ("port", "metrics_port") if key in engine})
    path = out_dir / config.name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, raw


def stage_record(stage: int = 2, agent: str = "coder") -> StageRecord:
    """A trace call of program ``p7`` (agent family, 4 stages), after stage 1 by the planner: 300 prompt
    and 40 output tokens on model ``m``."""
    return StageRecord("p7", "agent", "loop", stage, 4, agent, "planner", [1], "", "", {"m": 300}, {"m": 40}, {},
                       0.0)


def profile(**overrides) -> EngineProfile:
    values = dict(name="test@gpu", model="test", gpu="gpu", prefill_ms_per_token=0.01, decode_base_ms=5.0,
                  decode_ms_per_seq=0.05, decode_ms_per_batch_token=0.001, kv_capacity_tokens=4096, block_size=16,
                  max_num_seqs=8, max_num_batched_tokens=512, max_model_len=4096)
    values.update(overrides)
    return EngineProfile(**values)


def request(prompt_tokens: int = 32, output_tokens: int = 8, priority: float = 0.0, arrival_s: float | None = None,
            request_id: str | None = None) -> EngineRequest:
    n = next(_ids)
    return EngineRequest(request_id=request_id or f"r{n}", prompt_tokens=prompt_tokens, max_tokens=output_tokens,
                         priority=priority, arrival_s=float(n) if arrival_s is None else arrival_s,
                         target_output_tokens=output_tokens)


def engine(engine_id: str, model: str, in_flight_tokens: float = 0.0, healthy: bool = True,
           decode_ms_per_token: float = 20.0, max_batch_size: int = 64, in_flight_requests: int = 0,
           in_flight_cost_s: float = 0.0, engine_profile: EngineProfile | None = None) -> EngineView:
    return EngineView(engine_id=engine_id, model=model, address=f"{engine_id}:0", healthy=healthy,
                      in_flight_tokens=in_flight_tokens, in_flight_requests=in_flight_requests, waiting=0, running=0,
                      kv_cache_usage=0.0, decode_ms_per_token=decode_ms_per_token, max_batch_size=max_batch_size,
                      kv_capacity_tokens=100_000, in_flight_cost_s=in_flight_cost_s, profile=engine_profile)


def snapshot(*engines: EngineView, program_model: str = "", taken_unix_s: float = 0.0) -> ClusterSnapshot:
    return ClusterSnapshot(taken_unix_s=taken_unix_s, engines=tuple(engines), program_model=program_model)


def call(prompt: str = "write a function", program_id: str = "p1", received_unix_s: float = 0.0,
         input_tokens: int | None = None, max_tokens: int = 16, **wf) -> LlmCall:
    return LlmCall(request_id=f"c{next(_ids)}", prompt=prompt, messages=(),
                   sampling=SamplingSpec(max_tokens=max_tokens), workflow=WorkflowInfo(program_id=program_id, **wf),
                   received_unix_s=received_unix_s,
                   known_input_tokens=input_tokens)



def context(now_s: float = 0.0, *engines: EngineView, for_call: LlmCall | None = None,
            prediction: Prediction | None = None) -> PriorityContext:
    """What a priority rule reads besides the call: the time, the chosen engine, the cluster and the
    call's costs (of ``for_call`` with ``prediction``; a default call otherwise)."""
    engines = engines or (engine("e0", "m"),)
    return PriorityContext.for_call(for_call or call(), prediction or Prediction(1.0), now_s, engines[0],
                                    snapshot(*engines, taken_unix_s=now_s))


def block_hashes_of(parts: list[PromptPart], block_size: int) -> tuple[int, ...]:
    """The chained hashes of the full blocks of a prompt made of ``parts``."""
    return tuple(BlockHasher(block_size).extend(parts).hashes)


class MovedClock:
    """An engine clock that moves only when the engine sleeps: to the wake-up it asked for, plus
    ``oversleep_share`` of the sleep (a host that wakes late). What the last iteration emitted is read
    before time moves on, so a reader sees each token at the instant its iteration ended."""

    def __init__(self, oversleep_share: float = 0.0) -> None:
        self.now_s, self.oversleep_share = 100.0, oversleep_share

    def now(self) -> float:
        return self.now_s

    async def sleep_until(self, when_s: float) -> None:
        await asyncio.sleep(0)
        asked = max(0.0, when_s - self.now_s)
        self.now_s += asked * (1.0 + self.oversleep_share)


async def wait_until(condition: Callable[[], bool | Awaitable[bool]], timeout_s: float = 60.0) -> None:
    """Liveness only: fails if ``condition`` (plain or async) never holds, never on how soon it does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        held = condition()
        if await held if inspect.isawaitable(held) else held:
            return
        assert loop.time() < deadline, "condition never held"
        await asyncio.sleep(0.05)


class StreamedCall:
    """A fake bidirectional call of a batch stream (``hetflow.runtime.batch_streams``): each request
    written is answered in order by ``unary(request, timeout)`` as the server's ``answer_in_order``
    answers it, a failure in the reply's status; ``unimplemented``: the service has no such stream (it ends
    the call at once, with no headers)."""

    def __init__(self, unary: Callable[..., Awaitable[Any]], reply_type: type, unimplemented: bool = False) -> None:
        from hetflow.runtime.batch_streams import answer_in_order

        self._written: asyncio.Queue[Any] = asyncio.Queue()
        self._unimplemented = unimplemented
        self._replies = answer_in_order(self._requests(), lambda r: unary(r, timeout=None), reply_type, self)
        self._headers = asyncio.Event()
        self.cancelled = False

    async def send_initial_metadata(self, initial_metadata: Any) -> None:
        self._headers.set()

    async def initial_metadata(self) -> tuple[Any, ...]:
        """As gRPC's: when the server sent its headers, or at once where the call ended without them."""
        if not self._unimplemented:
            await self._headers.wait()
        return ()

    async def _requests(self) -> Any:
        while True:
            yield await self._written.get()

    async def write(self, request: Any) -> None:
        self._written.put_nowait(request)

    async def read(self) -> Any:
        from hetflow.runtime.interceptors import rpc_error

        if self._unimplemented:
            raise rpc_error(grpc.StatusCode.UNIMPLEMENTED, "no such method")
        return await self._replies.__anext__()

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class EndsUnimplemented:
    """A stream call to a service without the stream, as gRPC's core ends it: UNIMPLEMENTED soon after it
    opens, with no headers; a message written before that end makes the end INTERNAL ("Internal error
    from Core"), the race that hid the missing method (one stream in about 1,500 on a loaded host)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ended = asyncio.Event()
        self.written_before_end = False
        asyncio.get_running_loop().call_later(0.01, self.ended.set)

    async def initial_metadata(self) -> tuple[Any, ...]:
        await self.ended.wait()
        return ()

    async def write(self, message: Any) -> None:
        if self.ended.is_set():
            raise asyncio.InvalidStateError("the RPC has finished")
        self.written_before_end = True

    async def read(self) -> Any:
        from hetflow.runtime.interceptors import rpc_error

        await self.ended.wait()
        if self.written_before_end:
            raise rpc_error(grpc.StatusCode.INTERNAL, "Internal error from Core")
        raise rpc_error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    def cancel(self) -> bool:
        return True


def streamed(unary: Callable[..., Awaitable[Any]], reply_type: type,
             unimplemented: bool = False) -> Callable[[], StreamedCall]:
    """A fake stub's stream method over its unary one (``StreamedCall``)."""
    return lambda: StreamedCall(unary, reply_type, unimplemented)


class _Registrations:
    """Stands in for a server to catch what a generated ``add_*Servicer_to_server`` registers."""

    def __init__(self) -> None:
        self.service, self.handlers = "", {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.service, self.handlers = service, handlers


def add_servicer_without(add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server,
                         *missing: str) -> None:
    """Serve ``servicer`` as an older build of its service would: every method but ``missing``, which gRPC's
    core answers UNIMPLEMENTED (a handler that aborts so races with the client's first write and may end
    INTERNAL instead)."""
    caught = _Registrations()
    add_to_server(servicer, caught)
    handlers = {name: h for name, h in caught.handlers.items() if name not in missing}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(caught.service, handlers),))
    server.add_registered_method_handlers(caught.service, handlers)

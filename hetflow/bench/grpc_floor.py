"""What one gRPC message costs this host's CPU, sent as hetflow's services send them: the floor under the
control services' CPU per decision (issue 63).

A server process (grpc.aio on uvloop, as ``hetflow.runtime.server`` runs every service) echoes a unary
method and a bidirectional stream; a client process (also grpc.aio on uvloop) drives three phases of
``--messages`` each, a payload of ``--payload-bytes`` (a decision's questions and answers are a few
hundred bytes): unary calls one after another (the balancer's ``Decide``), messages on one stream each
awaited before the next (a batch stream at low load, one call per batch), and the same messages with
``--in-flight`` outstanding at once. Each phase's CPU of each process (``/proc/<pid>/stat``), per call or
per message, is the least a hop costs its two ends whatever the code around it does.

    python -m hetflow.bench.grpc_floor [--messages 4000] [--payload-bytes 300] [--in-flight 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import grpc

from hetflow.bench.three_doors import cpu_s
from hetflow.runtime.ports import free_port

SERVICE = "hetflow.bench.Echo"


def _identity(data: bytes) -> bytes:
    return data


async def _serve(port: int, ready: multiprocessing.synchronize.Event) -> None:
    async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, _identity, _identity),
        "Stream": grpc.stream_stream_rpc_method_handler(stream, _identity, _identity)})])
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    ready.set()
    await server.wait_for_termination()


def _server_main(port: int, ready: multiprocessing.synchronize.Event) -> None:
    import uvloop

    uvloop.run(_serve(port, ready))


async def _phase(server_pid: int, count: int, run: Callable[[], Awaitable[None]]) -> dict[str, float]:
    """CPU microseconds per message of the server and of this client over ``run``."""
    server_before, client_before, start = cpu_s(server_pid), time.process_time(), time.monotonic()
    await run()
    wall_s = time.monotonic() - start
    return {"server_us": round(1e6 * (cpu_s(server_pid) - server_before) / count, 1),
            "client_us": round(1e6 * (time.process_time() - client_before) / count, 1),
            "per_s": round(count / wall_s)}


async def _drive(port: int, server_pid: int, messages: int, payload: bytes, in_flight: int) -> dict[str, dict]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        unary = channel.unary_unary(f"/{SERVICE}/Unary", _identity, _identity)
        stream_method = channel.stream_stream(f"/{SERVICE}/Stream", _identity, _identity)
        for _ in range(200):  # warm: the connection, the server's first calls
            await unary(payload)

        async def unary_calls() -> None:
            for _ in range(messages):
                await unary(payload)

        async def stream_messages(outstanding: int) -> None:
            call = stream_method()
            for sent in range(0, messages, outstanding):
                batch = min(outstanding, messages - sent)
                for _ in range(batch):
                    await call.write(payload)
                for _ in range(batch):
                    await call.read()
            await call.done_writing()

        return {"unary call": await _phase(server_pid, messages, unary_calls),
                "stream message, one at a time": await _phase(server_pid, messages, lambda: stream_messages(1)),
                f"stream message, {in_flight} in flight": await _phase(
                    server_pid, messages, lambda: stream_messages(in_flight))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--payload-bytes", type=int, default=300)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    port = free_port()
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    server = ctx.Process(target=_server_main, args=(port, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(60):
            raise SystemExit("the echo server did not start")
        import uvloop

        assert server.pid is not None  # started
        phases = uvloop.run(_drive(port, server.pid, args.messages, os.urandom(args.payload_bytes), args.in_flight))
    finally:
        server.terminate()
        server.join(10)
    result = {"messages": args.messages, "payload_bytes": args.payload_bytes, "grpc": grpc.__version__,
              "cores": os.cpu_count(), "phases": phases}
    for name, figures in phases.items():
        print(f"{name}: server {figures['server_us']} us, client {figures['client_us']} us of CPU each "
              f"({figures['per_s']}/s)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

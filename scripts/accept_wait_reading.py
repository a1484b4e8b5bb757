"""What the balancer's reading of a call's wait to be taken holds (docs/reliability.md, "A fresh channel,
and waits that read low"): the waits twelve calls sent at once read on a fresh channel and on the same
channel connected, and the time left a handler sees for a series of timeouts sent on one channel.

    PYTHONPATH=. python scripts/accept_wait_reading.py

Runs an in-process test stack (``tests/integration/harness.py``), its standing-queue target raised so
that no call is refused, and a bare gRPC server for the timeouts.
"""

from __future__ import annotations

import asyncio

import grpc

from hetflow.client import HetflowClient, build_request
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc
from tests.integration.harness import stack_config, start_stack

TIMEOUTS_S = (5.0, 5.55, 29.9, 30.0, 29.5, 47.33, 60.0, 59.0)


async def burst_waits_ms() -> None:
    stack = await start_stack(stack_config(accept_wait_target_s=10.0))
    waits = stack.balancer_servicer.dispatcher.accept_waits.waits
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            for channel in ("fresh", "connected"):
                waits.clear()
                await asyncio.gather(*(client.complete(build_request(prompt=f"q{i}", max_tokens=2), timeout_s=30)
                                       for i in range(12)))
                print(f"{channel} channel: waits ms {sorted(round(w * 1e3, 1) for _, w in waits)}")
    finally:
        await stack.close()


class _TimeLeft(balancer_pb2_grpc.BalancerServicer):
    def __init__(self) -> None:
        self.seen_s: list[float] = []

    async def Complete(self, request, context):
        self.seen_s.append(context.time_remaining())
        return balancer_pb2.CompletionReply()


async def time_left_s() -> None:
    handler, server = _TimeLeft(), grpc.aio.server()
    balancer_pb2_grpc.add_BalancerServicer_to_server(handler, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = balancer_pb2_grpc.BalancerStub(channel)
            for timeout_s in TIMEOUTS_S:
                await stub.Complete(balancer_pb2.GenerateRequest(), timeout=timeout_s)
    finally:
        await server.stop(None)
    print(f"grpcio {grpc.__version__}: sent {list(TIMEOUTS_S)} s, time left at the handler "
          f"{[round(s, 3) for s in handler.seen_s]} s")


async def main() -> None:
    await burst_waits_ms()
    await time_left_s()


if __name__ == "__main__":
    asyncio.run(main())

"""Batches on one long-lived stream: each answered in order with its own status, a service that goes away
failing only the batches then waiting, and a service without the stream asked by its unary method."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from hetflow.core.features import LengthPrediction
from hetflow.runtime.batch_streams import BatchStream
from hetflow.runtime.interceptors import ServiceInterceptor, rpc_error
from hetflow.v1 import predictor_pb2, predictor_pb2_grpc
from predictor_svc.servicer import PredictorServicer
from tests.factories import EndsUnimplemented


class Lengths:
    """A predictor's batch collector: each row's median is its prompt's length; prompt "slow" answers
    late, prompt "broken" fails as a model would (ValueError: INVALID_ARGUMENT)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    async def submit(self, items):
        prompts = [item.row.user_prompt for item in items]
        self.batches.append(prompts)
        if "slow" in prompts:
            await asyncio.sleep(0.3)
        if "broken" in prompts:
            raise ValueError("the model cannot read this row")
        return [LengthPrediction(float(len(p)), ()) for p in prompts]


async def _serve(servicer: PredictorServicer, port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(interceptors=[ServiceInterceptor("predictor")])
    predictor_pb2_grpc.add_PredictorServicer_to_server(servicer, server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, port


def _batch(*prompts: str, quantile: float = 0.9) -> predictor_pb2.PredictRequest:
    return predictor_pb2.PredictRequest(rows=[predictor_pb2.FeatureRow(model="m", user_prompt=p) for p in prompts],
                                        quantiles=[quantile])


async def test_each_batch_gets_its_own_answer_in_order_and_a_failed_one_fails_only_itself():
    collector = Lengths()
    server, port = await _serve(PredictorServicer("lengths", collector))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stream = BatchStream(predictor_pb2_grpc.PredictorStub(channel).PredictStream, "predictor.PredictStream", 5.0)
    try:
        answers = await asyncio.gather(
            stream.ask(_batch("slow")), stream.ask(_batch("ab")), stream.ask(_batch("broken")),
            stream.ask(_batch("abc", quantile=math.nan)), stream.ask(_batch("abcd")), return_exceptions=True)
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)
    slow, two, broken, bad_message, four = answers
    assert [p.median_tokens for p in slow.predictions] == [4.0]  # answered first although it came last
    assert [p.median_tokens for p in two.predictions] == [2.0] and [p.median_tokens for p in four.predictions] == [4.0]
    assert isinstance(broken, grpc.aio.AioRpcError) and broken.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot read" in broken.details()
    assert isinstance(bad_message, grpc.aio.AioRpcError) and bad_message.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "finite" in bad_message.details()
    assert ["abc"] not in collector.batches  # the bad message never reached the model
    assert len(collector.batches) == 4  # the later batches were answered on the same stream


async def test_a_service_gone_fails_the_batches_waiting_and_a_new_one_is_asked_on_a_new_stream():
    collector = Lengths()
    server, port = await _serve(PredictorServicer("lengths", collector))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stream = BatchStream(predictor_pb2_grpc.PredictorStub(channel).PredictStream, "predictor.PredictStream", 5.0)
    try:
        assert (await stream.ask(_batch("ab"))).predictions[0].median_tokens == 2.0
        waiting = asyncio.ensure_future(stream.ask(_batch("slow")))
        await asyncio.sleep(0.1)
        await server.stop(None)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await waiting
        assert gone.value.code() == grpc.StatusCode.UNAVAILABLE
        server, _ = await _serve(PredictorServicer("lengths", collector), port)
        for _ in range(50):  # the channel reconnects after its backoff
            try:
                answer = await stream.ask(_batch("abc"))
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                await asyncio.sleep(0.1)
        assert answer.predictions[0].median_tokens == 3.0
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)


async def test_a_service_without_the_stream_answers_unimplemented_and_is_asked_by_its_unary_method():
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("hetflow.v1.Predictor", {}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stream = BatchStream(predictor_pb2_grpc.PredictorStub(channel).PredictStream, "predictor.PredictStream", 5.0)
    try:
        assert stream.supported
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stream.ask(_batch("ab"))
        assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED and not stream.supported
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)


async def test_a_batch_unanswered_within_its_timeout_fails_deadline_exceeded_and_the_next_is_answered():
    collector = Lengths()
    server, port = await _serve(PredictorServicer("lengths", collector))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stream = BatchStream(predictor_pb2_grpc.PredictorStub(channel).PredictStream, "predictor.PredictStream", 0.1)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await stream.ask(_batch("slow"))
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        stream.timeout_s = 5.0
        assert (await stream.ask(_batch("ab"))).predictions[0].median_tokens == 2.0
    finally:
        await stream.close()
        await channel.close()
        await server.stop(None)


class SilentCall:
    """A stream call that takes every write and never answers."""

    def __init__(self) -> None:
        self.written: list[object] = []
        self._never = asyncio.Event()

    async def initial_metadata(self) -> tuple:
        return ()

    async def write(self, request: object) -> None:
        self.written.append(request)

    async def read(self) -> object:
        await self._never.wait()
        return grpc.aio.EOF

    def cancel(self) -> bool:
        return True


async def test_a_caller_cancelled_as_its_answer_fails_ends_cancelled_not_with_the_answers_error():
    """Python 3.11's ``wait_for`` returned the answer (here its error) when the waiting task was cancelled in
    the same turn the answer came, and the cancel was lost: an engine's report loop caught the error and
    reported on forever after its reporter was closed."""
    stream: BatchStream[object, object] = BatchStream(SilentCall, "fake.Stream", timeout_s=5.0)
    asking = asyncio.ensure_future(stream.ask("report"))
    for _ in range(5):
        await asyncio.sleep(0)  # the request leaves: its answer waits in the stream's unanswered
    (answer,) = stream._unanswered
    answer.set_exception(rpc_error(grpc.StatusCode.UNAVAILABLE, "fake.Stream ended"))
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    await stream.close()


class HeadersLater(SilentCall):
    """Sends its headers once ``headers`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.headers = asyncio.Event()

    async def initial_metadata(self) -> tuple:
        await self.headers.wait()
        return ()


async def test_the_first_batch_leaves_once_the_service_sent_its_headers():
    call = HeadersLater()
    stream: BatchStream[object, object] = BatchStream(lambda: call, "fake.Stream", timeout_s=5.0)
    first, second = asyncio.ensure_future(stream.ask("a")), asyncio.ensure_future(stream.ask("b"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert call.written == []
    call.headers.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert call.written == ["a", "b"]
    first.cancel()
    second.cancel()
    await stream.close()


async def test_a_service_without_the_stream_is_asked_by_its_unary_method_though_it_ends_the_stream_at_once():
    """Its end raced the first write, which made gRPC end the call INTERNAL and the batch fail UNAVAILABLE."""
    stream: BatchStream[object, object] = BatchStream(EndsUnimplemented, "fake.Stream", timeout_s=5.0)

    async def unary() -> str:
        return "by the unary method"

    try:
        assert await stream.ask_or("a", unary) == "by the unary method"
    finally:
        await stream.close()
    assert not stream.supported


async def test_a_stream_cancelled_while_it_waits_for_a_request_leaves_no_task_behind():
    from types import SimpleNamespace

    from hetflow.runtime.batch_streams import answer_in_order

    never = asyncio.Event()

    async def silent():
        await never.wait()
        yield predictor_pb2.PredictRequest()

    async def answer(request):
        return predictor_pb2.PredictReply()

    async def headers(metadata):
        pass

    replies = answer_in_order(silent(), answer, predictor_pb2.PredictReply,
                              SimpleNamespace(send_initial_metadata=headers))
    before = asyncio.all_tasks()
    waiting = asyncio.ensure_future(replies.__anext__())
    await asyncio.sleep(0.01)
    waiting.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert [t for t in asyncio.all_tasks() - before if not t.done()] == []

"""The rollout waits for the monitor to see each step; a poll the monitor does not answer is tried again,
any other error ends the rollout."""

import asyncio

import grpc
import pytest

from hetflow.planner import apply


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="busy")


def test_an_unanswered_poll_is_tried_again_until_the_engine_is_seen(monkeypatch):
    answers = [rpc_error(grpc.StatusCode.UNAVAILABLE), rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED), {"x"}]

    async def healthy_engines(raw):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(apply, "healthy_engines", healthy_engines)
    asyncio.run(apply._until("x", True, {}, timeout_s=30.0))
    assert answers == []


def test_the_timeout_names_the_monitors_last_failure_and_other_errors_end_at_once(monkeypatch):
    async def unavailable(raw):
        raise rpc_error(grpc.StatusCode.UNAVAILABLE)

    monkeypatch.setattr(apply, "healthy_engines", unavailable)
    with pytest.raises(TimeoutError, match="monitor last answered UNAVAILABLE"):
        asyncio.run(apply._until("x", True, {}, timeout_s=0.3))

    async def refused(raw):
        raise rpc_error(grpc.StatusCode.PERMISSION_DENIED)

    monkeypatch.setattr(apply, "healthy_engines", refused)
    with pytest.raises(grpc.aio.AioRpcError):
        asyncio.run(apply._until("x", True, {}, timeout_s=30.0))

"""The rollout waits for the monitor to see each engine step and for the balancer to take a cascade switch;
a poll the service does not answer is tried again, any other error ends the rollout."""

import asyncio

import grpc
import pytest
import yaml

from hetflow.planner import apply
from hetflow.planner.replan import SWITCH, Step


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
    asyncio.run(apply._until_engine("x", True, {}, timeout_s=30.0))
    assert answers == []


def test_the_timeout_names_the_monitors_last_failure_and_other_errors_end_at_once(monkeypatch):
    async def unavailable(raw):
        raise rpc_error(grpc.StatusCode.UNAVAILABLE)

    monkeypatch.setattr(apply, "healthy_engines", unavailable)
    with pytest.raises(TimeoutError, match="monitor last answered UNAVAILABLE"):
        asyncio.run(apply._until_engine("x", True, {}, timeout_s=0.3))

    async def refused(raw):
        raise rpc_error(grpc.StatusCode.PERMISSION_DENIED)

    monkeypatch.setattr(apply, "healthy_engines", refused)
    with pytest.raises(grpc.aio.AioRpcError):
        asyncio.run(apply._until_engine("x", True, {}, timeout_s=30.0))


def test_a_cascade_switch_waits_until_the_balancer_takes_it(monkeypatch, tmp_path):
    """The flake issue 31 found under load: the switch's SIGHUP reached the balancer after the rollout had
    gone on (and its calls with it). The balancer is asked until it names the new cascade."""
    old = {"models": ["small", "large"], "thresholds": [100.0], "judge": {"kind": "learned", "artifact": "j"}}
    config = tmp_path / "stack.yaml"
    config.write_text(yaml.safe_dump({"balancer": {"port": 1, "cascade": old}, "engines": []}))
    signals, answers = [], [rpc_error(grpc.StatusCode.UNAVAILABLE), (["small", "large"], [100.0]),
                            (["small", "large"], [0.0])]

    async def cascade_in_effect(raw):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(apply, "read_state", lambda raw: {"supervisor_pid": 4242})
    monkeypatch.setattr(apply.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    monkeypatch.setattr(apply, "cascade_in_effect", cascade_in_effect)
    new_stack = {"balancer": {"cascade": {**old, "thresholds": [0]}}}
    asyncio.run(apply.apply(config, new_stack, [Step(SWITCH, why="test")], progress=lambda _: None,
                            step_timeout_s=30.0))
    assert answers == [] and len(signals) == 1  # returned once the balancer named thresholds [0.0]
    assert yaml.safe_load(config.read_text())["balancer"]["cascade"]["thresholds"] == [0]

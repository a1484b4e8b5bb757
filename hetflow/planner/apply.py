"""``hetflow replan --apply``: carry out a rollout on a stack ``hetflow up`` runs, one step at a time
(Cascadia 4.4), while it serves.

Each step rewrites the stack's config file (the first time keeping the original beside it, as
``<config>.before-replan``) and sends the supervisor SIGHUP: an added engine starts on a free local port
and the step waits until the monitor reports it healthy, so calls can reach it before anything is taken
away; a removed engine drains and the step waits until the monitor no longer counts it healthy; the
cascade switch reaches the balancer (SIGHUP), after which new calls take the new cascade. The rollout's
order (``hetflow.planner.replan.rollout``) keeps an engine of every served model at every step.

The cascade switch waits until the balancer says new calls take the new cascade (``Balancer.Workload``
names the one in effect): SIGHUP reaches it through the supervisor, and on a loaded host that took long
enough for the next step, and calls, to run before it (issue 31, docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

import grpc
import yaml

from hetflow.planner.replan import ADD, REMOVE, SWITCH, Step
from hetflow.runtime.channels import open_channel
from hetflow.runtime.ports import free_port
from hetflow.runtime.security import stack_security
from hetflow.stackctl import read_state
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc, monitor_pb2, monitor_pb2_grpc

STEP_TIMEOUT_S = 300.0
"""Longest wait for one step to show in the monitor or the balancer (a vLLM engine loads its weights first)."""


def after_step(raw: Mapping[str, Any], step: Step, new_stack: Mapping[str, Any]) -> dict[str, Any]:
    """The stack config once ``step`` is done: an added engine as the new stack names its model (backend,
    profile, vLLM settings) on this stack's host and free ports; the switch takes the new cascade."""
    out = copy.deepcopy(dict(raw))
    if step.action == ADD:
        assert step.replica is not None
        template = next(e for e in new_stack["engines"] if e["model"] == step.replica.model)
        engine = {k: v for k, v in copy.deepcopy(template).items() if k not in ("host", "port", "metrics_port")}
        engine.update(name=step.engine, port=free_port(), metrics_port=free_port())
        out["engines"] = [*out.get("engines", []), engine]
    elif step.action == REMOVE:
        out["engines"] = [e for e in out["engines"] if e["name"] != step.engine]
    elif step.action == SWITCH:
        balancer = dict(out["balancer"])
        cascade = new_stack.get("balancer", {}).get("cascade")
        if cascade:
            balancer["cascade"] = copy.deepcopy(cascade)
        else:
            balancer.pop("cascade", None)
        out["balancer"] = balancer
    return out


def write_config(path: Path, raw: Mapping[str, Any]) -> None:
    backup = path.with_name(path.name + ".before-replan")
    if not backup.exists():
        backup.write_text(path.read_text())
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("# Rewritten by `hetflow replan --apply`; the original is beside it (.before-replan).\n"
                   + yaml.safe_dump(dict(raw), sort_keys=False, width=110))
    tmp.replace(path)


async def healthy_engines(raw: Mapping[str, Any]) -> set[str]:
    monitor = raw["monitor"]
    address = f"{monitor.get('host', raw.get('stack', {}).get('host', '127.0.0.1'))}:{monitor['port']}"
    async with open_channel(address, stack_security(raw, "operator")) as channel:
        snapshot = await monitor_pb2_grpc.MonitorStub(channel).Snapshot(monitor_pb2.SnapshotRequest(), timeout=2)
    return {e.status.engine_id for e in snapshot.engines if e.healthy}


async def cascade_in_effect(raw: Mapping[str, Any]) -> tuple[list[str], list[float]]:
    """The balancer's cascade for new calls: its models and thresholds (empty: none)."""
    balancer = raw["balancer"]
    address = f"{balancer.get('host', raw.get('stack', {}).get('host', '127.0.0.1'))}:{balancer['port']}"
    async with open_channel(address, stack_security(raw, "operator")) as channel:
        reply = await balancer_pb2_grpc.BalancerStub(channel).Workload(balancer_pb2.WorkloadRequest(), timeout=2)
    return list(reply.cascade_models), list(reply.cascade_thresholds)


def _expected_cascade(raw: Mapping[str, Any]) -> tuple[list[str], list[float]]:
    cascade = raw["balancer"].get("cascade") or {}
    return list(cascade.get("models", [])), [float(h) for h in cascade.get("thresholds", [])]


async def _until(holds: Callable[[], Awaitable[bool]], what: str, service: str, timeout_s: float) -> None:
    """Until ``holds()``; a poll the service does not answer (UNAVAILABLE, DEADLINE_EXCEEDED: busy or
    restarting) is tried again until ``timeout_s``, whose error then names the last such failure."""
    deadline, unanswered = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        try:
            if await holds():
                return
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            unanswered = f" (the {service} last answered {exc.code().name}: {exc.details()})"
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{what}: not seen in the {service} within {timeout_s:g} s{unanswered}")


async def _until_engine(engine: str, healthy: bool, raw: Mapping[str, Any], timeout_s: float) -> None:
    """Until the monitor counts ``engine`` healthy (or, ``healthy`` False, no longer does)."""
    async def holds() -> bool:
        return (engine in await healthy_engines(raw)) == healthy

    await _until(holds, f"engine {engine} {'up' if healthy else 'gone'}", "monitor", timeout_s)


async def _until_cascade(raw: Mapping[str, Any], timeout_s: float) -> None:
    """Until the balancer takes the cascade ``raw`` names for new calls."""
    expected = _expected_cascade(raw)

    async def holds() -> bool:
        return await cascade_in_effect(raw) == expected

    await _until(holds, f"cascade {expected[0]} with thresholds {expected[1]}", "balancer", timeout_s)


async def apply(config: Path, new_stack: Mapping[str, Any], steps: Sequence[Step],
                progress: Callable[[str], None] = print, step_timeout_s: float = STEP_TIMEOUT_S) -> None:
    """Carry out ``steps`` on the stack ``hetflow up`` runs from ``config`` (module docstring)."""
    raw = yaml.safe_load(config.read_text())
    state = read_state(raw)
    if state is None:
        raise ValueError(f"no stack started by `hetflow up -c {config}` is running")
    supervisor = int(state["supervisor_pid"])
    for n, step in enumerate(steps, 1):
        raw = after_step(raw, step, new_stack)
        write_config(config, raw)
        os.kill(supervisor, signal.SIGHUP)
        if step.action in (ADD, REMOVE):
            await _until_engine(step.engine, step.action == ADD, raw, step_timeout_s)
        else:
            await _until_cascade(raw, step_timeout_s)
        progress(f"step {n}/{len(steps)}: {step.action} {step.engine} ({step.why})")

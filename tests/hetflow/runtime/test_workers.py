"""Inference workers die with their service, even one killed without a chance to clean up."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import hetflow.runtime.workers as workers_module
from hetflow.runtime.batching import BatchCollector
from hetflow.runtime.workers import InProcess, process_pool, warm_pool, warmed_pool
from predictor_svc.config import PredictorConfig
from router_svc.config import RouterConfig

SERVICE = """
import asyncio, time
from hetflow.runtime.workers import process_pool, warm_pool

async def main():
    pool = process_pool(2, time.sleep, 0)
    await warm_pool(pool, 2)
    print(*pool._processes, flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited already
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_workers_exit_when_their_service_is_killed():
    service = subprocess.Popen([sys.executable, "-c", SERVICE], stdout=subprocess.PIPE, text=True)
    assert service.stdout is not None
    workers = [int(pid) for pid in service.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(pid) for pid in workers)
    service.send_signal(signal.SIGKILL)
    service.wait()
    give_up_s = time.monotonic() + 30  # a bound on waiting, not a timing under test
    while any(_alive(pid) for pid in workers) and time.monotonic() < give_up_s:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)


def test_no_worker_processes_builds_the_model_here_and_runs_each_batch_in_this_process():
    built: list[str] = []
    pool = process_pool(0, built.append, "spec")
    assert isinstance(pool, InProcess) and built == ["spec"]

    def batch(items):
        if "bad" in items:
            raise ValueError("bad item")
        return [(item, os.getpid()) for item in items]

    async def scenario():
        await warm_pool(pool, 0)
        collector = BatchCollector(batch, 8, 0.0, pool)
        try:
            ok = await collector.submit(["a", "b"])
            try:
                await collector.submit(["bad"])
            except ValueError as exc:
                return ok, str(exc)
            return ok, ""
        finally:
            await collector.close()

    ok, failed = asyncio.run(scenario())
    assert ok == [("a", os.getpid()), ("b", os.getpid())] and failed == "bad item"


def test_cheap_models_run_in_the_service_process_by_default_and_learned_ones_in_a_worker():
    assert RouterConfig(kind="fixed-prior").worker_processes() == 0
    assert RouterConfig(kind="minilm-onnx").worker_processes() == 1
    assert RouterConfig(kind="minilm-onnx", workers=3).worker_processes() == 3
    assert PredictorConfig(kind="input-length").worker_processes() == 0
    assert PredictorConfig(kind="qrf").worker_processes() == 1
    with pytest.raises(ValueError, match="workers must be >= 0"):
        RouterConfig(workers=-1).worker_processes()


async def test_a_warmed_pool_whose_workers_cannot_start_is_shut_down_and_raises(monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    made = []

    def recording(*args):
        made.append(process_pool(*args))
        return made[-1]

    monkeypatch.setattr(workers_module, "process_pool", recording)
    with pytest.raises(BrokenProcessPool):
        await warmed_pool(1, int, "not a number")  # the initializer raises in the worker
    assert len(made) == 1 and made[0]._shutdown_thread


async def test_a_warmed_pool_of_no_workers_builds_its_model_off_the_event_loop():
    built_on: list[int] = []
    pool = await warmed_pool(0, lambda: built_on.append(threading.get_ident()))
    assert isinstance(pool, InProcess) and built_on and built_on != [threading.get_ident()]

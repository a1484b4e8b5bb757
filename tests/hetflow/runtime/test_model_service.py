"""A model service's workers load a copy of the artifact: the fresh pool made after a worker died loads
the model that was validated and served, not an artifact on disk the reloader refused."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from hetflow.core.errors import Unavailable
from hetflow.runtime.model_service import start_model_workers

_value: str | None = None


def read_value(spec):
    value = (Path(spec["artifact"]) / "value.txt").read_text()
    if value == "broken":
        raise ValueError("a broken model")
    return value


def init(spec):
    global _value
    _value = read_value(spec)


def answer(items):
    return [(_value, os.getpid()) for _ in items]


def write_artifact(path, value):
    path.mkdir(exist_ok=True)
    (path / "value.txt").write_text(value)
    (path / "meta.json").write_text("{}")


async def test_a_worker_that_dies_after_a_refused_reload_comes_back_with_the_served_model(tmp_path):
    live = tmp_path / "live"
    write_artifact(live, "1")
    swapped: list[str] = []
    workers = await start_model_workers("test", {"artifact": str(live)}, 1, 8, 0.0, init, answer, 0.0, read_value,
                                        swapped.append)
    copies_root = workers.copies.served.parent
    try:
        [(value, first_pid)] = await workers.collector.submit(["a"])
        assert value == "1"
        write_artifact(live, "broken")
        assert await workers.reloader.reload() is False

        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(Unavailable, match="worker stopped"):
            await workers.collector.submit(["b"])
        [(value, pid)] = await workers.collector.submit(["c"])
        assert value == "1" and pid != first_pid

        write_artifact(live, "2")
        assert await workers.reloader.reload() is True
        [(value, _)] = await workers.collector.submit(["d"])
        assert value == "2" and swapped == ["2"] and len(list(copies_root.iterdir())) == 1
    finally:
        await workers.close()
    assert not copies_root.exists()


async def test_a_spec_without_an_artifact_takes_no_copy_and_watches_nothing(tmp_path):
    built: list[dict] = []
    workers = await start_model_workers("test", {"kind": "prior"}, 0, 8, 0.0, built.append, lambda items: items,
                                        0.1, lambda spec: None, lambda model: None)
    try:
        assert await workers.collector.submit([1]) == [1]
        assert built == [{"kind": "prior"}] and workers.copies is None and workers.reloader is None
    finally:
        await workers.close()

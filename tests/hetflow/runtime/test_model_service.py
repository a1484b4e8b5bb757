"""A model service's workers load a copy of the artifact: the fresh pool made after a worker died loads
the model that was validated and served, not an artifact on disk the reloader refused."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from hetflow.core.errors import Unavailable
from hetflow.runtime import artifact_copies
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


@pytest.fixture(autouse=True)
def serving_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(artifact_copies, "SERVING", tmp_path / "serving")


async def kill_the_worker(workers):
    """Its one worker process killed: the next batch fails UNAVAILABLE."""
    [(_, pid)] = await workers.collector.submit(["before"])
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(Unavailable, match="worker stopped"):
        await workers.collector.submit(["killed"])
    return pid


async def test_a_worker_that_dies_after_a_refused_reload_comes_back_with_the_served_model(tmp_path):
    live = tmp_path / "live"
    write_artifact(live, "1")
    swapped: list[str] = []
    workers, served = await start_model_workers("test", {"artifact": str(live)}, 1, 8, 0.0, init, answer, 0.0,
                                                read_value, swapped.append)
    copies_root = workers.copies.root
    try:
        assert served == "1"
        write_artifact(live, "broken")
        assert await workers.reloader.reload() is False
        first_pid = await kill_the_worker(workers)
        [(value, pid)] = await workers.collector.submit(["after"])
        assert value == "1" and pid != first_pid

        write_artifact(live, "2")
        assert await workers.reloader.reload() is True
        [(value, _)] = await workers.collector.submit(["reloaded"])
        assert value == "2" and swapped == ["2"]
        assert [p.name for p in copies_root.iterdir() if p.is_dir()] == [workers.copies.served.name]

        write_artifact(live, "broken")  # the new copy, not the live path, is what a fresh pool loads
        await kill_the_worker(workers)
        [(value, _)] = await workers.collector.submit(["after the reload"])
        assert value == "2"
    finally:
        await workers.close()
    assert not copies_root.exists()


async def test_a_spec_without_an_artifact_takes_no_copy_and_watches_nothing(tmp_path):
    built: list[dict] = []
    workers, _ = await start_model_workers("test", {"kind": "prior"}, 0, 8, 0.0, built.append, lambda items: items,
                                           0.1, lambda spec: None, lambda model: None)
    try:
        assert await workers.collector.submit([1]) == [1]
        assert built == [{"kind": "prior"}] and workers.copies is None and workers.reloader is None
    finally:
        await workers.close()


async def test_an_artifact_written_as_the_service_starts_is_reloaded(tmp_path, monkeypatch):
    """The watcher's first time is the copied artifact's, read before the copy: a newer one is loaded."""
    live = tmp_path / "live"
    write_artifact(live, "1")
    real_take = artifact_copies.ArtifactCopies.take

    def take_then_update(self, artifact):  # a new artifact lands just after the first copy is taken
        copy = real_take(self, artifact)
        if self._taken == 1:
            write_artifact(live, "2")
            os.utime(live / "meta.json", (1e9, 2e9))
        return copy

    monkeypatch.setattr(artifact_copies.ArtifactCopies, "take", take_then_update)
    workers, served = await start_model_workers("test", {"artifact": str(live)}, 0, 8, 0.0, init, answer, 0.05,
                                                read_value, lambda model: None)
    try:
        assert served == "1"
        for _ in range(400):  # a bound on waiting for the watcher, not a timing under test
            [(value, _)] = await workers.collector.submit(["x"])
            if value == "2":
                break
            await asyncio.sleep(0.05)
        assert value == "2" and workers.reloader.reloads == 1
    finally:
        await workers.close()

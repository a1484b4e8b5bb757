"""A reload serves a copy of the new artifact; one that cannot be built, or whose workers cannot start,
keeps the old model and its copy serving, and the watcher goes on."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

from hetflow.runtime.artifact_copies import ArtifactCopies
from hetflow.runtime.batching import BatchCollector
from hetflow.runtime.reloader import ArtifactReloader


def artifact(path, value):
    path.mkdir(exist_ok=True)
    (path / "value.txt").write_text(value)
    (path / "meta.json").write_text("{}")
    return path


def read_value(spec):
    value = (Path(spec["artifact"]) / "value.txt").read_text()
    if value == "broken":
        raise ValueError("a broken model")
    return value


class Setup:
    def __init__(self, tmp_path, start_pool=None):
        self.live = artifact(tmp_path / "live", "1")
        self.copies = ArtifactCopies("test", tmp_path / "serving")
        self.first = self.copies.take(self.live)
        self.copies.serve(self.first)
        self.serving = concurrent.futures.ThreadPoolExecutor(1)
        self.collector = BatchCollector(lambda items: items, 4, 0.0, self.serving)
        self.swapped, self.started = [], []

        async def start(spec):
            self.started.append(spec)
            return concurrent.futures.ThreadPoolExecutor(1)

        self.reloader = ArtifactReloader(self.live, 0.0, self.collector, self.copies, {"artifact": str(self.first)},
                                         read_value, start_pool or start, lambda spec: None, self.swapped.append,
                                         ArtifactReloader.mtime_of(self.live))

    def copies_on_disk(self):
        return sorted(p.name for p in self.first.parent.iterdir() if p.is_dir())

    async def close(self):
        await self.collector.close()
        self.collector.executor.shutdown()
        self.serving.shutdown()
        self.copies.close()


async def test_a_reload_serves_a_copy_of_the_new_artifact_and_removes_the_old_copy(tmp_path):
    setup = Setup(tmp_path)
    try:
        artifact(setup.live, "2")
        assert await setup.reloader.reload() is True
        served = setup.copies.served
        assert served is not None and served != setup.first and (served / "value.txt").read_text() == "2"
        assert setup.started == [{"artifact": str(served)}] and setup.swapped == ["2"]
        assert setup.copies_on_disk() == [served.name] and setup.collector.executor is not setup.serving
        (setup.live / "value.txt").write_text("3")  # the live artifact changes after: the copy does not
        assert (served / "value.txt").read_text() == "2"
    finally:
        await setup.close()
    assert not setup.first.parent.exists()


async def test_a_rejected_artifact_leaves_the_old_model_and_its_copy(tmp_path):
    setup = Setup(tmp_path)
    try:
        artifact(setup.live, "broken")
        assert await setup.reloader.reload() is False
        assert setup.copies.served == setup.first and setup.copies_on_disk() == [setup.first.name]
        assert setup.started == [] and setup.swapped == [] and setup.collector.executor is setup.serving
    finally:
        await setup.close()


async def test_workers_that_cannot_start_leave_the_old_model_and_its_copy(tmp_path):
    async def dead(spec):
        raise concurrent.futures.BrokenExecutor("a worker died as it started")

    setup = Setup(tmp_path, start_pool=dead)
    try:
        artifact(setup.live, "2")
        assert await setup.reloader.reload() is False
        assert setup.copies.served == setup.first and setup.copies_on_disk() == [setup.first.name]
        assert setup.swapped == [] and setup.reloader.reloads == 0 and setup.collector.executor is setup.serving
    finally:
        await setup.close()

"""A reload whose new workers cannot start keeps the old model serving, and the watcher goes on."""

from __future__ import annotations

import concurrent.futures

from hetflow.runtime.batching import BatchCollector
from hetflow.runtime.reloader import ArtifactReloader


class DeadPool(concurrent.futures.Executor):
    """A worker pool whose workers die as they start (a model that cannot load in them)."""

    def __init__(self) -> None:
        self.shut = False

    def submit(self, fn, /, *args, **kwargs):
        raise concurrent.futures.BrokenExecutor("a worker died as it started")

    def shutdown(self, wait=True, *, cancel_futures=False):
        self.shut = True


async def test_a_pool_that_cannot_start_leaves_the_old_model_and_is_shut_down(tmp_path):
    serving = concurrent.futures.ThreadPoolExecutor(1)
    collector = BatchCollector(lambda items: items, 4, 0.0, serving)
    dead, swapped = DeadPool(), []
    reloader = ArtifactReloader(tmp_path / "meta.json", 0.0, collector, validate=lambda: "model-2",
                                make_pool=lambda: dead, on_swap=swapped.append)
    assert await reloader.reload() is False
    assert dead.shut and swapped == [] and reloader.reloads == 0 and collector._executor is serving
    serving.shutdown()

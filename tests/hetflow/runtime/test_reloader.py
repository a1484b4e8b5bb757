"""A reload whose new workers cannot start keeps the old model serving, and the watcher goes on; a reload
builds its model off the event loop, in worker processes or (with 0 workers) in a thread."""

from __future__ import annotations

import concurrent.futures
import threading

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


async def test_a_pool_built_in_this_process_is_built_off_the_event_loop(tmp_path):
    """With ``workers: 0`` making the pool builds the model here (``process_pool``): not on the loop."""
    serving = concurrent.futures.ThreadPoolExecutor(1)
    collector = BatchCollector(lambda items: items, 4, 0.0, serving)
    built_on, swapped = [], []

    def make_pool():
        built_on.append(threading.get_ident())
        return concurrent.futures.ThreadPoolExecutor(1)

    reloader = ArtifactReloader(tmp_path / "meta.json", 0.0, collector, validate=lambda: "model-2",
                                make_pool=make_pool, on_swap=swapped.append)
    assert await reloader.reload() is True
    assert built_on != [threading.get_ident()] and len(built_on) == 1 and swapped == ["model-2"]
    await collector.close()
    collector._executor.shutdown()
    serving.shutdown()

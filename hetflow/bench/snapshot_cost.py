"""What a decision's snapshot costs the monitor and the balancer, by the number of engines, with and without
the balancer's watch of the engines (issue 63; ``Monitor.WatchEngines``).

In one process, over a monitor state of ``N`` engines each with ``--calls-per-engine`` calls in flight:

- whole: the monitor builds and serialises the call's snapshot with every engine's view (what a decision
  asked before the watch), and the balancer parses it and converts every engine;
- own part: the monitor builds and serialises the call's own part (``without_engines``) and the balancer
  parses it and joins it to the watched views;
- one look of the watch: the monitor builds every engine's view and sends the one an admit changed, and
  the balancer converts it (per look, whatever the decision rate: at most one per watch interval).

CPU microseconds each (``time.process_time``), the median of ``--repeats`` rounds.

    python -m hetflow.bench.snapshot_cost [--engines 16,64,256] [--calls-per-engine 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

from hetflow import wire
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2
from monitor_svc.engine_feed import EngineFeed
from monitor_svc.servicer import MonitorServicer

PROFILE = EngineProfile(name="bench@gpu", model="m", gpu="gpu", prefill_ms_per_token=0.05, decode_base_ms=8.0,
                        decode_ms_per_seq=0.05, decode_ms_per_batch_token=0.001, kv_capacity_tokens=500_000,
                        block_size=16, max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=32768)
PREFIX_BLOCKS = tuple(range(1, 65))
"""A 1,024-token prompt's block hashes: what a call asks each engine's prefix match of."""


def _state(engines: int, calls_per_engine: int) -> MonitorServicer:
    state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
    now_s = time.time()
    for e in range(engines):
        state.report(EngineStatus(f"engine-{e}", model=f"m{e % 2}", address=f"10.0.0.{e}:50051", serving=True,
                                  profile=PROFILE), now_s)
        for c in range(calls_per_engine):
            state.admit(f"r{e}-{c}", f"p{e}-{c}", f"m{e % 2}", f"engine-{e}", 200.0, now_s, prompt_tokens=1000,
                        prefix_blocks=PREFIX_BLOCKS if c == 0 else ())
    return MonitorServicer(state)


def _cpu_us(work: Callable[[], object], rounds: int, repeats: int) -> float:
    """Median CPU microseconds of one ``work()``."""
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(rounds):
            work()
        samples.append(1e6 * (time.process_time() - start) / rounds)
    return round(statistics.median(samples), 1)


def _look(feed: EngineFeed, servicer: MonitorServicer) -> monitor_pb2.EngineChanges:
    message = feed.changes(servicer.state, servicer.reports, time.time())
    if message is None:
        raise RuntimeError("the watch sent nothing although an engine changed")
    return message


def measure(engines: int, calls_per_engine: int, rounds: int, repeats: int) -> dict[str, float]:
    servicer = _state(engines, calls_per_engine)
    state, profiles = servicer.state, wire.ProfileMemo()
    whole_request = monitor_pb2.SnapshotRequest(program_id="p0-0", prefix_blocks=PREFIX_BLOCKS)
    own_request = monitor_pb2.SnapshotRequest(program_id="p0-0", prefix_blocks=PREFIX_BLOCKS, without_engines=True)
    feed = EngineFeed(in_flight_calls=False)
    views = tuple(wire.engine_view_from_proto(load, profiles) for load in _look(feed, servicer).engines)

    def whole() -> object:
        state.version += 1  # a decision's snapshot follows an admit or a release: the views are built anew
        raw = servicer._snapshot(whole_request, time.time()).SerializeToString()
        return wire.snapshot_from_proto(monitor_pb2.MonitorSnapshot.FromString(raw), profiles)

    def own_part() -> object:
        state.version += 1
        raw = servicer._snapshot(own_request, time.time()).SerializeToString()
        return wire.snapshot_from_proto(monitor_pb2.MonitorSnapshot.FromString(raw), profiles, views)

    def look() -> object:
        state.engines["engine-0"].in_flight_tokens += 1.0  # one engine changed, as by an admit
        state.version += 1
        raw = _look(feed, servicer).SerializeToString()
        return [wire.engine_view_from_proto(load, profiles)
                for load in monitor_pb2.EngineChanges.FromString(raw).engines]

    return {"engines": engines, "whole_us": _cpu_us(whole, rounds, repeats),
            "own_part_us": _cpu_us(own_part, rounds, repeats), "watch_look_us": _cpu_us(look, rounds, repeats)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="16,64,256")
    parser.add_argument("--calls-per-engine", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write the rows here as JSON")
    args = parser.parse_args()
    rows = [measure(int(n), args.calls_per_engine, args.rounds, args.repeats) for n in args.engines.split(",")]
    for row in rows:
        print(f"{row['engines']} engines: whole snapshot {row['whole_us']} us, own part {row['own_part_us']} us "
              f"a decision; one look of the watch {row['watch_look_us']} us")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

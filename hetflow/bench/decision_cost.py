"""The balancer's decision cost per call with every stage on (issue 5): the wall time of
``Pipeline.decide`` in the simulator, on a 16-engine cluster at about 100 calls/s.

    python -m hetflow.bench.decision_cost [--cluster bench/clusters/a100x16.yaml] [--programs 2000]

This is the policy code alone: the stages over a snapshot. The gRPC hops of the live path (snapshot,
router, predictor, admit) are measured by ``hetflow.bench.overhead``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from hetflow.bench.cluster import cluster_from_stack, models_of
from hetflow.bench.common import write
from hetflow.core.presets import resolve
from hetflow.core.stats import percentile
from hetflow.runtime.config import load_stack
from hetflow.workloads.generate import generate
from simulator.run import Simulation
from simulator.signals import Signals


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", default="bench/clusters/a100x16.yaml")
    p.add_argument("--programs", type=int, default=2000)
    p.add_argument("--rate", type=float, default=14.5, help="text-to-SQL programs/s (~6.9 calls each)")
    p.add_argument("--policies", default="least-load,chimera,hetflow")
    args = p.parse_args(argv)
    raw = load_stack(Path(args.cluster))
    engines = cluster_from_stack(raw)
    records = generate("sql", args.programs, 1, models_of(engines), rate_per_s=args.rate)
    calls_per_s = len(records) / max(r.arrival_s for r in records)
    rows = []
    for name in args.policies.split(","):
        preset = resolve(name)
        sim = Simulation.from_preset(engines, preset, Signals("prior", "oracle", dict(raw["router"]["models"])),
                                     slo_scales={"*": 5.0})
        started = time.perf_counter()
        sim.run(records)
        d = sim.decision_ms
        rows.append({"policy": name, "engines": len(engines), "calls": len(d), "offered_calls_per_s": calls_per_s,
                     "decision_ms": {"p50": percentile(d, 0.5), "p99": percentile(d, 0.99), "mean": statistics.mean(d)},
                     "held": sim.held, "wall_s": time.perf_counter() - started})
        print(f"{name:12s} {len(engines)} engines, {len(d)} calls at {calls_per_s:.0f} calls/s offered: decision "
              f"p50 {rows[-1]['decision_ms']['p50']:.3f} ms, P99 {rows[-1]['decision_ms']['p99']:.3f} ms")
    print(f"-> {write('decision_cost', {'command': 'python -m hetflow.bench.decision_cost', 'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

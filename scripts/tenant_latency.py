"""Latency per tenant of one fixed-load run of a sweep (docs/results.md, "Text-to-SQL in HexGen-Flow's
setting"): the run the sweep's results quote, simulated again as the sweep runs it, its P95 and mean
latency split by tenant (the results keep each tenant's deadline attainment, not its latencies).

    python scripts/tenant_latency.py --sweep bench/sweeps/frontier-sql.yaml --seed 3 \
        --rate 15.471159342420243 --policies hetflow,llm-d-precise-profile

``--rate``: the run's ``rate_per_s`` as the results file gives it, to the digit (a rounded rate is
another run). Reads the learned signals from ``bench_out/cache`` as the sweep does.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections import defaultdict
from pathlib import Path

from hetflow.bench.sweep import Sweep, SweepSpec, at_rate, simulation
from hetflow.bench.sweep_cli import learned_source
from hetflow.core.presets import resolve
from hetflow.core.stats import percentile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, type=Path)
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--rate", required=True, type=float, help="programs per second, as the results give it")
    parser.add_argument("--policies", required=True, help="comma-separated settings of the sweep")
    args = parser.parse_args()
    spec = SweepSpec.from_yaml(args.sweep)
    spec = dataclasses.replace(spec, seeds=(args.seed,))
    sweep = Sweep(spec, learned_source(spec), workers=1)
    for policy in args.policies.split(","):
        sim = simulation(sweep.engines, resolve(policy), sweep.signals[args.seed], spec.slo_scales,
                         identity=spec.identity)
        results = sim.run(at_rate(sweep.traces[args.seed], args.rate), isolated_s=sweep.isolated_s(args.seed))
        by_tenant: dict[str, list[float]] = defaultdict(list)
        for result in results:
            by_tenant[result.tenant].append(result.latency_s)
        every = [x for latencies in by_tenant.values() for x in latencies]
        tenants = ", ".join(f"{tenant} P95 {percentile(lat, 0.95):.1f} s mean {statistics.mean(lat):.1f} s"
                            for tenant, lat in sorted(by_tenant.items()))
        print(f"{policy}: P95 {percentile(every, 0.95):.1f} s; {tenants}", flush=True)


if __name__ == "__main__":
    main()

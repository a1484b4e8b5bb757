"""``hetflow simulate``: replay a trace on the cluster a stack config describes, in virtual time."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from balancer_svc.config import from_stack as balancer_config
from engine_svc.config import from_stack as engine_config
from engine_svc.model.profile import load_profile
from hetflow.config import load_stack
from hetflow.workloads.trace import read_jsonl
from simulator.metrics import summarize
from simulator.run import EngineSpec, Simulation
from simulator.signals import Signals


def cluster_from_stack(raw: dict) -> list[EngineSpec]:
    specs = []
    for entry in raw.get("engines", []):
        cfg = engine_config(raw, entry["name"])
        profile = load_profile(cfg.profile)
        specs.append(EngineSpec(cfg.name, cfg.model or profile.model, profile))
    return specs


def run(args: argparse.Namespace) -> int:
    raw = load_stack(Path(args.config))
    policy = balancer_config(raw).policy
    if args.policy != "chimera":
        policy = type(policy)(model=args.policy, model_params={}, priority="fcfs", engine=args.policy)
    elif args.latency_slack is not None:
        policy = type(policy)(**{**policy.__dict__, "model_params": {**policy.model_params,
                                                                       "latency_slack": args.latency_slack}})
    signals = Signals(args.router, args.predictor, dict(raw.get("router", {}).get("models", {})))
    records = list(read_jsonl(Path(args.trace)))
    started = time.perf_counter()
    sim = Simulation(cluster_from_stack(raw), policy, signals)
    summary = summarize(sim.run(records))
    summary["simulated_in_s"] = time.perf_counter() - started
    summary["rejected_calls"] = len(sim.rejected)
    print(json.dumps(summary, indent=2))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="replay a trace on a simulated cluster, in virtual time")
    p.add_argument("--trace", required=True)
    p.add_argument("-c", "--config", default="examples/local-sim.yaml", help="stack config: engines, policy, priors")
    p.add_argument("--router", choices=["prior", "oracle"], default="prior",
                   help="confidence: the config's fixed priors, or the trace's correctness (oracle router)")
    p.add_argument("--predictor", choices=["oracle", "oracle-own", "input-length"], default="oracle")
    p.add_argument("--policy", choices=["chimera", "least-load", "round-robin"], default="chimera",
                   help="chimera: the config's policy; the others: baselines with FCFS engine queues")
    p.add_argument("--latency-slack", type=float, help="override Chimera's tau")
    p.set_defaults(fn=run)

"""``hetflow simulate``: replay a trace on the cluster a stack config describes, in virtual time."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from balancer_svc.config import from_stack as balancer_config
from hetflow.bench.cluster import cluster_from_stack
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.presets import PRESETS, resolve
from hetflow.core.trace import read_jsonl
from hetflow.runtime.config import load_stack
from simulator.metrics import summarize
from simulator.run import IDENTITIES, Simulation
from simulator.signals import CONFIDENCE_SOURCES, PREDICTION_SOURCES, Signals


def run(args: argparse.Namespace) -> int:
    raw = load_stack(Path(args.config))
    signals = Signals(args.router, args.predictor, dict(raw.get("router", {}).get("models", {})))
    if args.router == "learned" or args.predictor == "learned":
        raise SystemExit("learned signals need artifacts: use `hetflow bench`, which computes and caches them")
    records = list(read_jsonl(Path(args.trace)))
    if not records:
        raise ValueError(f"{args.trace} holds no calls")
    engines = cluster_from_stack(raw)
    missing = sorted({e.model for e in engines if any(e.model not in r.output_tokens for r in records)})
    if missing:
        raise ValueError(f"the trace has no lengths for {', '.join(missing)}, which {args.config} serves: generate "
                         f"it for the cluster's models (hetflow workload generate --models ...)")
    started = time.perf_counter()
    options = {"decode_runs": not args.reference, "identity": args.identity}
    sim = (Simulation.from_preset(engines, resolve(args.policy), signals, **options) if args.policy
           else Simulation(engines, balancer_config(raw).policy, signals, QueueConfig(), **options))
    summary = summarize(sim.run(records), sim.decision_ms)
    summary["simulated_in_s"] = time.perf_counter() - started
    summary["rejected_calls"] = len(sim.rejected)
    summary["prefix_hit_rate"] = sim.prefix_hit_rate
    summary["router_asked_share"] = sim.router_asked_share
    summary["router_changed_share"] = sim.router_changed_share
    print(json.dumps(summary, indent=2))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="replay a trace on a simulated cluster, in virtual time")
    p.add_argument("--trace", required=True)
    p.add_argument("-c", "--config", default="examples/local-sim.yaml", help="stack config: engines, policy, priors")
    p.add_argument("--router", choices=[s for s in CONFIDENCE_SOURCES if s != "learned"], default="prior",
                   help="confidence: the config's fixed priors; the trace's answers (oracle), the probabilities "
                        "they were drawn with (probability) or those from what the prompt shows (visible-probability)")
    p.add_argument("--predictor", choices=[s for s in PREDICTION_SOURCES if s != "learned"], default="oracle")
    p.add_argument("--policy", help=f"a named policy ({', '.join(PRESETS)}; e.g. chimera:latency_slack=1.0); "
                                    "default: the config's balancer policy")
    p.add_argument("--reference", action="store_true",
                   help="step every engine iteration, the reference mode; by default runs of pure decode "
                        "iterations are one event (the same results, docs/simulator-speed.md)")
    p.add_argument("--identity", choices=IDENTITIES, default="full",
                   help="what each call tells of its place: full (program, agent, upstream, stages) or session "
                        "(program and agent: stages inferred, as for an agent framework; needs --predictor "
                        "input-length)")
    p.set_defaults(fn=run)

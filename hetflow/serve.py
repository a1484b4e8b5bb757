"""The composition root: builds a service from the stack config with what it needs from outside its
package, and serves it until SIGTERM.

``hetflow serve SERVICE -c STACK.yaml [--name ENGINE]``, the supervisor and the images start every
service through here. A service package imports only the core (``hetflow.core``), the contracts
(``hetflow.v1``, ``hetflow.wire``) and the runtime; what it needs beyond them is handed in here: the
balancer's alpha tuner gets the simulator's replay (HexGen-Flow 4.3).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from hetflow.runtime.config import load_stack
from hetflow.runtime.server import ServeConfig, run, serve_until_signal


@dataclass(frozen=True)
class BuiltService:
    log_name: str
    serve: ServeConfig
    setup: Callable[[], Awaitable[Any]] | None = None
    """A gRPC service's setup (its registrations and close)."""
    asgi_app: Any = None
    """An HTTP service's ASGI app (the gateway), served on uvicorn instead."""


def _monitor(raw: Mapping[str, Any], name: str | None) -> BuiltService:
    from monitor_svc.app import build
    from monitor_svc.config import from_stack

    cfg = from_stack(raw)
    return BuiltService("monitor", cfg.serve, build(cfg)[1])


def _router(raw: Mapping[str, Any], name: str | None) -> BuiltService:
    from router_svc.app import build
    from router_svc.config import from_stack

    cfg = from_stack(raw)
    return BuiltService("router", cfg.serve, build(cfg))


def _predictor(raw: Mapping[str, Any], name: str | None) -> BuiltService:
    from predictor_svc.app import build
    from predictor_svc.config import from_stack

    cfg = from_stack(raw)
    return BuiltService("predictor", cfg.serve, build(cfg))


def _balancer(raw: Mapping[str, Any], name: str | None, config: str = "") -> BuiltService:
    from balancer_svc.app import build
    from balancer_svc.config import from_stack
    from simulator.tuning import replay_best_alpha

    cfg = from_stack(raw)
    reload = (lambda: from_stack(load_stack(config))) if config else None
    return BuiltService("balancer", cfg.serve, build(cfg, alpha_replay=replay_best_alpha, reload=reload))


def _engine(raw: Mapping[str, Any], name: str | None) -> BuiltService:
    from engine_svc.app import build
    from engine_svc.config import from_stack

    if not name:
        raise ValueError("an engine needs --name: its entry in the config's engines list")
    cfg = from_stack(raw, name)
    return BuiltService(f"engine:{cfg.name}", cfg.serve, build(cfg)[1])


def _gateway(raw: Mapping[str, Any], name: str | None) -> BuiltService:
    from gateway_svc.app import build
    from gateway_svc.config import from_stack

    cfg = from_stack(raw)
    return BuiltService("gateway", cfg.serve, asgi_app=build(cfg))


def _vllm_sim(raw: Mapping[str, Any], name: str | None) -> BuiltService:
    from engine_svc.vllm_sim.app import build
    from engine_svc.vllm_sim.config import from_stack

    if not name:
        raise ValueError("a vllm-sim server needs --name: its entry in the config's vllm_sim list")
    cfg = from_stack(raw, name)
    return BuiltService(f"vllm-sim:{cfg.name}", cfg.serve, asgi_app=build(cfg)[1])


SERVICES: dict[str, tuple[str, Callable[[Mapping[str, Any], str | None], BuiltService]]] = {
    "monitor": ("hetflow activity monitor (Chimera 3.5)", _monitor),
    "router": ("hetflow semantic router (Chimera 3.3)", _router),
    "predictor": ("hetflow remaining-length predictor (Chimera 3.4)", _predictor),
    "balancer": ("hetflow load balancer (Chimera 3.6, HexGen-Flow 4, Kairos 6)", _balancer),
    "engine": ("hetflow engine service: a backend behind hetflow's queue (Chimera 3.7)", _engine),
    "gateway": ("hetflow OpenAI-compatible HTTP gateway in front of the balancer", _gateway),
    "vllm-sim": ("a simulated GPU engine behind vLLM 0.32's OpenAI server surface", _vllm_sim),
}


def build_service(service: str, raw: Mapping[str, Any], name: str | None = None, config: str = "") -> BuiltService:
    """``config``: the stack file ``raw`` came from, which the balancer reads again on SIGHUP."""
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}; known: {', '.join(SERVICES)}")
    if service == "balancer":
        return _balancer(raw, name, config)
    return SERVICES[service][1](raw, name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("service", choices=sorted(SERVICES))
    parser.add_argument("-c", "--config", required=True, help="stack YAML")
    parser.add_argument("--name", help="engine name in the config's engines list (engines), or server name in its "
                        "vllm_sim list (vllm-sim)")
    parser.add_argument("--check", action="store_true",
                        help="build the service from the config (imports, configuration, plugins) and exit "
                             "without serving")


def serve(args: argparse.Namespace) -> int:
    built = build_service(args.service, load_stack(args.config), args.name, args.config)
    if args.check:
        print(f"{built.log_name}: builds; would serve on {built.serve.host}:{built.serve.port}")
        return 0
    if built.asgi_app is not None:
        from hetflow.runtime.http_server import serve_asgi_until_signal

        run(serve_asgi_until_signal(built.log_name, built.serve, built.asgi_app))
    else:
        assert built.setup is not None
        run(serve_until_signal(built.log_name, built.serve, built.setup))
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hetflow-serve", description="Serve one hetflow service. Services: "
                                     + "; ".join(f"{k}: {v[0]}" for k, v in SERVICES.items()))
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        raise SystemExit(serve(args))
    except (ValueError, FileNotFoundError) as exc:  # a config error: one line in the service's log
        print(f"hetflow serve {args.service}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()

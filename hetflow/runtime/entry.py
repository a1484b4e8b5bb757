"""The ``python -m <service>`` entry point every service shares."""

from __future__ import annotations

import argparse
from typing import Any, Awaitable, Callable, Mapping

from hetflow.runtime.config import load_stack
from hetflow.runtime.server import run, serve_until_signal


def service_main(prog: str, description: str, from_stack: Callable[..., Any],
                 build_setup: Callable[[Any], Callable[[], Awaitable[Any]]], argv: list[str] | None,
                 named: bool = False) -> None:
    """Parse ``--config`` (and ``--name`` for engines), build the service's config, serve until SIGTERM."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-c", "--config", required=True, help="stack YAML")
    if named:
        parser.add_argument("--name", required=True, help="engine name in the config's engines list")
    args = parser.parse_args(argv)
    raw: Mapping[str, Any] = load_stack(args.config)
    cfg = from_stack(raw, args.name) if named else from_stack(raw)
    service = f"{prog.removesuffix('_svc')}:{cfg.name}" if named else prog.removesuffix("_svc")
    run(serve_until_signal(service, cfg.serve, build_setup(cfg)))

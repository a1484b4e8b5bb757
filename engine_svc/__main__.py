"""python -m engine_svc --config STACK.yaml --name ENGINE"""

from __future__ import annotations

import argparse

from engine_svc.app import build
from engine_svc.config import from_stack
from hetflow.config import load_stack
from hetflow.runtime.server import run, serve_until_signal


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="engine_svc", description="hetflow engine service")
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--name", required=True, help="engine name in the config's engines list")
    args = parser.parse_args(argv)
    cfg = from_stack(load_stack(args.config), args.name)
    _, setup = build(cfg)
    run(serve_until_signal(f"engine:{cfg.name}", cfg.serve, setup))


if __name__ == "__main__":
    main()

"""python -m router_svc --config STACK.yaml"""

from __future__ import annotations

import argparse

from hetflow.config import load_stack
from hetflow.runtime.server import run, serve_until_signal
from router_svc.app import build
from router_svc.config import from_stack


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="router_svc", description="hetflow semantic router")
    parser.add_argument("-c", "--config", required=True)
    args = parser.parse_args(argv)
    cfg = from_stack(load_stack(args.config))
    run(serve_until_signal("router", cfg.serve, build(cfg)))


if __name__ == "__main__":
    main()

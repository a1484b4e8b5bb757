"""python -m balancer_svc --config STACK.yaml"""

from __future__ import annotations

import argparse

from balancer_svc.app import build
from balancer_svc.config import from_stack
from hetflow.config import load_stack
from hetflow.runtime.server import run, serve_until_signal


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="balancer_svc", description="hetflow load balancer")
    parser.add_argument("-c", "--config", required=True)
    args = parser.parse_args(argv)
    cfg = from_stack(load_stack(args.config))
    run(serve_until_signal("balancer", cfg.serve, build(cfg)))


if __name__ == "__main__":
    main()

"""python -m monitor_svc --config STACK.yaml"""

from __future__ import annotations

import argparse

from hetflow.config import load_stack
from hetflow.runtime.server import run, serve_until_signal
from monitor_svc.app import build
from monitor_svc.config import from_stack


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="monitor_svc", description="hetflow activity monitor")
    parser.add_argument("-c", "--config", required=True)
    args = parser.parse_args(argv)
    cfg = from_stack(load_stack(args.config))
    _, setup = build(cfg)
    run(serve_until_signal("monitor", cfg.serve, setup))


if __name__ == "__main__":
    main()

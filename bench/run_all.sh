#!/usr/bin/env bash
# The sweeps behind docs/results.md, one after another (each uses both cores).
set -euo pipefail
cd "$(dirname "$0")/.."
for sweep in sharegpt-chains homo-chat hetero-code hetero-math; do
  .venv/bin/python -m hetflow.cli bench --sweep "bench/sweeps/$sweep.yaml" | tee "bench_out/$sweep.md"
done

#!/usr/bin/env bash
# The sweeps behind docs/results.md, one after another (each uses both cores), shortest first.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench_out
PY=${PY:-.venv/bin/python}
for sweep in hetero-code hexgen-sql-rates kairos-colocated-rates hexgen-sql kairos-colocated hetero-math homo-chat \
             sharegpt-chains; do
  "$PY" -m hetflow.cli bench --sweep "bench/sweeps/$sweep.yaml" | tee "bench_out/$sweep.md"
done
# Issue 12's capacity at SLO (each 15-50 min on 2 cores): the tuning seed, then the headline sweeps.
for sweep in tune-agent capacity-agent capacity-sharegpt; do
  "$PY" -m hetflow.cli bench --sweep "bench/sweeps/$sweep.yaml" | tee "bench_out/$sweep.md"
done

#!/usr/bin/env bash
# Every measurement docs/results.md and docs/benchmarks.md quote, from a fresh clone, one after another
# (each uses both cores; nothing else should run beside the timed ones). Hours on the 2-core
# development machine: the issue 12 capacity sweeps alone take about two.
#   bash bench/run_all.sh            everything
#   bash bench/run_all.sh sweeps     the simulator sweeps only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p bench_out
PY=${PY:-.venv/bin/python}
hetflow() { "$PY" -m hetflow.cli "$@"; }
what=${1:-all}

# Issues 4-11: the papers' settings (docs/results.md, sections before "Issue 12").
for sweep in hetero-code hexgen-sql-rates kairos-colocated-rates hexgen-sql kairos-colocated hetero-math homo-chat \
             sharegpt-chains; do
  hetflow bench --sweep "bench/sweeps/$sweep.yaml" | tee "bench_out/$sweep.md"
done

# Issue 12's tuning (docs/results.md "Issue 12"); then capacity at SLO against the rivals with issue 35's default
# beside issue 12's (docs/results.md "Issue 35"; earlier figures quote the commit that ran them).
hetflow bench --sweep bench/sweeps/tune-agent.yaml | tee bench_out/tune-agent.md
hetflow bench --sweep bench/sweeps/tune-gate.yaml | tee bench_out/tune-gate.md
hetflow bench --sweep bench/sweeps/capacity-agent-vllm-router.yaml --fractions 0.8 \
  --policies least-load,llm-d,vllm-router-program,hetflow,hetflow-issue12 | tee bench_out/capacity-agent-vllm-router.md
hetflow bench --sweep bench/sweeps/capacity-agent.yaml --fractions 0.8 \
  --policies least-load,llm-d,autellix,vllm-router-program,hetflow,hetflow-issue12 | tee bench_out/capacity-agent.md
hetflow bench --sweep bench/sweeps/capacity-agent-measured.yaml --fractions 0.8 \
  --policies least-load,llm-d,vllm-router-program,hetflow,hetflow-issue12 | tee bench_out/capacity-agent-measured.md
hetflow bench --sweep bench/sweeps/capacity-code.yaml --fractions 0.8 --policies least-load,llm-d,hetflow,hetflow-issue12 \
  | tee bench_out/capacity-code.md
hetflow bench --sweep bench/sweeps/herding-agent-h100x4.yaml | tee bench_out/herding-agent-h100x4.md
hetflow bench --sweep bench/sweeps/p95-agent-vllm-router.yaml | tee bench_out/p95-agent-vllm-router.md
hetflow bench --sweep bench/sweeps/program-order-sql.yaml | tee bench_out/program-order-sql.md
hetflow bench --sweep bench/sweeps/capacity-kairos.yaml --fractions 0.8 --policies least-load,llm-d,kairos,hetflow \
  | tee bench_out/capacity-kairos.md
hetflow bench --sweep bench/sweeps/capacity-sql.yaml --fractions 0.8 --policies least-load,llm-d,hexgen,hetflow \
  | tee bench_out/capacity-sql.md
[ "$what" = sweeps ] && exit 0

# Timed measurements: the machine otherwise idle.
"$PY" -m hetflow.bench.decision_cost | tee bench_out/decision_cost.md
hetflow profile --fidelity | tee bench_out/fidelity.md
make bench-overhead | tee bench_out/overhead.md
make bench-vllm-tokens | tee bench_out/vllm_tokens.md
"$PY" -m hetflow.bench.gateway_cost --mode vllm --num-prompts 100 --request-rate inf --rounds 3 \
  | tee bench_out/gateway_cost_vllm.md
"$PY" -m hetflow.bench.gateway_cost --mode sim --num-prompts 200 --request-rate 4 --rounds 3 \
  | tee bench_out/gateway_cost_sim.md
for knobs in "--stream-interval 16 --server-cpus 0" "--stream-interval 1 --server-cpus 0" "--stream-interval 16" \
    "--stream-interval 16 --server-backlog 8"; do
  # shellcheck disable=SC2086
  "$PY" -m hetflow.bench.gateway_cost --mode vllm --num-prompts 100 --request-rate inf --rounds 3 $knobs \
    | tee -a bench_out/gateway_cost_vllm_knobs.md
done
# docs/reliability.md: faults, 3x overload and the 10-minute soak on the example stack as processes.
"$PY" -m hetflow.bench.reliability --scenario engine-kill,engine-stop,monitor-kill,overload | tee bench_out/reliability.md
"$PY" -m hetflow.bench.reliability --scenario soak --duration 600 | tee -a bench_out/reliability.md

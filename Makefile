# Two commands work on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= examples/local-sim.yaml

.PHONY: setup demo test protos bench-overhead bench-vllm-tokens clean

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) -m hetflow.cli demo -c $(CONFIG)

test: setup
	$(PY) -m pytest -q

protos:
	$(PY) -m hetflow.protogen

bench-overhead: setup
	$(PY) -m hetflow.bench.overhead -c examples/local-sim.yaml

bench-vllm-tokens: setup
	$(PY) -m hetflow.bench.vllm_tokens

clean:
	rm -rf $(VENV) build *.egg-info

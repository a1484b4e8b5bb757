# Two images from one wheel, built from pyproject.toml (so each holds exactly what the wheel declares):
#   control-plane: monitor, router, predictor, balancer, gateway, sim and vllm-server engines (no vLLM)
#   engine:        engines with backend vllm, on vLLM's official image (CUDA, vLLM and torch inside)
# `hetflow compose -c STACK.yaml` writes the compose file that builds and runs them.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.11.0

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.11-slim AS control-plane
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/hetflow-*.whl && rm -rf /wheels
WORKDIR /app
COPY examples ./examples
HEALTHCHECK NONE
ENTRYPOINT ["hetflow", "serve"]

FROM ${VLLM_IMAGE} AS engine
COPY --from=wheel /wheels /wheels
# vLLM (and its torch) come with the base image; the wheel adds hetflow and its own dependencies.
RUN python3 -m pip install --no-cache-dir /wheels/hetflow-*.whl && rm -rf /wheels
WORKDIR /app
COPY examples ./examples
ENTRYPOINT ["hetflow", "serve"]

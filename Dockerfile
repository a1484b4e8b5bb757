# One image for every hetflow service on GPU machines (upstream vLLM with CUDA).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protos ./protos
COPY hetflow ./hetflow
COPY router_svc ./router_svc
COPY predictor_svc ./predictor_svc
COPY monitor_svc ./monitor_svc
COPY balancer_svc ./balancer_svc
COPY engine_svc ./engine_svc
COPY examples ./examples
RUN pip install --no-cache-dir ".[gpu]"
ENTRYPOINT ["hetflow", "serve"]

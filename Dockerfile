# One image for every hetflow control-plane service and the engines (upstream vLLM with CUDA on GPU hosts).
# The wheel is built from pyproject.toml, so the image holds exactly the packages and data files it declares.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.11-slim
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir "$(ls /wheels/hetflow-*.whl)[gpu]" && rm -rf /wheels
WORKDIR /app
COPY examples ./examples
ENTRYPOINT ["hetflow", "serve"]

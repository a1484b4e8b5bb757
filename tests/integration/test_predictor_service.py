"""predictor_svc serving a QRF artifact: learned answers, empty batches, reload while serving."""

import asyncio
import shutil

import grpc
import pytest

from hetflow.core.trace import trace_sha256
from hetflow.runtime.server import start
from hetflow.v1 import predictor_pb2, predictor_pb2_grpc
from hetflow.workloads.generate import generate
from predictor_svc import app, artifact
from predictor_svc.config import PredictorConfig
from predictor_svc.training import train
from tests.factories import free_port

MODELS = ("qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct")


def make_artifact(path, seed):
    records = generate("code", 60, seed=seed, models=MODELS)
    model, metrics = train(records, MODELS, n_estimators=10 + 10 * seed, seed=seed)
    return artifact.save(model, path, trace_sha256(records), metrics)


ROW = predictor_pb2.FeatureRow(model=MODELS[0], workflow="code", agent="planner", stage_index=1, stage_count=4,
                               system_prompt_tokens=20, user_prompt_tokens=80, input_tokens=100,
                               user_prompt="Write a function that sorts a list of intervals.")


async def predict(address, rows):
    async with grpc.aio.insecure_channel(address) as ch:
        return await predictor_pb2_grpc.PredictorStub(ch).Predict(
            predictor_pb2.PredictRequest(rows=rows, quantiles=[0.1, 0.9]), timeout=30)


async def test_serves_learned_predictions_and_reloads_without_dropping_calls(tmp_path):
    live, staged = tmp_path / "live", tmp_path / "staged"
    make_artifact(live, seed=1)
    make_artifact(staged, seed=2)
    cfg = PredictorConfig(kind="qrf", artifact=str(live), models=MODELS, reload_poll_s=0.1)
    cfg = PredictorConfig(**{**cfg.__dict__, "serve": type(cfg.serve)(port=free_port())})
    server = await start("predictor", cfg.serve, *(await app.build(cfg)()))
    address = f"127.0.0.1:{server.port}"
    try:
        first = await predict(address, [ROW])
        assert first.predictor_kind == "qrf" and first.predictions[0].median_tokens != ROW.input_tokens
        assert len(first.predictions[0].quantile_tokens) == 2
        assert list((await predict(address, [])).predictions) == []

        async def hammer(n):
            return [await predict(address, [ROW]) for _ in range(n)]

        load = asyncio.create_task(hammer(40))
        shutil.copy(staged / "model.pkl", live / "model.pkl")
        shutil.copy(staged / "meta.json", live / "meta.json")          # meta.json last, as save() does
        replies = await load
        assert len(replies) == 40 and all(r.predictions for r in replies)
        for _ in range(100):
            now = await predict(address, [ROW])
            if now.predictions[0].median_tokens != first.predictions[0].median_tokens:
                break
            await asyncio.sleep(0.1)
        assert now.predictions[0].median_tokens != first.predictions[0].median_tokens
    finally:
        await server.stop()


def test_malformed_artifact_fails_the_start(tmp_path):
    (tmp_path / "meta.json").write_text("{broken")
    with pytest.raises(artifact.ArtifactError, match="malformed"):
        app.build(PredictorConfig(kind="qrf", artifact=str(tmp_path)))
    with pytest.raises(ValueError, match="needs predictor.artifact"):
        app.build(PredictorConfig(kind="qrf"))

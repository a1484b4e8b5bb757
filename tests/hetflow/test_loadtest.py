"""The load generator stops by itself within its bounds, and counts what happened."""

import asyncio

import grpc
import pytest

from hetflow.loadtest import run_load


async def test_stops_after_max_calls():
    calls = []

    async def call(i):
        calls.append(i)

    result = await run_load(call, rate=1000, duration_s=60, max_calls=25)
    assert result.sent == result.ok == 25 and calls == list(range(25))  # not the 60,000 the duration allows


async def test_stops_by_itself_when_every_call_hangs():
    """Calls never answer: the run still returns, shedding past max_in_flight and cancelling after the drain."""
    async def hang(i):
        await asyncio.sleep(3600)

    result = await run_load(hang, rate=200, duration_s=600, max_calls=25, drain_s=0.3, max_in_flight=10,
                            timeout_s=3600)
    assert result.sent == 10 and result.shed == 15 and result.cancelled == 10 and result.ok == 0


async def test_errors_are_counted_by_status():
    class Unavailable(grpc.aio.AioRpcError):
        def __init__(self):
            super().__init__(grpc.StatusCode.UNAVAILABLE, None, None, "down")

    async def fail(i):
        if i % 2:
            raise Unavailable()

    result = await run_load(fail, rate=500, duration_s=5, max_calls=10)
    assert result.ok == 5 and result.errors == {"UNAVAILABLE": 5}


async def test_against_a_live_monitor():
    from hetflow.loadtest import loadtest
    from hetflow.runtime.server import ServeConfig, start
    from monitor_svc import app
    from monitor_svc.config import MonitorConfig
    from tests.factories import free_port

    cfg = MonitorConfig(serve=ServeConfig(port=free_port()))
    _, setup = app.build(cfg)
    server = await start("monitor", cfg.serve, *(await setup()))
    try:
        result = await loadtest("monitor", f"127.0.0.1:{server.port}", rate=200, duration_s=600, max_calls=50)
    finally:
        await server.stop()
    assert result.ok == result.sent == 50 and not result.errors and result.summary()["latency_ms"]["p50"] > 0


def test_rejects_a_nonpositive_rate():
    with pytest.raises(ValueError):
        asyncio.run(run_load(lambda i: asyncio.sleep(0), rate=0, duration_s=1))


def test_the_command_exits_non_zero_and_writes_no_nan_when_every_call_fails(tmp_path, monkeypatch, capsys):
    import json

    from hetflow import cli
    from tests.factories import free_port

    monkeypatch.chdir(tmp_path)  # the summary goes to ./bench_out
    code = cli.main(["loadtest", "monitor", "--address", f"127.0.0.1:{free_port()}", "--max-calls", "3",
                     "--rate", "50", "--duration", "1", "--drain", "1", "--call-timeout", "1"])
    assert code == 1 and "every call failed" in capsys.readouterr().err
    summary = json.loads((tmp_path / "bench_out" / "loadtest_monitor.json").read_text(),
                         parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert summary["ok"] == 0 and summary["latency_ms"] is None and summary["errors"]

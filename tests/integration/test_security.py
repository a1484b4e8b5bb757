"""A live stack with mutual TLS and API keys (issue 14): tenants reach the balancer with their key and
nothing else; control calls need a hetflow service's certificate of the right identity; a tenant
neither joins nor claims another tenant's program; without TLS the service token does the same."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, AsyncIterator

import grpc
import pytest

from hetflow.client import HetflowClient, build_request
from hetflow.deploy.certs import security_section, write_certs
from hetflow.runtime.channels import open_channel
from hetflow.runtime.security import (
    SERVICE_IDENTITY_KEY,
    SERVICE_TOKEN_KEY,
    SecurityConfig,
    TlsConfig,
    key_digest,
    stack_security,
)
from hetflow.v1 import balancer_pb2, common_pb2, engine_pb2, engine_pb2_grpc, monitor_pb2, monitor_pb2_grpc
from tests.integration.harness import SMALL, Stack, serving_gateway, stack_config, start_stack, wait_until_idle

pytestmark = pytest.mark.slow
KEY_A, KEY_B = "key-of-team-a", "key-of-team-b"
API_KEYS = {key_digest(KEY_A): "team-a", key_digest(KEY_B): "team-b"}


def _one_engine() -> dict[str, Any]:
    return stack_config([{"name": "small-0", "profile": f"{SMALL}@a6000"}])


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    write_certs({}, out)
    return out


@pytest.fixture(scope="module")
async def stack(certs: Path) -> AsyncIterator[Stack]:
    raw = _one_engine()
    raw["security"] = {**security_section(certs), "api_keys": API_KEYS}
    running = await start_stack(raw)
    yield running
    await running.close()


def _as(certs: Path, identity: str) -> SecurityConfig:
    """A channel's security with ``identity``'s certificate ("" for none: the CA only)."""
    if not identity:
        return SecurityConfig(tls=TlsConfig(ca_file=str(certs / "ca.crt"), mutual=False))
    return SecurityConfig(identity, TlsConfig(str(certs / "ca.crt"), str(certs / "{identity}.crt"),
                                              str(certs / "{identity}.key")))


async def _code(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_a_tenant_with_its_key_is_served_over_tls_and_a_caller_without_one_is_not(stack, certs):
    ca = str(certs / "ca.crt")
    async with HetflowClient(stack.address("balancer"), api_key=KEY_A, ca_file=ca) as client:
        result = await client.complete(build_request(prompt="hi", max_tokens=4, request_id="r1"))
    assert result.output_tokens == 4 and result.request_id == "team-a/r1"
    for key in ("", "a key nobody issued"):
        async with HetflowClient(stack.address("balancer"), api_key=key, ca_file=ca) as client:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.complete(build_request(prompt="hi", max_tokens=4))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    async with HetflowClient(stack.address("balancer"), api_key=KEY_A) as plaintext:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await plaintext.complete(build_request(prompt="hi", max_tokens=4), timeout_s=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    await wait_until_idle(stack)


async def test_control_calls_need_the_certificate_of_a_service_allowed_to_make_them(stack, certs):
    engine, monitor = stack.address("small-0"), stack.address("monitor")
    fake_report = common_pb2.EngineStatus(engine_id="fake-0", model=SMALL, address="127.0.0.1:1", serving=True)
    async with open_channel(engine, _as(certs, "")) as no_cert, open_channel(engine, _as(certs, "gateway")) as gw:
        assert await _code(engine_pb2_grpc.EngineStub(no_cert).Status(engine_pb2.EngineStatusRequest(),
                                                                      timeout=5)) == grpc.StatusCode.UNAVAILABLE
        assert await _code(engine_pb2_grpc.EngineStub(gw).Abort(engine_pb2.AbortRequest(request_id="team-b/r1"),
                                                                timeout=5)) == grpc.StatusCode.PERMISSION_DENIED
    async with open_channel(monitor, _as(certs, "balancer")) as as_balancer, \
            open_channel(monitor, _as(certs, "engine")) as as_engine, \
            open_channel(monitor, _as(certs, "operator")) as as_operator:
        assert await _code(monitor_pb2_grpc.MonitorStub(as_balancer).ReportEngineStatus(
            fake_report, timeout=5)) == grpc.StatusCode.PERMISSION_DENIED  # only engines report
        for call in (monitor_pb2_grpc.MonitorStub(as_operator).Cancel(monitor_pb2.ReleaseRequest(request_id="x"),
                                                                       timeout=5),
                     monitor_pb2_grpc.MonitorStub(as_engine).GetProgram(
                         monitor_pb2.GetProgramRequest(program_id="team-b/p"), timeout=5)):
            assert await _code(call) == grpc.StatusCode.PERMISSION_DENIED
        snapshot = await monitor_pb2_grpc.MonitorStub(as_operator).Snapshot(monitor_pb2.SnapshotRequest(), timeout=5)
    assert [e.status.engine_id for e in snapshot.engines] == ["small-0"]  # the fake engine never got in


async def test_a_decision_streams_from_its_engine_only_for_its_tenant_and_through_an_allowed_service(stack, certs):
    """Under mutual TLS a tenant's calls reach engines through the gateway's certificate with the tenant's
    own key; the dispatch ticket binds the call to that tenant (issue 34)."""
    ca = str(certs / "ca.crt")
    async with HetflowClient(stack.address("balancer"), api_key=KEY_A, ca_file=ca) as client:
        decision = await client.stub.Decide(balancer_pb2.DecideRequest(call=build_request(
            prompt="hi", max_tokens=4, request_id="d1", ignore_eos=True)), timeout=5)
    assert decision.request_id == "team-a/d1" and decision.engine_id == "small-0"

    async def stream(identity: str, key: str) -> grpc.StatusCode:
        async with open_channel(decision.engine_address, _as(certs, identity), key) as channel:
            return await _code(_drain(engine_pb2_grpc.EngineStub(channel).Generate(decision.engine_request,
                                                                                   timeout=5)))

    assert await stream("gateway", KEY_B) == grpc.StatusCode.PERMISSION_DENIED  # another tenant's key
    assert await stream("monitor", "") == grpc.StatusCode.PERMISSION_DENIED  # a service that may not present it
    assert await stream("gateway", KEY_A) == grpc.StatusCode.OK
    await wait_until_idle(stack)


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


async def test_a_certificate_from_another_ca_is_refused(stack, tmp_path):
    write_certs({}, tmp_path)
    async with open_channel(stack.address("monitor"), _as(tmp_path, "operator")) as foreign:
        assert await _code(monitor_pb2_grpc.MonitorStub(foreign).Snapshot(
            monitor_pb2.SnapshotRequest(), timeout=5)) == grpc.StatusCode.UNAVAILABLE


async def test_a_tenant_can_neither_join_nor_claim_another_tenants_program(stack, certs):
    ca = str(certs / "ca.crt")
    async with HetflowClient(stack.address("balancer"), api_key=KEY_A, ca_file=ca) as a, \
            HetflowClient(stack.address("balancer"), api_key=KEY_B, ca_file=ca) as b:
        for client in (a, b):
            await client.complete(build_request(prompt="plan", max_tokens=4, program_id="p1", agent="planner"))
        with pytest.raises(grpc.aio.AioRpcError) as claimed:
            await a.complete(build_request(prompt="plan", max_tokens=4, program_id="p1", tenant="team-b"))
    assert claimed.value.code() == grpc.StatusCode.PERMISSION_DENIED
    async with open_channel(stack.address("monitor"), _as(certs, "operator")) as channel:
        monitor = monitor_pb2_grpc.MonitorStub(channel)
        for tenant in ("team-a", "team-b"):
            program = await monitor.GetProgram(monitor_pb2.GetProgramRequest(program_id=f"{tenant}/p1"), timeout=5)
            assert program.completed_requests == 1  # each tenant's p1 is its own program
        assert await _code(monitor.GetProgram(monitor_pb2.GetProgramRequest(program_id="p1"),
                                              timeout=5)) == grpc.StatusCode.NOT_FOUND
    await wait_until_idle(stack)


async def test_without_tls_the_service_token_names_hetflows_services(tmp_path):
    token = tmp_path / "service-token"
    token.write_text("a secret of this stack's\n")
    raw = _one_engine()
    raw["security"] = {"service_token_file": str(token), "api_keys": API_KEYS}
    stack = await start_stack(raw)  # engines report and are healthy: the token works between services
    try:
        async with HetflowClient(stack.address("balancer"), api_key=KEY_A) as client:
            assert (await client.complete(build_request(prompt="hi", max_tokens=4))).output_tokens == 4
        async with grpc.aio.insecure_channel(stack.address("monitor")) as channel:
            monitor = monitor_pb2_grpc.MonitorStub(channel)
            for metadata in ((), ((SERVICE_TOKEN_KEY, "a guess"), (SERVICE_IDENTITY_KEY, "engine")),
                             (("authorization", f"Bearer {KEY_A}"),)):
                code = await _code(monitor.Snapshot(monitor_pb2.SnapshotRequest(), metadata=metadata, timeout=5))
                assert code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED), metadata
    finally:
        await stack.close()


async def test_the_gateway_serves_https_to_holders_of_an_api_key_and_answers_401_to_others(stack, certs):
    import httpx
    import openai

    from tests.factories import free_port

    raw = {**stack.raw, "gateway": {"port": free_port()}}
    async with serving_gateway(raw, ssl_certfile=str(certs / "gateway.crt"),
                               ssl_keyfile=str(certs / "gateway.key")) as base_url:
        ca = ssl.create_default_context(cafile=str(certs / "ca.crt"))

        def client(key: str) -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0,
                                      http_client=httpx.AsyncClient(verify=ca))

        async with client("not a key") as stranger:
            with pytest.raises(openai.AuthenticationError):
                await stranger.models.list()
            with pytest.raises(openai.AuthenticationError):
                await stranger.chat.completions.create(model="hetflow", max_tokens=4,
                                                       messages=[{"role": "user", "content": "hi"}])
        replies = []
        for key in (KEY_B, KEY_A, KEY_B):  # the gateway decides each tenant's calls on a stream of its own
            async with client(key) as tenant:
                replies.append(await tenant.chat.completions.create(
                    model="hetflow", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                    extra_body={"hetflow": {"program_id": "gw-1"}}))
        assert [reply.usage.completion_tokens for reply in replies] == [4, 4, 4]
        await wait_until_idle(stack)  # the balancer tells the monitor of the finish after the reply
        async with open_channel(stack.address("monitor"), _as(certs, "operator")) as channel:
            monitor = monitor_pb2_grpc.MonitorStub(channel)
            programs = {tenant: await monitor.GetProgram(monitor_pb2.GetProgramRequest(program_id=f"{tenant}/gw-1"),
                                                         timeout=5) for tenant in ("team-a", "team-b")}
        # the gateway's caller is the key's tenant
        assert programs["team-b"].completed_requests == 2 and programs["team-a"].completed_requests == 1
    await wait_until_idle(stack)


async def test_the_live_workload_with_its_prompts_is_for_operators_only(tmp_path):
    token = tmp_path / "service-token"
    token.write_text("a secret of this stack's\n")
    raw = _one_engine()
    raw["security"] = {"service_token_file": str(token), "api_keys": API_KEYS}
    stack = await start_stack(raw)
    try:
        async with HetflowClient(stack.address("balancer"), api_key=KEY_A) as tenant:
            await tenant.complete(build_request(prompt="a private prompt", max_tokens=2))
            assert await _code(tenant.stub.Workload(balancer_pb2.WorkloadRequest(), timeout=5)) == \
                grpc.StatusCode.PERMISSION_DENIED
        async with HetflowClient(stack.address("balancer"), security=stack_security(raw, "operator")) as operator:
            workload = await operator.stub.Workload(balancer_pb2.WorkloadRequest(), timeout=5)
        assert [s.prompt for s in workload.samples] == ["a private prompt"]
    finally:
        await stack.close()

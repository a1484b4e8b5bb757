"""Who may call what, without a server (hetflow.runtime.security)."""

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2

from hetflow.runtime.security import (
    ACCESS,
    ANONYMOUS,
    ANYONE,
    SERVICE_IDENTITY_KEY,
    SERVICE_TOKEN_KEY,
    Caller,
    PermissionDenied,
    SecurityConfig,
    TlsConfig,
    Unauthenticated,
    authorize,
    identify,
    key_digest,
    stack_security,
)
from hetflow.v1 import balancer_pb2, engine_pb2, monitor_pb2, predictor_pb2, router_pb2

KEYS = SecurityConfig(api_keys={key_digest("k-a"): "team-a"})
TOKEN = SecurityConfig(service_token_file="unused", api_keys=KEYS.api_keys)


def test_every_rpc_of_every_hetflow_service_says_who_may_call_it():
    methods = {f"/{s.full_name}/{m.name}" for module in (balancer_pb2, engine_pb2, monitor_pb2, predictor_pb2,
                                                          router_pb2, external_processor_pb2)
               for s in module.DESCRIPTOR.services_by_name.values() for m in s.methods}
    assert methods == set(ACCESS)


def test_with_security_off_anyone_may_call_anything():
    assert identify({}, "", SecurityConfig(), "") is ANYONE
    authorize("/hetflow.v1.Engine/Abort", ANYONE)


def test_an_api_key_names_its_tenant_and_an_unknown_or_missing_one_is_refused():
    assert identify({"authorization": "Bearer k-a"}, "", KEYS, "") == Caller("tenant", "team-a")
    for metadata in ({"authorization": "Bearer k-b"}, {"authorization": "k-a"}, {}):
        with pytest.raises(Unauthenticated):
            identify(metadata, "", KEYS, "")


def test_a_certificate_names_a_service_but_a_forwarded_api_key_makes_the_tenant_the_caller():
    assert identify({}, "balancer", KEYS, "") == Caller("service", "balancer")
    assert identify({"authorization": "Bearer k-a"}, "gateway", KEYS, "") == Caller("tenant", "team-a")
    with pytest.raises(Unauthenticated):
        identify({}, "someone-else", KEYS, "")  # a common name that is no hetflow identity


def test_the_service_token_must_match_and_name_an_identity():
    good = {SERVICE_TOKEN_KEY: "s3cret", SERVICE_IDENTITY_KEY: "engine"}
    assert identify(good, "", TOKEN, "s3cret") == Caller("service", "engine")
    for metadata in ({**good, SERVICE_TOKEN_KEY: "guess"}, {**good, SERVICE_IDENTITY_KEY: "root"}):
        with pytest.raises(Unauthenticated):
            identify(metadata, "", TOKEN, "s3cret")


@pytest.mark.parametrize("method, caller", [
    ("/hetflow.v1.Engine/Abort", Caller("tenant", "team-a")),
    ("/hetflow.v1.Engine/Status", Caller("tenant", "team-a")),
    ("/hetflow.v1.Monitor/GetProgram", Caller("tenant", "team-a")),
    ("/hetflow.v1.Monitor/Cancel", Caller("service", "gateway")),
    ("/hetflow.v1.Monitor/ReportEngineStatus", Caller("service", "balancer")),
    ("/hetflow.v1.Monitor/Admit", Caller("service", "router")),
    ("/hetflow.v1.Monitor/Complete", Caller("tenant", "team-a")),
    ("/hetflow.v1.Engine/Generate", Caller("service", "monitor")),
    ("/hetflow.v1.Unknown/Call", Caller("service", "balancer")),
])
def test_control_calls_are_refused_to_callers_not_allowed_them(method, caller):
    with pytest.raises(PermissionDenied):
        authorize(method, caller)


def test_tenants_may_call_the_balancer_and_anyone_health():
    authorize("/hetflow.v1.Balancer/Generate", Caller("tenant", "team-a"))
    authorize("/grpc.health.v1.Health/Check", Caller("tenant", "team-a"))
    authorize("/hetflow.v1.Monitor/ReportEngineStatus", Caller("service", "engine"))


def test_bad_security_sections_are_errors_naming_what_is_wrong():
    with pytest.raises(ValueError, match="ca_file"):
        stack_security({"security": {"tls": {"cert_file": "x"}}}, "monitor")
    with pytest.raises(ValueError, match="unknown setting"):
        stack_security({"security": {"tls": {"ca_file": "ca", "certfile": "x"}}}, "monitor")
    with pytest.raises(ValueError, match="SHA-256"):
        stack_security({"security": {"api_keys": {"plain-key": "team-a"}}}, "balancer")
    with pytest.raises(ValueError, match="identity"):
        stack_security({}, "root")


def test_without_api_keys_a_caller_with_no_credentials_may_call_the_balancer_and_nothing_else():
    mutual = SecurityConfig(tls=TlsConfig(ca_file="ca", cert_file="c", key_file="k"))
    caller = identify({}, "", mutual, "")
    assert caller == ANONYMOUS
    authorize("/hetflow.v1.Balancer/Complete", caller)
    with pytest.raises(PermissionDenied):
        authorize("/hetflow.v1.Monitor/Snapshot", caller)


def test_under_mutual_tls_the_operator_and_the_gateway_reach_the_balancer_by_the_service_token(tmp_path):
    """The balancer asks no client certificate: the token the operator's and Envoy's channels carry is how
    it knows them, for ``Workload`` and ``Process``."""
    from hetflow.runtime.security import call_metadata

    (tmp_path / "token").write_text("s3cret\n")
    mutual = TlsConfig(ca_file="ca.crt", cert_file="operator.crt", key_file="operator.key", mutual=True)
    operator = SecurityConfig(tls=mutual, service_token_file=str(tmp_path / "token"), identity="operator")
    sent = dict(call_metadata(operator))
    assert sent == {SERVICE_TOKEN_KEY: "s3cret", SERVICE_IDENTITY_KEY: "operator"}
    balancer = SecurityConfig(tls=mutual, service_token_file=str(tmp_path / "token"), identity="balancer")
    caller = identify(sent, "", balancer, "s3cret")  # no certificate reaches the balancer
    authorize("/hetflow.v1.Balancer/Workload", caller)
    gateway = identify(dict(call_metadata(SecurityConfig(tls=mutual, service_token_file=str(tmp_path / "token"),
                                                         identity="gateway"))), "", balancer, "s3cret")
    authorize("/envoy.service.ext_proc.v3.ExternalProcessor/Process", gateway)

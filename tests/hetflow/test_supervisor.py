"""The supervisor's plan of a stack: how long each service may take to stop, and what a reload cannot
apply."""

from __future__ import annotations

from hetflow.runtime.server import CLOSE_MARGIN_S, DRAIN_NOTICE_MAX_S, STREAMING_GRACE_S, ServeConfig
from hetflow.supervisor import Supervisor, plan, stop_grace_s

STACK = {"monitor": {"port": 1}, "balancer": {"port": 2, "cascade": None, "policy": {"model": "chimera"}},
         "gateway": {"port": 3, "serve": {"grace_s": 60.0}},
         "engines": [{"name": "e0", "port": 4}, {"name": "e1", "port": 5, "grace_s": 90.0, "not_serving_s": 2.0}]}


def test_each_service_may_take_its_drain_to_stop_and_the_token_carriers_drain_longer():
    stop = {svc.name: stop_grace_s(STACK, svc) for svc in plan(STACK)}
    base = DRAIN_NOTICE_MAX_S + ServeConfig.not_serving_s + CLOSE_MARGIN_S
    assert stop["monitor"] == stop["balancer"] == base + ServeConfig.grace_s
    assert stop["engine:e0"] == base + STREAMING_GRACE_S
    assert stop["engine:e1"] == DRAIN_NOTICE_MAX_S + 2.0 + 90.0 + CLOSE_MARGIN_S   # flat in its section
    assert stop["gateway"] == base + 60.0                                            # under serve


def test_the_services_drain_for_what_the_supervisor_waits():
    """The token carriers' longer default sits under ``serve``, so a section's ``grace_s``, flat or under
    ``serve``, wins; another ``serve`` field leaves the default."""
    from engine_svc.config import from_stack as engine_config
    from gateway_svc.config import from_stack as gateway_config

    raw = {**STACK, "balancer": {"port": 2},
           "engines": [*STACK["engines"], {"name": "e2", "port": 6, "serve": {"metrics_port": 9100}}]}
    assert gateway_config(raw).serve.grace_s == 60.0
    assert engine_config(raw, "e1").serve.grace_s == 90.0
    assert engine_config(raw, "e2").serve.grace_s == STREAMING_GRACE_S
    assert engine_config(raw, "e2").serve.metrics_port == 9100


def test_a_reload_names_what_it_cannot_apply():
    supervisor = Supervisor.__new__(Supervisor)
    supervisor.raw = STACK
    edited = {**STACK, "balancer": {**STACK["balancer"], "cascade": {"models": ["a", "b"]}},
              "engines": [{"name": "e0", "port": 4, "max_waiting": 8}, STACK["engines"][1], {"name": "e2", "port": 6}]}
    assert supervisor._needing_restart(edited, ["engine:e0", "engine:e1"]) == ["engine:e0"]   # the cascade applies
    edited["balancer"] = {**edited["balancer"], "port": 7}
    edited["monitor"] = {"port": 8}
    assert supervisor._needing_restart(edited, ["engine:e1"]) == ["monitor", "balancer"]

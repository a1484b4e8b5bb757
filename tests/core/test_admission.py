"""Per-tenant admission: a cap on calls in flight and a token bucket, each tenant on its own."""

import pytest

from hetflow.core.admission import TenantLimit, TenantLimiter
from hetflow.core.errors import ResourceExhausted


def test_a_tenant_at_its_cap_is_refused_until_a_call_leaves_and_others_are_not():
    limiter = TenantLimiter(TenantLimit(max_in_flight=2))
    limiter.enter("a", 0.0)
    limiter.enter("a", 0.0)
    with pytest.raises(ResourceExhausted, match="2 calls in flight") as refused:
        limiter.enter("a", 0.0)
    assert refused.value.retry_after_s == 1.0
    limiter.enter("b", 0.0)  # another tenant has its own count
    limiter.leave("a")
    limiter.enter("a", 0.0)


def test_the_bucket_allows_its_burst_then_the_rate_and_says_when_to_retry():
    limiter = TenantLimiter(TenantLimit(), {"a": TenantLimit(rate_per_s=2.0, burst=3)})
    for _ in range(3):
        limiter.enter("a", 10.0)
    with pytest.raises(ResourceExhausted) as refused:
        limiter.enter("a", 10.0)
    assert refused.value.retry_after_s == pytest.approx(0.5)
    limiter.enter("a", 10.5)  # one token back after 1 / rate
    for _ in range(100):  # the default tenant limit is none
        limiter.enter("", 10.5)


def test_limits_from_configuration_are_checked():
    limiter = TenantLimiter.from_mapping({"default": {"max_in_flight": 8}, "tenants": {"x": {"rate_per_s": 5}}})
    assert limiter.limit("x").rate_per_s == 5 and limiter.limit("y").max_in_flight == 8
    with pytest.raises(ValueError, match="unknown key"):
        TenantLimiter.from_mapping({"defaults": {}})
    with pytest.raises(ValueError, match=">= 0"):
        TenantLimit(rate_per_s=-1)


def test_rate_limited_tenants_named_by_their_callers_are_forgotten_once_their_buckets_refill():
    """On a stack without keys the tenant is whatever the caller sends: the table keeps those a fresh state
    would not stand for (calls in flight, or a bucket still refilling), not every name ever sent."""
    from hetflow.core.admission import SWEEP_ABOVE_TENANTS, TenantLimit, TenantLimiter

    limiter = TenantLimiter(TenantLimit(rate_per_s=1.0))
    limiter.enter("busy", now_s=0.0)   # a call in flight all along: never forgotten
    for i in range(3 * SWEEP_ABOVE_TENANTS):
        limiter.enter(f"caller-{i}", now_s=float(i))   # one call each, its bucket refilled a few seconds on
        limiter.leave(f"caller-{i}")
    assert "busy" in limiter._state
    assert len(limiter._state) <= 2 * SWEEP_ABOVE_TENANTS

"""Per-tenant admission: a cap on a tenant's calls in flight and a token bucket on its call rate.

A tenant is the ``tenant`` a call's workflow names ("" for calls that name none). Each tenant has its
own counters, under its own limit or the default one; a call over either limit is RESOURCE_EXHAUSTED
with the time after which it may pass, so one tenant's burst cannot fill the queues every tenant
shares. Pure state; every method takes the time it is called at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.core.errors import ResourceExhausted


@dataclass(frozen=True)
class TenantLimit:
    max_in_flight: int = 0
    """Calls of the tenant in the balancer at once (deciding, held or streaming); 0 = no cap."""
    rate_per_s: float = 0.0
    """Sustained calls per second; 0 = no rate limit."""
    burst: int = 0
    """Calls the bucket holds (a burst above the rate); 0 = one second's worth, at least 1."""

    def __post_init__(self) -> None:
        if self.max_in_flight < 0 or self.rate_per_s < 0 or self.burst < 0:
            raise ValueError(f"tenant limits must be >= 0, got {self}")

    @property
    def bucket_size(self) -> float:
        return float(self.burst or max(1.0, self.rate_per_s))


@dataclass
class _TenantState:
    in_flight: int = 0
    tokens: float = 0.0
    refilled_s: float = 0.0


SWEEP_ABOVE_TENANTS = 1024
"""Tenants remembered before ``TenantLimiter`` first forgets those a fresh state would stand for."""


@dataclass
class TenantLimiter:
    default: TenantLimit = field(default_factory=TenantLimit)
    tenants: Mapping[str, TenantLimit] = field(default_factory=dict)
    _state: dict[str, _TenantState] = field(default_factory=dict)
    _sweep_above: int = SWEEP_ABOVE_TENANTS
    """``_state``'s size past which ``enter`` forgets the tenants a fresh state would stand for."""

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> TenantLimiter:
        """``{default: {max_in_flight: 64, rate_per_s: 20}, tenants: {team-a: {...}}}``."""
        unknown = set(raw) - {"default", "tenants"}
        if unknown:
            raise ValueError(f"tenant_limits: unknown key(s) {sorted(unknown)}; expected default, tenants")
        return cls(TenantLimit(**raw.get("default", {})),
                   {name: TenantLimit(**limit) for name, limit in raw.get("tenants", {}).items()})

    def limit(self, tenant: str) -> TenantLimit:
        return self.tenants.get(tenant, self.default)

    def enter(self, tenant: str, now_s: float) -> None:
        """Count a call of ``tenant`` in, or refuse it with when to try again."""
        limit = self.limit(tenant)
        if len(self._state) > self._sweep_above:
            self._forget_refilled(now_s)
        state = self._state.setdefault(tenant, _TenantState(tokens=limit.bucket_size, refilled_s=now_s))
        if limit.max_in_flight and state.in_flight >= limit.max_in_flight:
            raise ResourceExhausted(f"tenant {tenant!r} has {state.in_flight} calls in flight; its limit is "
                                    f"{limit.max_in_flight}", retry_after_s=1.0)
        if limit.rate_per_s:
            state.tokens = min(limit.bucket_size, state.tokens + (now_s - state.refilled_s) * limit.rate_per_s)
            state.refilled_s = now_s
            if state.tokens < 1.0:
                raise ResourceExhausted(f"tenant {tenant!r} is over its rate of {limit.rate_per_s:g} calls/s",
                                        retry_after_s=(1.0 - state.tokens) / limit.rate_per_s)
            state.tokens -= 1.0
        state.in_flight += 1

    def _forget_refilled(self, now_s: float) -> None:
        """Forget the tenants with nothing in flight whose buckets have refilled: a fresh state is the same
        (tenants named by their callers, on a stack without keys, are as many as the callers); amortized,
        the next sweep once the table has doubled."""
        for tenant, state in list(self._state.items()):
            limit = self.limit(tenant)
            refilled = state.tokens + (now_s - state.refilled_s) * limit.rate_per_s >= limit.bucket_size
            if state.in_flight <= 0 and refilled:
                del self._state[tenant]
        self._sweep_above = max(SWEEP_ABOVE_TENANTS, 2 * len(self._state))

    def leave(self, tenant: str) -> None:
        state = self._state.get(tenant)
        if state is not None:
            state.in_flight -= 1
            if state.in_flight <= 0 and not self.limit(tenant).rate_per_s:
                del self._state[tenant]  # nothing to remember: the table stays as small as the tenants active

"""Stored responses are bounded, expire, and belong to the tenant that created them."""

from gateway_svc.response_store import ResponseStore, StoredResponse
from hetflow.runtime.responses_request import Conversation


def stored(tenant: str = "", at_s: float = 0.0, own_chars: int = 4) -> StoredResponse:
    return StoredResponse({"id": "x"}, Conversation((("user", "hi"), ("assistant", "yo")), "p"), tenant, at_s,
                          own_chars)


def test_the_oldest_go_first_past_the_bound():
    store = ResponseStore(max_responses=2, ttl_s=100.0, max_chars=1_000)
    for i in range(3):
        store.put(f"r{i}", stored())
    assert len(store) == 2 and store.get("r0", "", 1.0) is None and store.get("r2", "", 1.0) is not None


def test_a_response_expires_after_its_ttl():
    store = ResponseStore(max_responses=8, ttl_s=10.0, max_chars=1_000)
    store.put("r", stored(at_s=0.0))
    assert store.get("r", "", 9.0) is not None
    assert store.get("r", "", 11.0) is None and len(store) == 0


def test_another_tenant_is_told_it_does_not_exist():
    store = ResponseStore(max_responses=8, ttl_s=10.0, max_chars=1_000)
    store.put("r", stored(tenant="team-a"))
    assert store.get("r", "team-b", 1.0) is None and store.get("r", "team-a", 1.0) is not None


def test_one_tenants_traffic_never_evicts_anothers_and_expired_ones_go_as_new_ones_come():
    store = ResponseStore(max_responses=2, ttl_s=10.0, max_chars=1_000)
    store.put("a", stored(tenant="team-a", at_s=0.0))
    for i in range(5):
        store.put(f"b{i}", stored(tenant="team-b", at_s=1.0))
    assert store.get("a", "team-a", 2.0) is not None and len(store) == 3
    store.put("a2", stored(tenant="team-a", at_s=20.0))        # "a" and team-b's expired: dropped as "a2" comes
    assert len(store) == 1 and store.get("a2", "team-a", 20.0) is not None


def test_past_its_text_bound_a_tenants_oldest_go_first_and_a_response_past_it_alone_is_not_kept():
    store = ResponseStore(max_responses=100, ttl_s=10.0, max_chars=1_000)
    store.put("other", stored(tenant="team-b", own_chars=900))
    for i in range(3):
        store.put(f"r{i}", stored(own_chars=400))
    assert store.get("r0", "", 1.0) is None and store.get("r1", "", 1.0) and store.get("r2", "", 1.0)
    assert store.get("other", "team-b", 1.0) is not None   # another tenant's text counts apart
    store.put("huge", stored(own_chars=1_001))
    assert store.get("huge", "", 1.0) is None and len(store) == 1


def test_an_idle_tenants_expired_responses_go_when_any_tenant_stores_one():
    store = ResponseStore(max_responses=8, ttl_s=10.0, max_chars=1_000)
    store.put("a", stored(tenant="team-a", at_s=0.0))
    store.put("b", stored(tenant="team-b", at_s=20.0))
    assert len(store) == 1

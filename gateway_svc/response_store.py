"""Stored responses of the Responses API (``store: true``, the default): what ``GET /v1/responses/{id}``
returns and what a later request's ``previous_response_id`` continues.

Kept in the gateway's memory, as vLLM's server keeps them in its own (``VLLM_ENABLE_RESPONSES_API_STORE``),
but bounded: at most ``max_responses`` per tenant, and ``max_chars`` of text per tenant (what each
response holds of its own: its input and its body, answer and echoed request fields; a continued
conversation's earlier turns are the stored strings themselves, not copies), each for ``ttl_s`` after it
was stored, the oldest evicted first. A response belongs to the tenant whose API key created it; another
tenant is told it does not exist, and one tenant's responses never evict another's.
Several gateways do not share their stores: a conversation continues on the gateway that stored it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from hetflow.runtime.responses_request import Conversation


@dataclass(frozen=True)
class StoredResponse:
    body: dict[str, Any]
    """The response object as it was returned."""
    conversation: Conversation
    tenant: str
    """The tenant of the API key that created it ("" on a stack without keys)."""
    stored_unix_s: float
    own_chars: int = 0
    """What it holds of its own, counted against ``max_chars``: its input's turns and its body's JSON (its
    answer, and what the request echoes: instructions, tools, metadata)."""


class ResponseStore:
    """Each tenant's responses apart, so one tenant's traffic never evicts another's."""

    def __init__(self, max_responses: int, ttl_s: float, max_chars: int) -> None:
        self.max_responses, self.ttl_s, self.max_chars = max_responses, ttl_s, max_chars
        self._by_tenant: dict[str, OrderedDict[str, StoredResponse]] = {}
        self._chars: dict[str, int] = {}

    def put(self, response_id: str, stored: StoredResponse) -> None:
        """Keep it, after every tenant's expired responses and, past the tenant's bounds, its oldest."""
        for tenant in list(self._by_tenant):
            self._expire(tenant, stored.stored_unix_s)
        tenant = stored.tenant
        responses = self._by_tenant.setdefault(tenant, OrderedDict())
        self._drop(tenant, response_id)
        responses[response_id] = stored
        self._chars[tenant] = self._chars.get(tenant, 0) + stored.own_chars
        while responses and (len(responses) > self.max_responses or self._chars[tenant] > self.max_chars):
            self._drop(tenant, next(iter(responses)))

    def _expire(self, tenant: str, now_unix_s: float) -> None:
        responses = self._by_tenant[tenant]
        while responses and now_unix_s - next(iter(responses.values())).stored_unix_s > self.ttl_s:
            self._drop(tenant, next(iter(responses)))
        if not responses:
            del self._by_tenant[tenant], self._chars[tenant]

    def _drop(self, tenant: str, response_id: str) -> None:
        dropped = self._by_tenant[tenant].pop(response_id, None)
        if dropped is not None:
            self._chars[tenant] -= dropped.own_chars

    def get(self, response_id: str, tenant: str, now_unix_s: float) -> StoredResponse | None:
        """The tenant's response, if stored and not expired; None otherwise (another tenant's included)."""
        responses = self._by_tenant.get(tenant)
        stored = responses.get(response_id) if responses is not None else None
        if stored is None or responses is None:
            return None
        if now_unix_s - stored.stored_unix_s > self.ttl_s:
            self._drop(tenant, response_id)
            return None
        return stored

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_tenant.values())

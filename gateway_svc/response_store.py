"""Stored responses of the Responses API (``store: true``, the default): what ``GET /v1/responses/{id}``
returns and what a later request's ``previous_response_id`` continues.

Kept in the gateway's memory, as vLLM's server keeps them in its own (``VLLM_ENABLE_RESPONSES_API_STORE``),
but bounded: at most ``max_responses`` per tenant, each for ``ttl_s`` after it was stored, the oldest
evicted first. A response belongs to the tenant whose API key created it; another tenant is told it does
not exist, and one tenant's responses never evict another's.
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


class ResponseStore:
    """Each tenant's responses apart, so one tenant's traffic never evicts another's."""

    def __init__(self, max_responses: int, ttl_s: float) -> None:
        self.max_responses, self.ttl_s = max_responses, ttl_s
        self._by_tenant: dict[str, OrderedDict[str, StoredResponse]] = {}

    def put(self, response_id: str, stored: StoredResponse) -> None:
        """Keep it, after the tenant's expired responses and, past the bound, its oldest."""
        responses = self._by_tenant.setdefault(stored.tenant, OrderedDict())
        while responses and stored.stored_unix_s - next(iter(responses.values())).stored_unix_s > self.ttl_s:
            responses.popitem(last=False)
        responses[response_id] = stored
        responses.move_to_end(response_id)
        while len(responses) > self.max_responses:
            responses.popitem(last=False)

    def get(self, response_id: str, tenant: str, now_unix_s: float) -> StoredResponse | None:
        """The tenant's response, if stored and not expired; None otherwise (another tenant's included)."""
        responses = self._by_tenant.get(tenant)
        stored = responses.get(response_id) if responses is not None else None
        if stored is None or responses is None:
            return None
        if now_unix_s - stored.stored_unix_s > self.ttl_s:
            del responses[response_id]
            return None
        return stored

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_tenant.values())

"""Stored responses of the Responses API (``store: true``, the default): what ``GET /v1/responses/{id}``
returns and what a later request's ``previous_response_id`` continues.

Kept in the gateway's memory, as vLLM's server keeps them in its own (``VLLM_ENABLE_RESPONSES_API_STORE``),
but bounded: at most ``max_responses``, each for ``ttl_s`` after it was stored, the oldest evicted first.
A response belongs to the tenant whose API key created it; another tenant is told it does not exist.
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
    def __init__(self, max_responses: int, ttl_s: float) -> None:
        self.max_responses, self.ttl_s = max_responses, ttl_s
        self._responses: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, response_id: str, stored: StoredResponse) -> None:
        self._responses[response_id] = stored
        self._responses.move_to_end(response_id)
        while len(self._responses) > self.max_responses:
            self._responses.popitem(last=False)

    def get(self, response_id: str, tenant: str, now_unix_s: float) -> StoredResponse | None:
        """The response, if stored, not expired and the tenant's own; None otherwise."""
        stored = self._responses.get(response_id)
        if stored is None:
            return None
        if now_unix_s - stored.stored_unix_s > self.ttl_s:
            del self._responses[response_id]
            return None
        return stored if stored.tenant == tenant else None

    def __len__(self) -> int:
        return len(self._responses)

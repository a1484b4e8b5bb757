"""The OpenAI Responses API's reply shapes (the OpenAI API reference, "Responses" and "Streaming
events"), as vLLM's server writes them (``vllm/entrypoints/openai/responses``): a ``response`` object
whose output is one assistant message of ``output_text``, or, streamed, its named events from
``response.created`` to ``response.completed``. A response with ``store`` (the default) is kept for
``GET /v1/responses/{id}`` and ``previous_response_id`` (``gateway_svc.response_store``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Mapping

from gateway_svc.response_store import StoredResponse
from gateway_svc.responses import sse
from hetflow.runtime.openai_request import Conversation, OpenAIError, ParsedRequest

Store = Callable[[str, StoredResponse], None]


class ResponsesReply:
    """One response's shapes; stores it when it completes and ``store`` asked."""

    def __init__(self, parsed: ParsedRequest, body: Mapping[str, Any], tenant: str, store: Store) -> None:
        self.parsed, self.tenant, self._store = parsed, tenant, store
        self.request_body = body
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self._sequence = 0
        self._texts: list[str] = []
        self._extra: dict[str, Any] = {}

    # -- the response object ------------------------------------------------------------
    def response(self, model: str, status: str, output: list[dict[str, Any]],
                 usage: dict[str, Any] | None = None, incomplete_reason: str | None = None,
                 error: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self.request_body
        return {
            "id": self.parsed.request.request_id, "object": "response", "created_at": self.parsed.created_unix_s,
            "model": model, "status": status, "output": output, "usage": usage, "error": error,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "instructions": body.get("instructions"), "metadata": body.get("metadata") or {},
            "max_output_tokens": body.get("max_output_tokens"), "temperature": body.get("temperature"),
            "top_p": body.get("top_p"), "previous_response_id": body.get("previous_response_id"),
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"), "tools": [], "text": {"format": {"type": "text"}},
            "truncation": body.get("truncation", "disabled"),
            "store": body.get("store", True), "user": body.get("user"), "hetflow": self._extra}

    def _part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _message(self, status: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant", "content": parts}

    @staticmethod
    def _usage(prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
        return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt_tokens + output_tokens}

    def _finished(self, model: str, finish_reason: str, prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
        """The whole response, stored when asked."""
        text, status = "".join(self._texts), "incomplete" if finish_reason == "length" else "completed"
        response = self.response(model, status, [self._message(status, [self._part(text)])],
                                 self._usage(prompt_tokens, output_tokens),
                                 "max_output_tokens" if status == "incomplete" else None)
        if self.request_body.get("store", True):
            sent = tuple((m.role, m.content) for m in self.parsed.request.messages if m.role != "system")
            conversation = Conversation((*sent, ("assistant", text)), self.parsed.request.workflow.program_id)
            self._store(response["id"], StoredResponse(response, conversation, self.tenant, time.time()))
        return response

    # -- the stream ---------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse(event, kind)

    def _located(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0}

    def opening(self, model: str, extra: dict[str, Any]) -> list[bytes]:
        self._extra = extra
        started = self.response(model, "in_progress", [])
        return [self._event("response.created", response=started),
                self._event("response.in_progress", response=started),
                self._event("response.output_item.added", output_index=0, item=self._message("in_progress", [])),
                self._event("response.content_part.added", **self._located(), part=self._part(""))]

    def text(self, model: str, text: str, finish_reason: str | None, extra: dict[str, Any] | None) -> list[bytes]:
        if not text:
            return []
        self._texts.append(text)
        return [self._event("response.output_text.delta", **self._located(), delta=text, logprobs=[])]

    def closing(self, model: str, finish_reason: str, prompt_tokens: int, output_tokens: int) -> list[bytes]:
        response = self._finished(model, finish_reason, prompt_tokens, output_tokens)
        message = response["output"][0]
        part = message["content"][0]
        return [self._event("response.output_text.done", **self._located(), text=part["text"], logprobs=[]),
                self._event("response.content_part.done", **self._located(), part=part),
                self._event("response.output_item.done", output_index=0, item=message),
                self._event("response.completed" if response["status"] == "completed" else "response.incomplete",
                            response=response)]

    def failed(self, error: OpenAIError) -> list[bytes]:
        failed = self.response(self.parsed.model, "failed", [],
                               error={"code": error.code or error.type, "message": error.message})
        return [self._event("response.failed", response=failed)]

    def whole(self, model: str, text: str, finish_reason: str, prompt_tokens: int, output_tokens: int,
              extra: dict[str, Any]) -> dict[str, Any]:
        self._extra, self._texts = extra, [text]
        return self._finished(model, finish_reason, prompt_tokens, output_tokens)

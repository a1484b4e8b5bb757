"""The OpenAI Responses API's reply shapes (the OpenAI API reference, "Responses" and "Streaming
events"), as vLLM's server writes them (``vllm/entrypoints/openai/responses``): a ``response`` object
whose output is one assistant message of ``output_text``, or, streamed, its named events from
``response.created`` to ``response.completed``. A response with ``store`` (the default) is kept for
``GET /v1/responses/{id}`` and ``previous_response_id`` (``gateway_svc.response_store``).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable, Mapping

from gateway_svc.response_store import StoredResponse
from gateway_svc.responses import sse
from hetflow.runtime.openai_request import OpenAIError, ParsedRequest
from hetflow.runtime.responses_request import Conversation
from hetflow.runtime.tool_calls import CallStream, ToolCall, assistant_text, parse_calls

Store = Callable[[str, StoredResponse], None]


class ResponsesReply:
    """One response's shapes; stores it when it completes and ``store`` asked. Its output is a message of
    the answer's text (when there is text, or nothing else) and, with tools offered, a ``function_call``
    item per call the answer makes (``hetflow.runtime.tool_calls``)."""

    def __init__(self, parsed: ParsedRequest, body: Mapping[str, Any], tenant: str, store: Store) -> None:
        self.parsed, self.tenant, self._store = parsed, tenant, store
        self.request_body = body
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self._sequence = 0
        self._sent: list[str] = []
        """The text streamed so far, as sent (the message's text)."""
        self._extra: dict[str, Any] = {}
        self._calls = CallStream() if parsed.tools else None
        self._message_open = False

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
            "parallel_tool_calls": self.parsed.parallel_tool_calls,
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "text": {"format": {"type": "text"}}, "truncation": body.get("truncation", "disabled"),
            "store": body.get("store", True), "user": body.get("user"), "hetflow": self._extra}

    @staticmethod
    def _part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _message(self, status: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant", "content": parts}

    @staticmethod
    def _function_call(call: ToolCall, arguments: str | None = None) -> dict[str, Any]:
        return {"type": "function_call", "id": f"fc_{call.call_id.removeprefix('call_')}", "call_id": call.call_id,
                "name": call.name, "arguments": call.arguments if arguments is None else arguments,
                "status": "completed" if arguments is None else "in_progress"}

    @staticmethod
    def _usage(prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
        return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt_tokens + output_tokens}

    def _finished(self, model: str, finish_reason: str, prompt_tokens: int, output_tokens: int,
                  text: str, calls: list[ToolCall], with_message: bool) -> dict[str, Any]:
        """The whole response, stored when asked: a message of ``text`` first when ``with_message``."""
        status = "incomplete" if finish_reason == "length" else "completed"
        message = [self._message(status, [self._part(text)])] if with_message else []
        response = self.response(model, status, message + [self._function_call(c) for c in calls],
                                 self._usage(prompt_tokens, output_tokens),
                                 "max_output_tokens" if status == "incomplete" else None)
        if self.request_body.get("store", True):
            parsed, answer = self.parsed, assistant_text(text, calls)
            conversation = Conversation((*parsed.history, *parsed.added, ("assistant", answer)),
                                        parsed.request.workflow.program_id)
            own_chars = sum(len(content) for _, content in parsed.added) + len(json.dumps(response))
            self._store(response["id"], StoredResponse(response, conversation, self.tenant, time.time(), own_chars))
        return response

    # -- the stream ---------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse(event, kind)

    def _located(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0}

    def _open_message(self) -> list[bytes]:
        self._message_open = True
        return [self._event("response.output_item.added", output_index=0, item=self._message("in_progress", [])),
                self._event("response.content_part.added", **self._located(), part=self._part(""))]

    def opening(self, model: str, extra: dict[str, Any]) -> list[bytes]:
        self._extra = extra
        started = self.response(model, "in_progress", [])
        return [self._event("response.created", response=started),
                self._event("response.in_progress", response=started)]

    def text(self, model: str, text: str, finish_reason: str | None, extra: dict[str, Any] | None) -> list[bytes]:
        return self._delta(self._calls.feed(text) if self._calls is not None else text)

    def _delta(self, text: str) -> list[bytes]:
        """A text delta, the message opened before the first."""
        if not text:
            return []
        self._sent.append(text)
        opened = [] if self._message_open else self._open_message()
        return [*opened, self._event("response.output_text.delta", **self._located(), delta=text, logprobs=[])]

    def closing(self, model: str, finish_reason: str, prompt_tokens: int, output_tokens: int) -> list[bytes]:
        """What the stream held back goes out as text; the message (when one was opened, or the answer
        called nothing) is closed, then each call is an item of its own, numbered after it."""
        events: list[bytes] = []
        calls: list[ToolCall] = []
        if self._calls is not None:
            rest, calls = self._calls.finish()
            calls = self.parsed.calls_kept(calls)
            events += self._delta(rest)
        with_message = self._message_open or not calls
        response = self._finished(model, finish_reason, prompt_tokens, output_tokens, "".join(self._sent), calls,
                                  with_message)
        if with_message:
            message = response["output"][0]
            part = message["content"][0]
            events += [] if self._message_open else self._open_message()
            events += [self._event("response.output_text.done", **self._located(), text=part["text"], logprobs=[]),
                       self._event("response.content_part.done", **self._located(), part=part),
                       self._event("response.output_item.done", output_index=0, item=message)]
        for index, call in enumerate(calls, start=int(with_message)):
            item_id = self._function_call(call)["id"]
            events += [self._event("response.output_item.added", output_index=index,
                                   item=self._function_call(call, arguments="")),
                       self._event("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                                   delta=call.arguments),
                       self._event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                                   name=call.name, arguments=call.arguments),
                       self._event("response.output_item.done", output_index=index, item=self._function_call(call))]
        completed = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return [*events, self._event(completed, response=response)]

    def failed(self, error: OpenAIError) -> list[bytes]:
        failed = self.response(self.parsed.model, "failed", [],
                               error={"code": error.code or error.type, "message": error.message})
        return [self._event("response.failed", response=failed)]

    def whole(self, model: str, text: str, finish_reason: str, prompt_tokens: int, output_tokens: int,
              extra: dict[str, Any]) -> dict[str, Any]:
        self._extra = extra
        answer, calls = parse_calls(text) if self.parsed.tools else (text, [])
        calls = self.parsed.calls_kept(calls)
        return self._finished(model, finish_reason, prompt_tokens, output_tokens, answer, calls,
                              bool(answer) or not calls)

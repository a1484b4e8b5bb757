"""A trace's calls as the live harness sends them: chat messages whose prompt the servers count as the
trace does, token for token (``hetflow.bench.doors``; docs/vllm-sim.md).

The trace counts a prompt's parts and answers; a server also counts its chat template's tokens around
each message. Each message's template tokens come out of its own content (its last part first), what
that cannot give out of the content before it (the latest first, an answer's tail included), and what
nothing before it can give out of the next message's. Every later call of a program sends the same
messages again, so its prompt still starts with its last call's prompt token for token, except where a
message shorter than its template tokens cut into the content before it (ShareGPT's short turns: a few
tokens of prefix lost a call, where paying them forward left the last turn's template tokens over the
trace's count at the server in a third of the calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from hetflow.core.memo import BoundedMemo
from hetflow.core.trace import StageRecord
from hetflow.workloads.build import part_key

PART_MEMO_ENTRIES = 8192
"""Prompt parts ``PromptText`` remembers: every part of a hundred programs in flight, a few token counts each."""


class PromptText:
    """Prompt text with exact token counts in the pool's tokenizer: each part is its own text cut to its
    tokens, else (after a shorter text, or with none) the servers' own filler (words the tokenizer holds as
    one token) seeded by the part's key, so equal parts are equal tokens."""

    def __init__(self, tokenizer_dir: str = "") -> None:
        from engine_svc.vllm_sim.tokenizer import PromptTokenizer  # the servers' tokenizer, as they load it

        self._tokenizer = PromptTokenizer(tokenizer_dir)
        self._parts: BoundedMemo[tuple[str, int, str], str] = BoundedMemo(PART_MEMO_ENTRIES)
        self.template_tokens = self._template_tokens()

    def part(self, key: str, tokens: int, real: str = "") -> str:
        """``tokens`` tokens of the part ``key``: its ``real`` text (leading whitespace dropped) cut to them in
        the servers' tokenizer (filler after a shorter one), or filler alone; filler where the cut text
        would not encode back to exactly ``tokens`` (hetflow's predictor reads the text: on filler it
        predicted -13% to +25% a call against its twin's rows, docs/vllm-sim.md). Remembered: every later
        call of a program sends its earlier parts again."""
        return self._parts.get((key, tokens, real), lambda: self._cut(key, tokens, real))

    def tokens_of(self, text: str) -> int:
        """``text``'s tokens in the servers' tokenizer (an answer's, as a later prompt sends it)."""
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def without_tail(self, text: str, tokens: int) -> str:
        """``text`` short of its last ``tokens`` tokens."""
        ids = list(self._tokenizer.encode(text, add_special_tokens=False))
        return self._tokenizer.decode(ids[:max(0, len(ids) - tokens)])

    def joins_cleanly(self, before: str, after: str, window_chars: int = 32) -> bool:
        """Whether ``after`` written right after ``before`` keeps both texts' tokens (words that run
        together at the join merge: the window around it decides)."""
        head, tail = before[-window_chars:], after[:window_chars]
        return self.tokens_of(head + tail) == self.tokens_of(head) + self.tokens_of(tail)

    def _cut(self, key: str, tokens: int, real: str) -> str:
        if real and tokens > 0:
            ids = list(self._tokenizer.encode(real.lstrip(), add_special_tokens=False))[:tokens]  # a leading
            # newline would merge with the chat template's own after the role
            cut = self._tokenizer.decode(ids + list(self._tokenizer.filler(key, tokens - len(ids))))
            if len(self._tokenizer.encode(cut, add_special_tokens=False)) == tokens:
                return cut
        return self._tokenizer.decode(self._tokenizer.filler(key, tokens))

    def _template_tokens(self, probe_tokens: int = 40) -> dict[str, int]:
        """The chat template's own tokens (its special tokens and role headers, the generation prompt
        included), besides the messages' contents: around a conversation's first user message
        (``first``), what an answer and the user message after it add (``turn``), an answer that
        follows an answer (``answer``), and a system message before the first user message (``system``)."""
        user, answer, answer2, more, system = (
            {"role": role, "content": self.part(f"template/{role}/{i}", probe_tokens)}
            for i, role in enumerate(("user", "assistant", "assistant", "user", "system")))
        one, three = len(self._tokenizer.chat([user])), len(self._tokenizer.chat([user, answer, more]))
        four = len(self._tokenizer.chat([user, answer, answer2, more]))
        with_system = len(self._tokenizer.chat([system, user]))
        return {"first": one - probe_tokens, "turn": three - one - 2 * probe_tokens,
                "answer": four - three - probe_tokens, "system": with_system - one - probe_tokens}


def part_texts(program: Sequence[StageRecord]) -> dict[str, str]:
    """The program's prompt texts by their part key (``hetflow.workloads.build.part_key``)."""
    return {part_key(t): t for r in program for t in (r.system_prompt, r.user_prompt) if t}


@dataclass
class _Piece:
    """A prompt part as sent: a text part's key and tokens, or an ancestor's answer and the tokens cut
    from its tail."""

    key: str = ""
    tokens: int = 0
    answer: str | None = None
    cut_tokens: int = 0

    def room(self, text: PromptText) -> int:
        """The tokens this piece can still give to the template."""
        return self.tokens if self.answer is None else text.tokens_of(self.answer) - self.cut_tokens

    def give(self, tokens: int) -> None:
        if self.answer is None:
            self.tokens -= tokens
        else:
            self.cut_tokens += tokens


@dataclass
class _Message:
    role: str
    template_tokens: int
    """The chat template's tokens this message adds (``PromptText.template_tokens``)."""
    pieces: list[_Piece] = field(default_factory=list)


def conversation(record: StageRecord, answers: Mapping[int, str], text: PromptText, model: str,
                 texts: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """The call's prompt as chat messages, in the trace's part order: each ancestor's answer an assistant
    message, the text between them user messages, the call's own system prompt a system message where it
    comes first (hetflow's predictor reads its length: sent as user text, the QRF predicted 1.2x the
    remaining work its twin's rows give, docs/vllm-sim.md), an empty user message after a last answer.
    With ``texts`` (``part_texts``), each part is its own text cut to its tokens (``PromptText.part``),
    else filler. The template's tokens come out of the messages' content (the module's docstring), so
    the prompt the server counts has the trace's tokens, as the simulated twin counts them (the agent
    family's chains had 12 + 14 per stage more before: 2% of their prompts, which moved the twin's P95
    near capacity by 14%)."""
    messages = _messages(record, answers, text.template_tokens, model)
    _pay_template_tokens(messages, text)
    return [{"role": m.role, "content": _content(m.pieces, text, texts or {})} for m in messages]


def _content(pieces: Sequence[_Piece], text: PromptText, texts: Mapping[str, str]) -> str:
    """A message's pieces joined; a text part after another that its cut text would merge with at the
    join (two words run together as fewer tokens) goes as filler."""
    content = ""
    for piece in pieces:
        if piece.answer is not None:
            content += text.without_tail(piece.answer, piece.cut_tokens) if piece.cut_tokens else piece.answer
            continue
        cut = text.part(piece.key, piece.tokens, texts.get(piece.key, ""))
        if content and not text.joins_cleanly(content, cut):
            cut = text.part(piece.key, piece.tokens)
        content += cut
    return content


def _messages(record: StageRecord, answers: Mapping[int, str], template: Mapping[str, int],
              model: str) -> list[_Message]:
    parts = record.prompt_parts or [{"text": f"{record.program_id}/{record.stage_index}",
                                     "tokens": record.input_tokens[model]}]
    system_key = part_key(record.system_prompt) if record.system_prompt else None
    messages: list[_Message] = []
    for i, part in enumerate(parts):
        if "output_of" in part:
            role, piece = "assistant", _Piece(answer=answers[part["output_of"]])
        else:
            role = "system" if i == 0 and part["text"] == system_key else "user"
            piece = _Piece(key=part["text"], tokens=part["tokens"])
        if not (messages and messages[-1].role == role == "user"):
            messages.append(_Message(role, _added_tokens(role, messages, template)))
        messages[-1].pieces.append(piece)
    if messages[-1].role == "assistant":
        messages.append(_Message("user", _added_tokens("user", messages, template)))
    return messages


def _added_tokens(role: str, before: Sequence[_Message], template: Mapping[str, int]) -> int:
    """The template's tokens a message of ``role`` adds after the messages ``before`` it (an answer's own
    are in the user message after it, ``turn``)."""
    if role == "system":
        return template["system"]
    if role == "user":
        return template["turn"] if any(m.role == "assistant" for m in before) else template["first"]
    return template["answer"] if before and before[-1].role == "assistant" else 0


def _pay_template_tokens(messages: Sequence[_Message], text: PromptText) -> None:
    """Each message's template tokens out of its own pieces, the last first, then out of the pieces before
    it, the latest first; what none of them can give, the next message pays (the module's docstring)."""
    owed = 0
    for i, message in enumerate(messages):
        owed += max(0, message.template_tokens)
        for piece in [p for m in reversed(messages[:i + 1]) for p in reversed(m.pieces)]:
            if owed == 0:
                break
            given = min(owed, max(0, piece.room(text)))
            piece.give(given)
            owed -= given

"""A model's own token counts, as vLLM's OpenAI server (0.32) counts them: a chat rendered by the
tokenizer's chat template with the generation prompt, then tokenized without special tokens; a completion's
text with them. The balancer counts a call's prompt so (``PromptCounter``) where the operator names each
served model's tokenizer; the simulated server (``engine_svc.vllm_sim``) counts with the same code.

A directory of ``""`` is the tiny local Llama's tokenizer (``hetflow.runtime.tinymodel``), built offline
if missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from hetflow.core.errors import InvalidArgument
from hetflow.runtime import tinymodel


def chat_text(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The chat as the tokenizer's chat template renders it. A chat the template refuses (a Llama or Mistral
    template raises on roles that do not alternate) is the caller's INVALID_ARGUMENT, as vLLM's server
    answers it 400, not an INTERNAL that every engine would be tried with."""
    from jinja2 import TemplateError  # the templates' engine, with transformers

    try:
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt))
    except TemplateError as exc:
        raise InvalidArgument(f"the model's chat template refuses the messages: {exc}") from exc


class ModelTokenizer:
    def __init__(self, directory: str = "") -> None:
        from transformers import AutoTokenizer  # a service's start-up, not the core's imports

        path = Path(directory) if directory else tinymodel.DEFAULT_DIR
        if not directory and not (path / "tokenizer.json").exists():
            tinymodel.build(path)
        if not path.is_dir():
            raise ValueError(f"tokenizer directory {path} does not exist")
        self.name = str(path)
        self._tokenizer: Any = AutoTokenizer.from_pretrained(str(path))
        self._tokenizer.model_max_length = 1 << 30  # counts only: no warning past the model's context

    def encode(self, text: str, add_special_tokens: bool = True) -> tuple[int, ...]:
        return tuple(self._tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    def chat(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> tuple[int, ...]:
        text = chat_text(self._tokenizer, [dict(m) for m in messages], add_generation_prompt)
        return self.encode(text, add_special_tokens=False)

    def prompt_tokens(self, prompt: str, messages: Sequence[tuple[str, str]]) -> int:
        """A call's prompt tokens on this model's server: its chat's, or its completion prompt's."""
        if messages:
            return len(self.chat([{"role": role, "content": content} for role, content in messages]))
        return len(self.encode(prompt))


class PromptCounter:
    """A call's prompt tokens as the servers of the named models count them, the largest count where
    their tokenizers differ (the call's model is not chosen yet; the simulator likewise decides on one
    count per call, the largest over the models)."""

    def __init__(self, tokenizers: Mapping[str, str]) -> None:
        """``tokenizers``: served model -> its tokenizer directory; models sharing one load it once."""
        loaded: dict[str, ModelTokenizer] = {}
        for directory in tokenizers.values():
            if directory not in loaded:
                loaded[directory] = ModelTokenizer(directory)
        self._tokenizers = list(loaded.values())

    def __call__(self, prompt: str, messages: Sequence[tuple[str, str]]) -> int:
        return max(t.prompt_tokens(prompt, messages) for t in self._tokenizers)

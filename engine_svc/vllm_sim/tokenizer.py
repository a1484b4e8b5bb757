"""The tokenizer the simulated server counts with: a Hugging Face tokenizer directory, the same one a
client gives ``vllm bench serve --tokenizer``, applied as vLLM 0.32 applies it
(``hetflow.runtime.model_tokenizer``), and the filler its answers are made of."""

from __future__ import annotations

import random
from typing import Sequence

from hetflow.runtime.model_tokenizer import ModelTokenizer

FILLER_WORDS = (" the", " returns", " a", " value", " for", " each", " of", " code", " test", " is", " def",
                " return", " x", " and", " 1", " self", " if", " in", " not", " None", " to", " with", " name",
                " data", " file", " list", " import", " from", " as", " or", " else", " True", " object", " line")
"""What a simulated engine says, from the words its tokenizer holds as one token each: text that encodes
back to the very tokens that made it, so an answer sent back in the next prompt is the same tokens."""
MIN_FILLER_WORDS = 8


class PromptTokenizer(ModelTokenizer):
    def __init__(self, directory: str = "") -> None:
        """``directory``: empty takes the tiny local Llama's tokenizer, built offline if missing."""
        super().__init__(directory)
        self.vocab_size = len(self._tokenizer)
        words = [self.encode(word, add_special_tokens=False) for word in FILLER_WORDS]
        self._filler = sorted({ids[0] for ids in words if len(ids) == 1})
        if len(self._filler) < MIN_FILLER_WORDS:
            raise ValueError(f"tokenizer {self.name} holds fewer than {MIN_FILLER_WORDS} of {FILLER_WORDS} "
                             "as one token")

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return list(self._tokenizer.convert_ids_to_tokens(list(ids)))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids)))

    def filler(self, seed: str, tokens: int) -> tuple[int, ...]:
        """A simulated output of ``tokens`` tokens, the same for the same ``seed`` (a request id)."""
        rng = random.Random(seed)
        return tuple(rng.choice(self._filler) for _ in range(tokens))

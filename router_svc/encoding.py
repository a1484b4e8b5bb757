"""Tokenisation shared by training and serving, so a long prompt is cut the same way in both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


@dataclass
class EncodedBatch:
    input_ids: np.ndarray        # int64 (batch, seq)
    attention_mask: np.ndarray   # int64 (batch, seq)
    truncated: list[bool]


class PromptEncoder:
    def __init__(self, tokenizer_json: Path, max_length: int) -> None:
        self.tokenizer = Tokenizer.from_file(str(tokenizer_json))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.no_padding()
        self.pad_id = self.tokenizer.token_to_id("[PAD]") or 0

    def encode(self, texts: list[str]) -> EncodedBatch:
        encodings = self.tokenizer.encode_batch(texts)
        width = max((len(e.ids) for e in encodings), default=1)
        ids = np.full((len(texts), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        return EncodedBatch(ids, mask, [bool(e.overflowing) for e in encodings])

"""Pieces several families share: per-model length factors, assumed stage lengths, ShareGPT turns."""

from __future__ import annotations

import math
import random
from functools import lru_cache

from hetflow.core.tokens import count_tokens
from hetflow.workloads.lengths import ITEM_WEIGHT
from hetflow.workloads.models import MODELS
from hetflow.workloads.sources import sharegpt_conversations

ASSUMED_SIGMA = 0.5
MAX_TURNS = 8


def model_length_factor(model: str) -> float:
    """Assumed: outputs grow slowly with model size, 0.85x at 1.5B to 1.1x at 14.7B (log-linear)."""
    t = (math.log(MODELS[model].params_b) - math.log(1.5)) / (math.log(14.7) - math.log(1.5))
    return 0.85 + 0.25 * min(max(t, 0.0), 1.0)


def assumed_lengths(means: list[float], model: str, rng: random.Random, item_z: float = 0.0) -> list[int]:
    """Log-normal stage lengths around assumed means (no published per-stage figures exist); part of
    the spread follows the item's standardised feature ``item_z`` (see lengths.ITEM_WEIGHT)."""
    factor = model_length_factor(model)
    residual = math.sqrt(ASSUMED_SIGMA ** 2 - ITEM_WEIGHT ** 2)
    return [max(1, int(round(m * factor
                             * math.exp(ITEM_WEIGHT * item_z + rng.gauss(-ASSUMED_SIGMA ** 2 / 2, residual)))))
            for m in means]


@lru_cache(maxsize=1)
def sharegpt_chains() -> tuple[tuple[tuple[str, int], ...], ...]:
    """Each conversation as (human message, real response tokens) pairs, up to MAX_TURNS."""
    chains = []
    for conv in sharegpt_conversations():
        turns, pending = [], None
        for msg in conv.get("conversations", []):
            if msg.get("from") == "human" and msg.get("value", "").strip():
                pending = msg["value"]
            elif msg.get("from") == "gpt" and pending is not None and msg.get("value", "").strip():
                turns.append((pending, count_tokens(msg["value"])))
                pending = None
            if len(turns) == MAX_TURNS:
                break
        if turns:
            chains.append(tuple(turns))
    return tuple(chains)


def is_plain_prose(text: str) -> bool:
    return not any(mark in text for mark in ("```", "def ", "{", "SELECT", "import ", "</"))

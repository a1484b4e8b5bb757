"""Request classes LL, LH, HL, HH (load-balancer paper, section 3): a request's prompt is heavy when its
prefill takes at least ``heavy_prompt_s`` on the engine (0.5 s in the paper) and its decode heavy when it
takes at least ``heavy_decode_s`` (5 s), each time from the engine's profile, so that the same request may
be heavy on a V100 and light on an H100 ("these values are hyperparameters")."""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.core.engine.profile import EngineProfile

CLASSES = ("LL", "LH", "HL", "HH")


@dataclass(frozen=True)
class ClassThresholds:
    heavy_prompt_s: float = 0.5
    heavy_decode_s: float = 5.0

    def __post_init__(self) -> None:
        if not (self.heavy_prompt_s > 0 and self.heavy_decode_s > 0):
            raise ValueError(f"heavy_prompt_s and heavy_decode_s must be > 0, got {self}")


def prefill_s(prompt_tokens: int, profile: EngineProfile) -> float:
    """Section 3: p x (time per prompt token)."""
    return prompt_tokens * profile.prefill_ms_per_token / 1e3


def decode_s(decode_tokens: int, profile: EngineProfile) -> float:
    """Section 3: d x (average decode batch time), the batch time of a full batch at a representative
    context (``EngineProfile.decode_ms_per_token``)."""
    return decode_tokens * profile.decode_ms_per_token / 1e3


def request_class(prompt_tokens: int, decode_tokens: int, profile: EngineProfile,
                  thresholds: ClassThresholds = ClassThresholds()) -> str:
    """``LL``, ``LH``, ``HL`` or ``HH``: heavy (H) or light (L) prompt, then decode."""
    prompt = "H" if prefill_s(prompt_tokens, profile) >= thresholds.heavy_prompt_s else "L"
    decode = "H" if decode_s(decode_tokens, profile) >= thresholds.heavy_decode_s else "L"
    return prompt + decode

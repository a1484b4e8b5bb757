"""``hetflow profile``'s least-squares fit recovers the iteration-time model's coefficients."""

import pytest

from engine_svc.profiling import fit, fit_context_pair
from tests.factories import profile


def test_fit_recovers_known_coefficients():
    truth = profile(prefill_ms_per_token=0.03, decode_base_ms=4.0, decode_ms_per_seq=0.6,
                    decode_ms_per_batch_token=0.002)
    prefill = [(p, truth.decode_base_ms + truth.prefill_ms_per_token * p) for p in (32, 128, 512, 1024)]
    decode = [(b, ctx, truth.step_ms(0, b, int(b * ctx))) for b in (1, 2, 4, 8) for ctx in (48.0, 300.0, 800.0)]
    got = fit(prefill, decode)
    assert got["prefill_ms_per_token"] == pytest.approx(0.03, rel=1e-6)
    assert got["decode_base_ms"] == pytest.approx(4.0, rel=1e-6)
    assert got["decode_ms_per_seq"] == pytest.approx(0.6, rel=1e-6)
    assert got["decode_ms_per_batch_token"] == pytest.approx(0.002, rel=1e-6)


def test_negative_estimates_are_clipped_to_zero():
    decode = [(b, 100.0, 5.0 - 0.01 * b) for b in (1, 2, 4, 8)]   # noise: time falling with batch size
    got = fit([(10, 1.0), (20, 1.5)], decode)
    assert got["decode_ms_per_seq"] >= 0 and got["decode_ms_per_batch_token"] >= 0


def test_the_pair_term_is_what_a_prefix_extension_took_beyond_its_new_tokens():
    """Attention of the new tokens over the cached prefix (issue 32): recovered from extensions' times."""
    intercept, per_token, pair = 2.0, 0.03, 4e-5
    prefix = [(n, c, intercept + per_token * n + pair * n * c) for n in (64, 256) for c in (512, 1408)]
    assert fit_context_pair(prefix, intercept, per_token) == pytest.approx(pair, rel=1e-9)
    faster = [(n, c, intercept + per_token * n - 1.0) for n, c, _ in prefix]  # noise below the prefill fit
    assert fit_context_pair(faster, intercept, per_token) == 0.0
    assert fit_context_pair([], intercept, per_token) == 0.0

"""The roofline's constants are the fit to the H100's measured tables, and they hold on the H200's."""

import numpy as np
import pytest

from hetflow.bench.roofline_check import BEFORE, CHECK_GPU, FIT_GPU, fit, grid, in_derive, relative_errors


def test_the_roofline_uses_the_constants_fitted_on_the_h100():
    assert in_derive() == pytest.approx(fit(grid(FIT_GPU)), abs=5e-4)


def test_the_recalibrated_roofline_is_closer_on_both_gpus_the_held_out_h200_included():
    for gpu in (FIT_GPU, CHECK_GPU):
        points = grid(gpu)
        before, now = (np.abs(relative_errors(points, c)) for c in (BEFORE, in_derive()))
        assert np.median(now) < 0.5 * np.median(before) and now.max() < before.max()
        assert np.median(now) < 0.12

"""HexGen-Flow 4.3: the t-test fires on a shifted window and not on an unchanged one; the grid search
keeps the alpha of lowest replayed P95."""

import random

from hetflow.core.alpha import ALPHA_GRID, AlphaTuner, best_alpha, regression_test


def window(rng, mean_s, n=200):
    return [rng.lognormvariate(0, 0.4) * mean_s for _ in range(n)]


def test_fires_on_a_shifted_window_and_not_on_an_unchanged_one():
    rng = random.Random(3)
    ref = window(rng, 10.0)
    assert not regression_test(ref, window(rng, 10.0)).regressed
    shifted = regression_test(ref, window(rng, 14.0))
    assert shifted.regressed and shifted.p95_new_s > shifted.p95_ref_s
    assert not regression_test(ref, window(rng, 6.0)).regressed      # one-sided: faster is no regression


def test_it_compares_the_windows_p95_not_their_means():
    """A heavier tail at an unchanged mean regresses; a slower bulk under an unchanged tail does not."""
    from scipy.stats import ttest_ind

    rng = random.Random(5)
    ref = sorted(window(rng, 10.0, n=400))
    cut = int(0.9 * len(ref))
    tail_heavier = [x * 0.9 for x in ref[:cut]] + [x * 1.9 for x in ref[cut:]]
    tail_heavier = [x * sum(ref) / sum(tail_heavier) for x in tail_heavier]          # the same mean
    assert ttest_ind(tail_heavier, ref, equal_var=False, alternative="greater").pvalue > 0.4
    assert regression_test(ref, tail_heavier).regressed
    median = ref[len(ref) // 2]
    bulk_slower = [max(x, median) if i < cut else x for i, x in enumerate(ref)]     # P95 untouched
    assert ttest_ind(bulk_slower, ref, equal_var=False, alternative="greater").pvalue < 0.01
    assert not regression_test(ref, bulk_slower).regressed


def test_tuner_tests_each_closed_window_against_the_previous_one():
    rng = random.Random(4)
    tuner = AlphaTuner(window_s=100.0)
    results = []
    for k in range(0, 800):                                   # two workflows a second, 200 per window
        latency = rng.lognormvariate(0, 0.4) * (10.0 if k < 600 else 16.0)
        result = tuner.observe(k / 2, latency)
        if result is not None:
            results.append(result.regressed)
    tuner_result = tuner.window_closed(400.0)
    assert results == [False, False] and tuner_result.regressed


def test_grid_search_keeps_the_alpha_of_lowest_p95():
    alpha, p95 = best_alpha(lambda a: (a - 0.3) ** 2 + 5.0)
    assert alpha == 0.3 and set(p95) == set(ALPHA_GRID)

"""Program order (issue 35): STJF on the predicted remaining tokens for chains, the critical path for DAGs."""

from dataclasses import replace

import pytest

from hetflow.core import plugins
from hetflow.core.policies.contracts import Prediction
from hetflow.core.policies.program_remaining_work import critical_path_share
from tests.factories import call, context


def key(y_hat: float, plas_s: float, atlas_s: float) -> float:
    ctx = context(0.0)
    ctx = replace(ctx, snapshot=replace(ctx.snapshot, program_service_s=plas_s, program_critical_service_s=atlas_s))
    rule = plugins.build("priority-rule", "program-remaining-work")
    return rule.priority(call(), Prediction(y_hat), ctx)[0].key


def test_a_chain_orders_by_its_predicted_remaining_tokens():
    assert key(300.0, 0.0, 0.0) == 300.0                  # no completed call yet
    assert key(300.0, 6.0, 6.0) == 300.0                  # a chain: ATLAS = PLAS
    assert key(100.0, 9.0, 9.0) < key(300.0, 1.0, 1.0)    # less left goes first, whatever it has attained


def test_a_fan_out_is_ordered_by_the_work_on_its_critical_path():
    # Autellix's example program: a 2 s root, then 3 s and 1 s in parallel: PLAS 6 s, ATLAS 5 s
    assert key(600.0, 6.0, 5.0) == pytest.approx(500.0)
    # a 1 s root, then four branches of 1 s: PLAS 5 s, ATLAS 2 s
    assert key(400.0, 5.0, 2.0) == pytest.approx(160.0)
    assert key(400.0, 5.0, 2.0) < key(400.0, 5.0, 5.0)    # same tokens left: the fan-out finishes sooner


def test_the_share_is_one_without_service_and_never_above_one():
    assert critical_path_share(0.0, 0.0) == 1.0
    assert critical_path_share(2.0, 3.0) == 1.0           # a critical path longer than the sum: clock skew
    assert critical_path_share(4.0, 0.0) == 1.0           # no critical path recorded: treated as a chain


def test_a_chain_whose_sums_differ_by_rounding_has_a_share_of_exactly_one():
    plas_s = 0.1 + 0.2 + 0.3        # 0.6000000000000001: the same call times summed in another order
    atlas_s = 0.3 + 0.2 + 0.1       # 0.6
    assert atlas_s / plas_s < 1.0
    assert critical_path_share(plas_s, atlas_s) == 1.0
    assert key(372.0, plas_s, atlas_s) == key(372.0, 0.0, 0.0) == 372.0   # equal tokens left: a tie


def test_the_receipt_names_the_rule_and_the_share():
    ctx = context(0.0)
    ctx = replace(ctx, snapshot=replace(ctx.snapshot, program_service_s=6.0, program_critical_service_s=5.0))
    choice = plugins.build("priority-rule", "program-remaining-work").priority(call(), Prediction(600.0), ctx)[1]
    assert choice.rule == "stjf:dag-critical-path"
    assert choice.scores["critical_path_share"] == pytest.approx(5 / 6)

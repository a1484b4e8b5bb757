"""The working-set filter: a new program starts only where the active programs' contexts leave room."""

from dataclasses import replace

import pytest

from hetflow.core import plugins
from hetflow.core.policies.contracts import Prediction, WaitForCapacity
from tests.factories import call, engine, snapshot


def gate(**params):
    return plugins.build("engine-filter", "working-set", params)


def test_a_new_program_keeps_only_engines_with_room_for_its_context():
    new = call(input_tokens=600, stage_index=0, stage_count=1, max_tokens=1024)  # needs 600 + 400 predicted
    crowded = replace(engine("crowded", "m"), kv_capacity_tokens=1000, resident_tokens=300)
    roomy = replace(engine("roomy", "m"), kv_capacity_tokens=1000, resident_tokens=0)
    kept = gate().keep(new, [crowded, roomy], snapshot(crowded, roomy), Prediction(400.0))
    assert [e.engine_id for e in kept] == ["roomy"]
    assert [e.engine_id for e in gate(kv_fraction=1.3).keep(new, [crowded, roomy], snapshot(crowded, roomy),
                                                            Prediction(400.0))] == ["crowded", "roomy"]


def test_a_new_program_waits_when_every_engine_is_full_and_the_hold_names_the_closest_engine():
    full = replace(engine("full", "m"), kv_capacity_tokens=1000, resident_tokens=900)
    fuller = replace(engine("fuller", "m"), kv_capacity_tokens=1000, resident_tokens=800, resident_growth_tokens=800)
    with pytest.raises(WaitForCapacity, match="working sets fill every engine") as held:
        gate(growth_share=0.25).keep(call(input_tokens=200), [fuller, full], snapshot(fuller, full), Prediction(10.0))
    # full: 900 + 210 is 110 over 1,000; fuller: 800 + 0.25 x 800 + 210 is 210 over
    assert "closest full: 900 resident + 0.25 x 0 growth to come, 110 over its 1000" in str(held.value)


def test_an_engine_no_active_program_holds_takes_even_a_program_larger_than_the_fraction():
    empty = replace(engine("empty", "m"), kv_capacity_tokens=1000, resident_tokens=0)
    busy = replace(engine("busy", "m"), kv_capacity_tokens=1000, resident_tokens=10)
    big = call(input_tokens=950, stage_count=1)
    assert gate(kv_fraction=0.5).keep(big, [empty, busy], snapshot(empty, busy), Prediction(40.0)) == [empty]


def test_a_continuing_program_always_passes():
    full = replace(engine("full", "m"), kv_capacity_tokens=1000, resident_tokens=5000)
    continuing = replace(snapshot(full), program_dispatches=(("full", 800),))
    assert gate().keep(call(input_tokens=900), [full], continuing, Prediction(10.0)) == [full]


def test_a_resumed_program_keeps_its_engine_and_moves_only_where_its_context_fits():
    home = replace(engine("home", "m"), kv_capacity_tokens=1000, resident_tokens=5000)
    crowded = replace(engine("crowded", "m"), kv_capacity_tokens=1000, resident_tokens=500)
    roomy = replace(engine("roomy", "m"), kv_capacity_tokens=1000, resident_tokens=100)
    engines = [home, crowded, roomy]
    resumed = replace(snapshot(*engines), program_dispatches=(("roomy", 100), ("home", 600)))
    kept = gate(resume_where_fits=True).keep(call(input_tokens=700), engines, resumed, Prediction(10.0))
    assert [e.engine_id for e in kept] == ["home", "roomy"]           # 500 + 710 > 1000 on "crowded"
    assert gate().keep(call(input_tokens=700), engines, resumed, Prediction(10.0)) == engines


def test_a_resumed_program_whose_engine_is_gone_waits_when_its_context_fits_nowhere():
    full = replace(engine("full", "m"), kv_capacity_tokens=1000, resident_tokens=900)
    resumed = replace(snapshot(full), program_dispatches=(("gone", 600),))
    with pytest.raises(WaitForCapacity, match="resumed off gone"):
        gate(resume_where_fits=True).keep(call(input_tokens=600), [full], resumed, Prediction(10.0))


def test_growth_share_counts_that_share_of_the_active_programs_growth_to_come():
    """300 resident now, 400 more over their stages to come: a 500-token program fits today's contexts,
    and half the growth (500 + 200 + 300 = 1000), but not all of it."""
    growing = replace(engine("growing", "m"), kv_capacity_tokens=1000, resident_tokens=300, resident_growth_tokens=400)
    new = call(input_tokens=400, stage_count=3)
    for share, kept in ((0.0, [growing]), (0.5, [growing])):
        assert gate(growth_share=share).keep(new, [growing], snapshot(growing), Prediction(100.0)) == kept
    with pytest.raises(WaitForCapacity):
        gate(growth_share=1.0).keep(new, [growing], snapshot(growing), Prediction(100.0))


@pytest.mark.parametrize("params", [{"kv_fraction": 0}, {"growth_share": -0.1}, {"growth_share": 1.5}])
def test_bad_parameters_are_refused(params):
    with pytest.raises(ValueError, match="kv_fraction"):
        gate(**params)

"""The snapshot's copy helper: the same view dataclasses.replace gives, and no field it does not have."""

import dataclasses

import pytest

from hetflow.core.snapshot import ClusterSnapshot, EngineView, snapshot_with, view_with


def _view() -> EngineView:
    return EngineView("e0", "m", "", True, 12.0, 2, 1, 3, 0.4, 9.5, 256, 8000, prefix_index_blocks=7)


def test_view_with_equals_dataclasses_replace_and_leaves_the_original():
    view = _view()
    copied = view_with(view, prefix_match_blocks=5, waiting=4)
    assert copied == dataclasses.replace(view, prefix_match_blocks=5, waiting=4)
    assert (view.prefix_match_blocks, view.waiting) == (0, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        copied.waiting = 9  # type: ignore[misc]


def test_view_with_refuses_a_field_the_view_does_not_have():
    with pytest.raises(TypeError, match="prefix_blocks"):
        view_with(_view(), prefix_blocks=3)


def test_snapshot_with_equals_dataclasses_replace_and_leaves_the_original():
    snapshot = ClusterSnapshot(5.0, (_view(),), program_model="m", program_start_s=2.0)
    copied = snapshot_with(snapshot, engines=())
    assert copied == dataclasses.replace(snapshot, engines=())
    assert snapshot.engines == (_view(),) and copied.program_model == "m"
    with pytest.raises(TypeError, match="engine_views"):
        snapshot_with(snapshot, engine_views=())
